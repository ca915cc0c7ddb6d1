-- Counters that no request locks.
--
-- Until now every write added its delta to a shard row of `namespace_counters`, taken
-- FOR UPDATE and held until commit. A DELETE or an eviction took its entry rows first and
-- the counter row after (through the statement trigger), a writer the other way round: two
-- lock orders, so "deadlock detected" under PUT/DELETE loops on one key, and every writer of
-- a shard queued behind the one holding it until its commit.
--
-- Now the triggers only INSERT one delta row per namespace and statement into
-- `counter_deltas` (an insert waits for no row lock), and the access tracker's flush does
-- the same with lookup counts. The service folds the deltas into `namespace_counters`
-- every second with `tc_fold_counters`, one folder at a time across replicas
-- (`pg_try_advisory_xact_lock`): it is the only writer of `namespace_counters`. Readers of
-- exact totals add the pending deltas (one statement, one snapshot: a fold is either
-- wholly visible or not at all). The hard caps in `tc_put_entry` read the folded totals
-- only, so they may lag by one fold interval of writes (see docs/consistency.md).
--
-- Not marked compatible with older builds: they would run without a folder, and their
-- totals would stop moving.

CREATE TABLE counter_deltas (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace           text   NOT NULL,
    entries             bigint NOT NULL DEFAULT 0,
    identity_bytes      bigint NOT NULL DEFAULT 0,
    stored_bytes        bigint NOT NULL DEFAULT 0,
    hits                bigint NOT NULL DEFAULT 0,
    misses              bigint NOT NULL DEFAULT 0,
    stale               bigint NOT NULL DEFAULT 0,
    bypass              bigint NOT NULL DEFAULT 0,
    input_tokens_saved  bigint NOT NULL DEFAULT 0,
    output_tokens_saved bigint NOT NULL DEFAULT 0
);

DROP FUNCTION tc_add_entry_deltas(jsonb) CASCADE;

CREATE OR REPLACE FUNCTION tc_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes)
    SELECT namespace, count(*), sum(identity_size), sum(stored_size) FROM new_rows GROUP BY namespace;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION tc_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes)
    SELECT namespace, -count(*), -sum(identity_size), -sum(stored_size) FROM old_rows GROUP BY namespace;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION tc_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes)
    SELECT namespace, sum(n), sum(identity_size), sum(stored_size)
    FROM (SELECT namespace, 1 AS n, identity_size, stored_size FROM new_rows
          UNION ALL
          SELECT namespace, -1, -identity_size, -stored_size FROM old_rows) AS changes
    GROUP BY namespace
    HAVING sum(n) <> 0 OR sum(identity_size) <> 0 OR sum(stored_size) <> 0;
    RETURN NULL;
END $$;

-- Moves up to p_limit pending deltas into the totals: per namespace, and the store-wide
-- row ('') through the empty grouping set (which also counts lookups folded under the
-- `_other` label, kept out of the per-namespace rows). Returns how many deltas it folded,
-- or -1 when another session is folding and p_wait is false (with p_wait it waits for that
-- fold, within lock_timeout: the eviction cycle needs current totals). Counters are written
-- to shard 0; the shards of 0001's design stay and are summed as before.
CREATE FUNCTION tc_fold_counters(p_limit bigint, p_wait boolean) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_folded bigint;
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(127970269162596);  -- "tcfold"
    ELSIF NOT pg_try_advisory_xact_lock(127970269162596) THEN
        RETURN -1;
    END IF;
    WITH moved AS (
        DELETE FROM counter_deltas
        WHERE id IN (SELECT id FROM counter_deltas ORDER BY id LIMIT p_limit)
        RETURNING *),
    summed AS (
        SELECT coalesce(namespace, '') AS namespace, sum(entries) AS entries, sum(identity_bytes) AS identity_bytes,
               sum(stored_bytes) AS stored_bytes, sum(hits) AS hits, sum(misses) AS misses, sum(stale) AS stale,
               sum(bypass) AS bypass, sum(input_tokens_saved) AS tin, sum(output_tokens_saved) AS tout
        FROM moved
        GROUP BY GROUPING SETS ((namespace), ())
        HAVING count(*) > 0 AND (GROUPING(namespace) = 1 OR namespace <> '_other')),
    folded AS (
        INSERT INTO namespace_counters AS c (namespace, shard, entries, identity_bytes, stored_bytes, hits, misses,
                                             stale, bypass, input_tokens_saved, output_tokens_saved)
        SELECT namespace, 0, entries, identity_bytes, stored_bytes, hits, misses, stale, bypass, tin, tout
        FROM summed ORDER BY namespace
        ON CONFLICT (namespace, shard) DO UPDATE
           SET entries = c.entries + excluded.entries, identity_bytes = c.identity_bytes + excluded.identity_bytes,
               stored_bytes = c.stored_bytes + excluded.stored_bytes, hits = c.hits + excluded.hits,
               misses = c.misses + excluded.misses, stale = c.stale + excluded.stale,
               bypass = c.bypass + excluded.bypass,
               input_tokens_saved = c.input_tokens_saved + excluded.input_tokens_saved,
               output_tokens_saved = c.output_tokens_saved + excluded.output_tokens_saved
        RETURNING 1)
    SELECT count(*) INTO v_folded FROM moved;
    RETURN v_folded;
END $$;

