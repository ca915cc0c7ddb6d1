-- teamcache: compatible-with-older-builds
-- Stale-while-revalidate (RFC 5861): for this many seconds after an entry expires, a lookup
-- is still answered from it, and the first one is handed a refresh lease. A column with a
-- default: builds that do not know it create entries without a window (0) and leave the
-- window as it was when they replace one.
-- No CHECK here: validating one would scan the whole table under an exclusive lock, a pause
-- an expand step must not cause. The service writes 0..TEAMCACHE_MAX_TTL only.
ALTER TABLE entries ADD COLUMN stale_while_revalidate integer NOT NULL DEFAULT 0;

-- The upsert that writes the window too: 0005's function with one more parameter.
CREATE FUNCTION tc_put_entry(
    p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text,
    p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text,
    p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint,
    p_now timestamptz, p_ttl_seconds bigint, p_default_ttl_seconds bigint, p_writer bigint,
    p_condition text, p_if_match text[], p_store_hard_cap bigint, p_namespace_hard_ratio float8,
    p_stale_while_revalidate integer)
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
                   created_at = v_created, stale_while_revalidate = p_stale_while_revalidate
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
                             created_at, updated_at, expires_at, writer_token_id, stale_while_revalidate)
        VALUES (p_namespace, p_key, p_body, p_encoding, p_content_type, p_identity_size, octet_length(p_body),
                p_etag, p_model, p_version, p_prompt_digest, p_tags, p_metadata, p_input_tokens, p_output_tokens,
                p_now, p_now, v_expires, p_writer, p_stale_while_revalidate)
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

-- The older signature, which older builds call, stays: it writes entries with no window
-- (a write without the window means none, whoever makes it).
CREATE OR REPLACE FUNCTION tc_put_entry(
    p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text,
    p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text,
    p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint,
    p_now timestamptz, p_ttl_seconds bigint, p_default_ttl_seconds bigint, p_writer bigint,
    p_condition text, p_if_match text[], p_store_hard_cap bigint, p_namespace_hard_ratio float8)
RETURNS TABLE (outcome text, entry_id bigint, created_at timestamptz, expires_at timestamptz)
LANGUAGE sql AS $$
    SELECT * FROM tc_put_entry(p_namespace, p_key, p_body, p_encoding, p_content_type, p_identity_size, p_etag,
        p_model, p_version, p_prompt_digest, p_tags, p_metadata, p_input_tokens, p_output_tokens, p_now,
        p_ttl_seconds, p_default_ttl_seconds, p_writer, p_condition, p_if_match, p_store_hard_cap,
        p_namespace_hard_ratio, 0)
$$;
