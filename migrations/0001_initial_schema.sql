-- TeamCache schema, version 1.

-- One row per cached response, keyed by (namespace, key bytes). The service compresses
-- bodies itself, so `body` is STORAGE EXTERNAL: large values move out of line without
-- PostgreSQL compressing them a second time.
CREATE TABLE entries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace       text        NOT NULL,
    key             bytea       NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 512),
    body            bytea       NOT NULL,
    encoding        text        NOT NULL CHECK (encoding IN ('identity', 'gzip')),
    content_type    text        NOT NULL,
    identity_size   bigint      NOT NULL CHECK (identity_size >= 0),
    stored_size     bigint      NOT NULL CHECK (stored_size >= 0),
    etag            text        NOT NULL,
    model           text,
    version         text,
    prompt_digest   text,
    tags            text[]      NOT NULL DEFAULT '{}',
    metadata        jsonb,
    input_tokens    bigint      NOT NULL DEFAULT 0,
    output_tokens   bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    writer_token_id bigint,
    CONSTRAINT entries_namespace_key UNIQUE (namespace, key)
);
ALTER TABLE entries ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE INDEX entries_expires_at ON entries (expires_at);
CREATE INDEX entries_model ON entries (namespace, model) WHERE model IS NOT NULL;
CREATE INDEX entries_version ON entries (namespace, version) WHERE version IS NOT NULL;
CREATE INDEX entries_created_at ON entries (namespace, created_at);
CREATE INDEX entries_tags ON entries USING gin (tags);

-- Access statistics live apart from `entries`: the access tracker's batched flushes
-- update only this narrow row and its small indexes, never the wide entry row with its
-- tag, model and expiry indexes. fillfactor leaves room for the new row versions.
CREATE TABLE entry_access (
    entry_id         bigint      PRIMARY KEY REFERENCES entries (id) ON DELETE CASCADE,
    namespace        text        NOT NULL,
    hit_count        bigint      NOT NULL DEFAULT 0,
    last_accessed_at timestamptz NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX entry_access_top ON entry_access (namespace, hit_count DESC);
CREATE INDEX entry_access_top_global ON entry_access (hit_count DESC);
CREATE INDEX entry_access_lru ON entry_access (namespace, last_accessed_at);
CREATE INDEX entry_access_idle ON entry_access (last_accessed_at);

-- Exact per-namespace totals without COUNT(*). Each writer adds its delta to one of 16
-- shards (by backend pid), so concurrent writers in one namespace do not queue on one row
-- lock; readers sum the shards. namespace '' (never a valid namespace) holds the totals
-- of the whole store. Lookup counts are added by the access tracker's flushes.
CREATE TABLE namespace_counters (
    namespace           text     NOT NULL,
    shard               smallint NOT NULL,
    entries             bigint   NOT NULL DEFAULT 0,
    identity_bytes      bigint   NOT NULL DEFAULT 0,
    stored_bytes        bigint   NOT NULL DEFAULT 0,
    hits                bigint   NOT NULL DEFAULT 0,
    misses              bigint   NOT NULL DEFAULT 0,
    stale               bigint   NOT NULL DEFAULT 0,
    bypass              bigint   NOT NULL DEFAULT 0,
    input_tokens_saved  bigint   NOT NULL DEFAULT 0,
    output_tokens_saved bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, shard)
);

-- Adds (namespace, entries, identity, stored) deltas to this backend's shard, and to the
-- store-wide row through the empty grouping set.
CREATE FUNCTION tc_add_entry_deltas(deltas jsonb) RETURNS void LANGUAGE sql AS $$
    INSERT INTO namespace_counters AS c (namespace, shard, entries, identity_bytes, stored_bytes)
    SELECT coalesce(d.namespace, ''), (pg_backend_pid() % 16)::smallint,
           sum(d.entries), sum(d.identity_bytes), sum(d.stored_bytes)
    FROM jsonb_to_recordset(deltas) AS d(namespace text, entries bigint, identity_bytes bigint, stored_bytes bigint)
    GROUP BY GROUPING SETS ((d.namespace), ())
    HAVING count(*) > 0
    ON CONFLICT (namespace, shard) DO UPDATE
       SET entries = c.entries + excluded.entries,
           identity_bytes = c.identity_bytes + excluded.identity_bytes,
           stored_bytes = c.stored_bytes + excluded.stored_bytes
