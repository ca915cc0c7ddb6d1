-- teamcache: compatible-with-older-builds
-- `teamcache import`: one entry of a dump, stored exactly as exported (its timestamps, window
-- and hit count), under the same hard caps as every write. A new function only: older builds
-- never call it.
--
-- p_policy: 'skip' keeps an existing live entry, 'replace' overwrites it, 'newer' overwrites
-- it only when the dump's entry was updated later. Whatever the policy, an existing entry
-- that already is the dump's entry (same ETag, update time and expiry) is left alone and
-- reported 'unchanged': importing the same dump twice changes nothing the second time.
-- An entry whose expiry and window have already passed is not imported ('expired'): under
-- replace or newer it would overwrite a live entry with a dead one.
-- p_expires_at NULL: the namespace's default TTL (else p_default_ttl_seconds) from p_now.
-- p_last_accessed_at NULL: p_now (the idle clock starts now, not at the dump's last write).
-- The caps count the deltas not folded yet too (this transaction's own earlier entries
-- among them): a bulk import must not pass a cap by a whole chunk.
-- Outcomes: imported, unchanged, skipped, expired, store_full.
CREATE FUNCTION tc_import_entry(
    p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text,
    p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text,
    p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint,
    p_created_at timestamptz, p_updated_at timestamptz, p_expires_at timestamptz,
    p_stale_while_revalidate integer, p_hit_count bigint, p_last_accessed_at timestamptz, p_policy text,
    p_now timestamptz, p_default_ttl_seconds bigint, p_store_hard_cap bigint, p_namespace_hard_ratio float8)
RETURNS text
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
    v_old_size bigint;
    v_old_etag text;
    v_old_updated timestamptz;
    v_old_expires timestamptz;
    v_delta bigint;
    v_total bigint;
    v_quota bigint;
    v_ttl bigint;
    v_expires timestamptz;
BEGIN
    SELECT s.max_bytes, s.default_ttl_seconds INTO v_quota, v_ttl FROM namespace_settings s
    WHERE s.namespace = p_namespace;
    v_expires := coalesce(p_expires_at, p_now + make_interval(secs => coalesce(v_ttl, p_default_ttl_seconds)::float8));
    IF v_expires + make_interval(secs => p_stale_while_revalidate::float8) <= p_now THEN
        RETURN 'expired';
    END IF;
    LOOP
        SELECT e.id, e.stored_size, e.etag, e.updated_at, e.expires_at
        INTO v_id, v_old_size, v_old_etag, v_old_updated, v_old_expires
        FROM entries e WHERE e.namespace = p_namespace AND e.key = p_key FOR UPDATE;

        IF FOUND THEN
            IF v_old_etag = p_etag AND v_old_updated = p_updated_at AND v_old_expires = v_expires THEN
                RETURN 'unchanged';
            END IF;
            -- An expired entry is absent to every write (0003), so to an import too.
            IF v_old_expires > p_now AND (p_policy = 'skip' OR (p_policy = 'newer' AND v_old_updated >= p_updated_at)) THEN
                RETURN 'skipped';
            END IF;
            v_delta := octet_length(p_body) - v_old_size;
        ELSE
            v_delta := octet_length(p_body);
        END IF;

        IF v_delta > 0 AND p_store_hard_cap > 0 THEN
            SELECT coalesce(sum(stored_bytes), 0)
                   + (SELECT coalesce(sum(d.stored_bytes), 0) FROM counter_deltas d)
            INTO v_total FROM namespace_counters WHERE namespace = '';
            IF v_total + v_delta > p_store_hard_cap THEN
                RETURN 'store_full';
            END IF;
        END IF;
        IF v_delta > 0 AND v_quota IS NOT NULL THEN
            SELECT coalesce(sum(stored_bytes), 0)
                   + (SELECT coalesce(sum(d.stored_bytes), 0) FROM counter_deltas d WHERE d.namespace = p_namespace)
            INTO v_total FROM namespace_counters WHERE namespace = p_namespace;
            IF v_total + v_delta > v_quota * p_namespace_hard_ratio THEN
                RETURN 'store_full';
            END IF;
        END IF;

        IF v_id IS NOT NULL THEN
            UPDATE entries SET body = p_body, encoding = p_encoding, content_type = p_content_type,
                   identity_size = p_identity_size, stored_size = octet_length(p_body), etag = p_etag,
                   model = p_model, version = p_version, prompt_digest = p_prompt_digest, tags = p_tags,
                   metadata = p_metadata, input_tokens = p_input_tokens, output_tokens = p_output_tokens,
                   created_at = p_created_at, updated_at = p_updated_at, expires_at = v_expires,
                   writer_token_id = NULL, stale_while_revalidate = p_stale_while_revalidate
            WHERE id = v_id;
            -- As tc_put_entry: skipped rather than waited for while the access flush holds it
            -- (docs/consistency.md: a transaction that waits holds only entry rows).
            UPDATE entry_access SET hit_count = greatest(entry_access.hit_count, p_hit_count),
                   last_accessed_at = greatest(entry_access.last_accessed_at, coalesce(p_last_accessed_at, p_now))
            WHERE entry_access.entry_id = (SELECT a.entry_id FROM entry_access a WHERE a.entry_id = v_id
                                           FOR UPDATE SKIP LOCKED);
            RETURN 'imported';
        END IF;

        INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                             model, version, prompt_digest, tags, metadata, input_tokens, output_tokens,
                             created_at, updated_at, expires_at, writer_token_id, stale_while_revalidate)
        VALUES (p_namespace, p_key, p_body, p_encoding, p_content_type, p_identity_size, octet_length(p_body),
                p_etag, p_model, p_version, p_prompt_digest, p_tags, p_metadata, p_input_tokens, p_output_tokens,
                p_created_at, p_updated_at, v_expires, NULL, p_stale_while_revalidate)
        ON CONFLICT ON CONSTRAINT entries_namespace_key DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
            VALUES (v_id, p_namespace, p_hit_count, coalesce(p_last_accessed_at, p_now));
            RETURN 'imported';
        END IF;
        -- A concurrent writer inserted the key first: go round and treat it as existing.
    END LOOP;
END $$;
