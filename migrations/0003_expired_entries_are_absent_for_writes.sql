-- An entry past its freshness is absent for writes, as it is for reads: `If-None-Match: *`
-- creates over it (201, not 412), `If-Match` cannot replace it (412), and a write over it
-- is reported as `created`, with a new `created_at`. Until the eviction job removes it, an
-- expired row still answers reads that allow staleness (`max-stale`). DELETE follows the
-- same rule in the service (404 for an expired entry, which is left to the eviction job).
-- The function is otherwise unchanged from 0002.

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
    -- Counter rows first: this backend's shard of the namespace and of the store-wide row,
    -- in that order, before any entry row. The statement triggers would otherwise take them
    -- after the entry row, so two writers sharing a shard (one of them batched) could lock
    -- in opposite orders: a deadlock PostgreSQL breaks only after deadlock_timeout.
    PERFORM 1 FROM namespace_counters
    WHERE namespace IN (p_namespace, '') AND shard = (pg_backend_pid() % 16)::smallint
    ORDER BY namespace FOR UPDATE;
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
            -- rather than waiting keeps writers from queueing (or deadlocking) behind flushes.
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