$$;

-- Statement-level triggers with transition tables keep the totals exact on every path
-- (API writes, evictions, cascades, manual SQL) at one counter update per statement.
CREATE FUNCTION tc_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tc_add_entry_deltas(coalesce(
        (SELECT jsonb_agg(jsonb_build_object('namespace', namespace, 'entries', 1,
                'identity_bytes', identity_size, 'stored_bytes', stored_size)) FROM new_rows), '[]'));
    RETURN NULL;
END $$;

CREATE FUNCTION tc_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tc_add_entry_deltas(coalesce(
        (SELECT jsonb_agg(jsonb_build_object('namespace', namespace, 'entries', -1,
                'identity_bytes', -identity_size, 'stored_bytes', -stored_size)) FROM old_rows), '[]'));
    RETURN NULL;
END $$;

CREATE FUNCTION tc_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tc_add_entry_deltas(coalesce(
        (SELECT jsonb_agg(d) FROM (
            SELECT jsonb_build_object('namespace', namespace, 'entries', 0,
                   'identity_bytes', identity_size, 'stored_bytes', stored_size) AS d FROM new_rows
            UNION ALL
            SELECT jsonb_build_object('namespace', namespace, 'entries', 0,
                   'identity_bytes', -identity_size, 'stored_bytes', -stored_size) FROM old_rows) AS changes),
        '[]'));
    RETURN NULL;
END $$;

CREATE TRIGGER entries_count_insert AFTER INSERT ON entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_count_inserted();
CREATE TRIGGER entries_count_delete AFTER DELETE ON entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_count_deleted();
CREATE TRIGGER entries_count_update AFTER UPDATE ON entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_count_updated();

-- Per-namespace settings, set through the admin route or the CLI.
CREATE TABLE namespace_settings (
    namespace           text        PRIMARY KEY,
    default_ttl_seconds bigint      CHECK (default_ttl_seconds > 0),
    max_bytes           bigint      CHECK (max_bytes > 0),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

-- API tokens: only the SHA-256 of the secret is stored.
CREATE TABLE api_tokens (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text        NOT NULL,
    secret_hash       bytea       NOT NULL UNIQUE,
    namespace_pattern text        NOT NULL,
    scopes            text[]      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz,
    revoked_at        timestamptz
);

-- The whole upsert in one round trip. Conditions and caps are decided under the row lock,
-- so a create-only race yields exactly one 'created', and concurrent writers of one key
-- replace the row whole (never a mixed body). Without p_ttl_seconds the namespace's default
-- TTL applies, else p_default_ttl_seconds. p_condition: 'none', 'absent' (If-None-Match: *)
-- or 'match' (If-Match; '*' matches any existing entry). Returns one row: outcome is
-- 'created', 'replaced', 'precondition_failed' or 'store_full'.
CREATE FUNCTION tc_put_entry(
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
BEGIN
    SELECT s.default_ttl_seconds, s.max_bytes INTO v_ttl, v_quota FROM namespace_settings s
    WHERE s.namespace = p_namespace;
    v_expires := p_now + make_interval(secs => coalesce(p_ttl_seconds, v_ttl, p_default_ttl_seconds));
    LOOP
        SELECT e.id, e.stored_size, e.etag, e.created_at INTO v_id, v_old_size, v_old_etag, v_created
        FROM entries e WHERE e.namespace = p_namespace AND e.key = p_key FOR UPDATE;

        IF FOUND THEN
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
                   updated_at = p_now, expires_at = v_expires, writer_token_id = p_writer
            WHERE id = v_id;
            UPDATE entry_access SET last_accessed_at = p_now WHERE entry_access.entry_id = v_id;
            RETURN QUERY SELECT 'replaced'::text, v_id, v_created, v_expires;
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