-- The upsert without counter locks: it locks its own entry row and nothing shared. The
-- caps are checked against the folded totals. Otherwise unchanged from 0003.
CREATE OR REPLACE FUNCTION tc_put_entry(
    p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text,
    p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text,
    p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint,
    p_now timestamptz, p_ttl_seconds bigint, p_default_ttl_seconds bigint, p_writer bigint,
    p_condition text, p_if_match text[], p_store_hard_cap bigint, p_namespace_hard_ratio float8)
RETURNS TABLE (outcome text, entry_id bigint, created_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
    v_old_size bigint;
    v_old_etag text;
    v_created timestamptz;
    v_delta bigint;
    v_total bigint;
    v_quota bigint;
    v_ttl bigint;
    v_expires timestamptz;
    v_expired boolean;
BEGIN
    SELECT s.default_ttl_seconds, s.max_bytes INTO v_ttl, v_quota FROM namespace_settings s
    WHERE s.namespace = p_namespace;
    v_expires := p_now + make_interval(secs => coalesce(p_ttl_seconds, v_ttl, p_default_ttl_seconds));
    LOOP
        SELECT e.id, e.stored_size, e.etag, e.created_at, e.expires_at <= p_now
        INTO v_id, v_old_size, v_old_etag, v_created, v_expired
        FROM entries e WHERE e.namespace = p_namespace AND e.key = p_key FOR UPDATE;

        IF FOUND AND v_expired THEN
            -- Absent to the writer: a create-only write goes ahead, a conditional replace fails.
            IF p_condition = 'match' THEN
                RETURN QUERY SELECT 'precondition_failed'::text, NULL::bigint, NULL::timestamptz, NULL::timestamptz;
                RETURN;
            END IF;
            v_delta := octet_length(p_body) - v_old_size;
            v_created := p_now;
        ELSIF FOUND THEN
            IF p_condition = 'absent'
               OR (p_condition = 'match' AND NOT (v_old_etag = ANY (p_if_match) OR '*' = ANY (p_if_match))) THEN
                RETURN QUERY SELECT 'precondition_failed'::text, v_id, v_created, NULL::timestamptz;
                RETURN;
            END IF;
            v_delta := octet_length(p_body) - v_old_size;
        ELSE
            IF p_condition = 'match' THEN
                RETURN QUERY SELECT 'precondition_failed'::text, NULL::bigint, NULL::timestamptz, NULL::timestamptz;
                RETURN;
            END IF;
            v_delta := octet_length(p_body);
        END IF;

        IF v_delta > 0 AND p_store_hard_cap > 0 THEN
            SELECT coalesce(sum(stored_bytes), 0) INTO v_total FROM namespace_counters WHERE namespace = '';
            IF v_total + v_delta > p_store_hard_cap THEN
                RETURN QUERY SELECT 'store_full'::text, v_id, v_created, NULL::timestamptz;
                RETURN;
            END IF;
        END IF;
        IF v_delta > 0 AND v_quota IS NOT NULL THEN
            SELECT coalesce(sum(stored_bytes), 0) INTO v_total FROM namespace_counters WHERE namespace = p_namespace;
            IF v_total + v_delta > v_quota * p_namespace_hard_ratio THEN
                RETURN QUERY SELECT 'store_full'::text, v_id, v_created, NULL::timestamptz;
                RETURN;
            END IF;
        END IF;

        IF v_id IS NOT NULL THEN
            UPDATE entries SET body = p_body, encoding = p_encoding, content_type = p_content_type,
                   identity_size = p_identity_size, stored_size = octet_length(p_body), etag = p_etag,
                   model = p_model, version = p_version, prompt_digest = p_prompt_digest, tags = p_tags,
                   metadata = p_metadata, input_tokens = p_input_tokens, output_tokens = p_output_tokens,
                   updated_at = p_now, expires_at = v_expires, writer_token_id = p_writer,
                   created_at = v_created
            WHERE id = v_id;
            -- A write counts as an access (LRU), unless the access tracker's flush holds the
            -- row right now: it is recording reads of it, so it is recent anyway. Skipping
            -- rather than waiting keeps writers from queueing behind flushes.
            UPDATE entry_access SET last_accessed_at = greatest(entry_access.last_accessed_at, p_now)
            WHERE entry_access.entry_id = (SELECT a.entry_id FROM entry_access a WHERE a.entry_id = v_id
                                           FOR UPDATE SKIP LOCKED);
            RETURN QUERY SELECT (CASE WHEN v_expired THEN 'created' ELSE 'replaced' END)::text, v_id, v_created,
                                v_expires;
            RETURN;
        END IF;

        INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                             model, version, prompt_digest, tags, metadata, input_tokens, output_tokens,
                             created_at, updated_at, expires_at, writer_token_id)
        VALUES (p_namespace, p_key, p_body, p_encoding, p_content_type, p_identity_size, octet_length(p_body),
                p_etag, p_model, p_version, p_prompt_digest, p_tags, p_metadata, p_input_tokens, p_output_tokens,
                p_now, p_now, v_expires, p_writer)
        ON CONFLICT ON CONSTRAINT entries_namespace_key DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
            VALUES (v_id, p_namespace, 0, p_now);
            RETURN QUERY SELECT 'created'::text, v_id, p_now, v_expires;
            RETURN;
        END IF;
        -- A concurrent writer inserted the key first: go round and treat it as existing.
    END LOOP;
END $$;
