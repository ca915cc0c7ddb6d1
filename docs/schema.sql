-- The schema the migrations in migrations/ make, as `pg_dump --schema-only --no-owner
-- --no-privileges` prints it (PostgreSQL 15). Generated, not edited: a test
-- (SchemaDocumentTests) fails when it is not current. To regenerate:
--   TEAMCACHE_UPDATE_SCHEMA=1 swift test --filter SchemaDocumentTests
--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: tc_access_rows_deleted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_access_rows_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM entry_access WHERE entry_id = ANY (ARRAY(SELECT id FROM old_rows));
    RETURN NULL;
END $$;

--
-- Name: tc_access_rows_truncated(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_access_rows_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM entry_access;
    RETURN NULL;
END $$;

--
-- Name: tc_change_time(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_change_time(p_written timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN coalesce(current_setting('teamcache.counting', true), '') IN ('import', 'rewrite')
                THEN now() ELSE coalesce(p_written, now()) END
$$;

--
-- Name: tc_clamp(numeric); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_clamp(p_value numeric) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT least(greatest(p_value, -9223372036854775808), 9223372036854775807)::bigint
$$;

--
-- Name: tc_count_deleted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_count_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes)
    SELECT namespace, -count(*), -sum(identity_size), -sum(stored_size) FROM old_rows GROUP BY namespace;
    RETURN NULL;
END $$;

--
-- Name: tc_count_inserted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_count_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes, writes, at)
    SELECT namespace, count(*), sum(identity_size), sum(stored_size), count(*), tc_change_time(max(updated_at))
    FROM new_rows GROUP BY namespace;
    RETURN NULL;
END $$;

--
-- Name: tc_count_updated(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_count_updated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_writes boolean := coalesce(current_setting('teamcache.counting', true), '') <> 'rewrite';
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes, writes, at)
    SELECT namespace, sum(n), sum(identity_size), sum(stored_size),
           CASE WHEN v_writes THEN sum(greatest(n, 0)) ELSE 0 END, tc_change_time(max(updated_at))
    FROM (SELECT namespace, 1 AS n, identity_size, stored_size, updated_at FROM new_rows
          UNION ALL
          SELECT namespace, -1, -identity_size, -stored_size, NULL FROM old_rows) AS changes
    GROUP BY namespace
    HAVING v_writes OR sum(n) <> 0 OR sum(identity_size) <> 0 OR sum(stored_size) <> 0;
    RETURN NULL;
END $$;

--
-- Name: tc_drop_prompt_in_encrypted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_drop_prompt_in_encrypted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM data_keys k WHERE k.namespace = NEW.namespace) THEN
        NEW.prompt_digest := NULL;
    END IF;
    RETURN NEW;
END $$;

--
-- Name: tc_feed_new_rows(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_feed_new_rows() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO entry_changes (namespace, key, kind, etag, identity_size, stored_size, content_type, expires_at,
                               stale_while_revalidate)
    SELECT namespace, key, 'put', etag, identity_size, stored_size, content_type, expires_at, stale_while_revalidate
    FROM new_rows;
    RETURN NULL;
END $$;

--
-- Name: tc_feed_old_rows(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_feed_old_rows() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO entry_changes (namespace, key, kind) SELECT namespace, key, 'delete' FROM old_rows;
    RETURN NULL;
END $$;

--
-- Name: tc_feed_truncated(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_feed_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_last bigint;
BEGIN
    UPDATE change_feed_head SET last = last + 1 RETURNING last INTO v_last;
    INSERT INTO change_feed_floors (namespace, floor)
    SELECT namespace, v_last FROM entry_changes
    UNION SELECT namespace, v_last FROM namespace_counters WHERE namespace <> ''
    ON CONFLICT (namespace) DO UPDATE SET floor = EXCLUDED.floor;
    -- DELETE, not TRUNCATE: a feed reader holds entry_changes while it joins entries (which
    -- the TRUNCATE holds), and TRUNCATE's lock would wait for it: a deadlock.
    DELETE FROM entry_changes;
    RETURN NULL;
END $$;

--
-- Name: tc_feed_updated_rows(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_feed_updated_rows() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO entry_changes (namespace, key, kind, etag, identity_size, stored_size, content_type, expires_at,
                               stale_while_revalidate)
    SELECT n.namespace, n.key, 'put', n.etag, n.identity_size, n.stored_size, n.content_type, n.expires_at,
           n.stale_while_revalidate
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE (n.etag, n.expires_at, n.content_type, n.stale_while_revalidate, n.key)
          IS DISTINCT FROM (o.etag, o.expires_at, o.content_type, o.stale_while_revalidate, o.key);
    RETURN NULL;
END $$;

--
-- Name: tc_fold_counters(bigint, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_fold_counters(p_limit bigint, p_wait boolean) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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
        SELECT coalesce(namespace, '') AS namespace, tc_clamp(sum(entries)) AS entries, tc_clamp(sum(identity_bytes)) AS identity_bytes,
               tc_clamp(sum(stored_bytes)) AS stored_bytes, tc_clamp(sum(hits)) AS hits, tc_clamp(sum(misses)) AS misses, tc_clamp(sum(stale)) AS stale,
               tc_clamp(sum(bypass)) AS bypass, tc_clamp(sum(input_tokens_saved)) AS tin, tc_clamp(sum(output_tokens_saved)) AS tout,
               tc_clamp(sum(collapsed)) AS collapsed, tc_clamp(sum(writes)) AS writes, tc_clamp(sum(evicted_expired)) AS ev_expired,
               tc_clamp(sum(evicted_idle)) AS ev_idle, tc_clamp(sum(evicted_size)) AS ev_size, tc_clamp(sum(evicted_manual)) AS ev_manual,
               tc_clamp(sum(cost_saved_nanos)) AS cost, tc_clamp(sum(local_hits)) AS local_hits
        FROM moved
        GROUP BY GROUPING SETS ((namespace), ())
        HAVING count(*) > 0 AND (GROUPING(namespace) = 1 OR namespace <> '_other')),
    folded AS (
        INSERT INTO namespace_counters AS c (namespace, shard, entries, identity_bytes, stored_bytes, hits, misses,
                                             stale, bypass, input_tokens_saved, output_tokens_saved, collapsed,
                                             writes, evicted_expired, evicted_idle, evicted_size, evicted_manual,
                                             cost_saved_nanos, local_hits)
        SELECT namespace, 0, entries, identity_bytes, stored_bytes, hits, misses, stale, bypass, tin, tout, collapsed,
               writes, ev_expired, ev_idle, ev_size, ev_manual, cost, local_hits
        FROM summed ORDER BY namespace
        ON CONFLICT (namespace, shard) DO UPDATE
           SET entries = tc_clamp(c.entries::numeric + excluded.entries), identity_bytes = tc_clamp(c.identity_bytes::numeric + excluded.identity_bytes),
               stored_bytes = tc_clamp(c.stored_bytes::numeric + excluded.stored_bytes), hits = tc_clamp(c.hits::numeric + excluded.hits),
               misses = tc_clamp(c.misses::numeric + excluded.misses), stale = tc_clamp(c.stale::numeric + excluded.stale),
               bypass = tc_clamp(c.bypass::numeric + excluded.bypass),
               input_tokens_saved = tc_clamp(c.input_tokens_saved::numeric + excluded.input_tokens_saved),
               output_tokens_saved = tc_clamp(c.output_tokens_saved::numeric + excluded.output_tokens_saved),
               collapsed = tc_clamp(c.collapsed::numeric + excluded.collapsed), writes = tc_clamp(c.writes::numeric + excluded.writes),
               evicted_expired = tc_clamp(c.evicted_expired::numeric + excluded.evicted_expired),
               evicted_idle = tc_clamp(c.evicted_idle::numeric + excluded.evicted_idle),
               evicted_size = tc_clamp(c.evicted_size::numeric + excluded.evicted_size),
               evicted_manual = tc_clamp(c.evicted_manual::numeric + excluded.evicted_manual),
               cost_saved_nanos = tc_clamp(c.cost_saved_nanos::numeric + excluded.cost_saved_nanos),
               local_hits = tc_clamp(c.local_hits::numeric + excluded.local_hits)
        RETURNING 1),
    buckets AS (
        SELECT m.namespace, b.step, date_bin(make_interval(secs => b.step), m.at, timestamptz 'epoch') AS t,
               tc_clamp(sum(m.hits)) AS hits, tc_clamp(sum(m.misses)) AS misses, tc_clamp(sum(m.stale)) AS stale, tc_clamp(sum(m.collapsed)) AS collapsed,
               tc_clamp(sum(m.bypass)) AS bypass, tc_clamp(sum(m.writes)) AS writes, tc_clamp(sum(m.evicted_expired)) AS ev_expired,
               tc_clamp(sum(m.evicted_idle)) AS ev_idle, tc_clamp(sum(m.evicted_size)) AS ev_size, tc_clamp(sum(m.evicted_manual)) AS ev_manual,
               tc_clamp(sum(m.input_tokens_saved)) AS tin, tc_clamp(sum(m.output_tokens_saved)) AS tout, tc_clamp(sum(m.cost_saved_nanos)) AS cost,
               tc_clamp(sum(m.local_hits)) AS local_hits,
               tc_clamp(sum(m.stored_bytes)) AS d_bytes, tc_clamp(sum(m.entries)) AS d_entries
        FROM moved m CROSS JOIN (VALUES (60), (3600)) AS b(step)
        WHERE m.namespace <> '' AND m.namespace <> '_other'
        GROUP BY m.namespace, b.step, 3),
    -- A step's level is the folded total before this fold plus this chunk's changes up to
    -- the step's end (a running sum in time order).
    -- A step whose deltas in this chunk, and in every earlier step of it, change no level (late
    -- lookup counts: the access tracker flushes minutes that writes folded before may follow)
    -- keeps the level already kept at or before it; without that, an old step took the totals
    -- as of this fold, later writes included.
    levels AS (
        SELECT b.*,
               CASE WHEN sum(abs(b.d_bytes) + abs(b.d_entries)) OVER running = 0 AND prior.t IS NOT NULL
                    THEN prior.stored_bytes
                    ELSE tc_clamp(coalesce((SELECT sum(n.stored_bytes) FROM namespace_counters n
                                            WHERE n.namespace = b.namespace), 0) + sum(b.d_bytes) OVER running)
               END AS stored_bytes,
               CASE WHEN sum(abs(b.d_bytes) + abs(b.d_entries)) OVER running = 0 AND prior.t IS NOT NULL
                    THEN prior.entries
                    ELSE tc_clamp(coalesce((SELECT sum(n.entries) FROM namespace_counters n
                                            WHERE n.namespace = b.namespace), 0) + sum(b.d_entries) OVER running)
               END AS entries
        FROM buckets b
        LEFT JOIN LATERAL (SELECT h.t, h.stored_bytes, h.entries FROM stats_history h
                           WHERE h.namespace = b.namespace AND h.step = b.step AND h.t <= b.t
                           ORDER BY h.t DESC LIMIT 1) AS prior ON true
        WINDOW running AS (PARTITION BY b.namespace, b.step ORDER BY b.t)),
    history AS (
        INSERT INTO stats_history AS h (namespace, step, t, hits, misses, stale, collapsed, bypass, writes,
                                        evicted_expired, evicted_idle, evicted_size, evicted_manual,
                                        input_tokens_saved, output_tokens_saved, cost_saved_nanos, stored_bytes,
                                        entries, local_hits)
        SELECT l.namespace, l.step, l.t, l.hits, l.misses, l.stale, l.collapsed, l.bypass, l.writes, l.ev_expired,
               l.ev_idle, l.ev_size, l.ev_manual, l.tin, l.tout, l.cost, l.stored_bytes, l.entries, l.local_hits
        FROM levels l
        ORDER BY l.namespace, l.step, l.t
        ON CONFLICT (namespace, step, t) DO UPDATE
           SET hits = tc_clamp(h.hits::numeric + excluded.hits), misses = tc_clamp(h.misses::numeric + excluded.misses), stale = tc_clamp(h.stale::numeric + excluded.stale),
               collapsed = tc_clamp(h.collapsed::numeric + excluded.collapsed), bypass = tc_clamp(h.bypass::numeric + excluded.bypass),
               writes = tc_clamp(h.writes::numeric + excluded.writes), evicted_expired = tc_clamp(h.evicted_expired::numeric + excluded.evicted_expired),
               evicted_idle = tc_clamp(h.evicted_idle::numeric + excluded.evicted_idle),
               evicted_size = tc_clamp(h.evicted_size::numeric + excluded.evicted_size),
               evicted_manual = tc_clamp(h.evicted_manual::numeric + excluded.evicted_manual),
               input_tokens_saved = tc_clamp(h.input_tokens_saved::numeric + excluded.input_tokens_saved),
               output_tokens_saved = tc_clamp(h.output_tokens_saved::numeric + excluded.output_tokens_saved),
               cost_saved_nanos = tc_clamp(h.cost_saved_nanos::numeric + excluded.cost_saved_nanos),
               local_hits = tc_clamp(h.local_hits::numeric + excluded.local_hits),
               stored_bytes = excluded.stored_bytes, entries = excluded.entries
        RETURNING 1)
    SELECT count(*) INTO v_folded FROM moved;
    RETURN v_folded;
END $$;

--
-- Name: tc_import_entry(text, bytea, bytea, text, text, bigint, text, text, text, text, text[], jsonb, bigint, bigint, timestamp with time zone, timestamp with time zone, timestamp with time zone, integer, bigint, timestamp with time zone, text, timestamp with time zone, bigint, bigint, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_import_entry(p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text, p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text, p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint, p_created_at timestamp with time zone, p_updated_at timestamp with time zone, p_expires_at timestamp with time zone, p_stale_while_revalidate integer, p_hit_count bigint, p_last_accessed_at timestamp with time zone, p_policy text, p_now timestamp with time zone, p_default_ttl_seconds bigint, p_store_hard_cap bigint, p_namespace_hard_ratio double precision) RETURNS text
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: tc_notify_everything(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_notify_everything() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('teamcache_keys', '*');
    RETURN NULL;
END $$;

--
-- Name: tc_notify_new_rows(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_notify_new_rows() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('teamcache_keys', payload)
    FROM (SELECT DISTINCT CASE WHEN count(*) OVER (PARTITION BY namespace) > 64 THEN namespace || '/'
                               ELSE namespace || '/' || encode(key, 'hex') END AS payload
          FROM new_rows) AS payloads;
    RETURN NULL;
END $$;

--
-- Name: tc_notify_old_rows(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_notify_old_rows() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('teamcache_keys', payload)
    FROM (SELECT DISTINCT CASE WHEN count(*) OVER (PARTITION BY namespace) > 64 THEN namespace || '/'
                               ELSE namespace || '/' || encode(key, 'hex') END AS payload
          FROM old_rows) AS payloads;
    RETURN NULL;
END $$;

--
-- Name: tc_put_entry(text, bytea, bytea, text, text, bigint, text, text, text, text, text[], jsonb, bigint, bigint, timestamp with time zone, bigint, bigint, bigint, text, text[], bigint, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_put_entry(p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text, p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text, p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint, p_now timestamp with time zone, p_ttl_seconds bigint, p_default_ttl_seconds bigint, p_writer bigint, p_condition text, p_if_match text[], p_store_hard_cap bigint, p_namespace_hard_ratio double precision) RETURNS TABLE(outcome text, entry_id bigint, created_at timestamp with time zone, expires_at timestamp with time zone)
    LANGUAGE sql
    AS $$
    SELECT * FROM tc_put_entry(p_namespace, p_key, p_body, p_encoding, p_content_type, p_identity_size, p_etag,
        p_model, p_version, p_prompt_digest, p_tags, p_metadata, p_input_tokens, p_output_tokens, p_now,
        p_ttl_seconds, p_default_ttl_seconds, p_writer, p_condition, p_if_match, p_store_hard_cap,
        p_namespace_hard_ratio, 0)
$$;

--
-- Name: tc_put_entry(text, bytea, bytea, text, text, bigint, text, text, text, text, text[], jsonb, bigint, bigint, timestamp with time zone, bigint, bigint, bigint, text, text[], bigint, double precision, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_put_entry(p_namespace text, p_key bytea, p_body bytea, p_encoding text, p_content_type text, p_identity_size bigint, p_etag text, p_model text, p_version text, p_prompt_digest text, p_tags text[], p_metadata jsonb, p_input_tokens bigint, p_output_tokens bigint, p_now timestamp with time zone, p_ttl_seconds bigint, p_default_ttl_seconds bigint, p_writer bigint, p_condition text, p_if_match text[], p_store_hard_cap bigint, p_namespace_hard_ratio double precision, p_stale_while_revalidate integer) RETURNS TABLE(outcome text, entry_id bigint, created_at timestamp with time zone, expires_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: tc_refuse_plain_in_encrypted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_refuse_plain_in_encrypted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM data_keys) AND EXISTS (
        SELECT 1 FROM new_rows n
        WHERE n.encoding NOT LIKE 'aes256gcm/%' AND EXISTS (SELECT 1 FROM data_keys k WHERE k.namespace = n.namespace))
    THEN
        RAISE EXCEPTION 'a plain body for an encrypted namespace' USING ERRCODE = 'TCE01';
    END IF;
    RETURN NULL;
END $$;

--
-- Name: tc_sequence_changes(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_sequence_changes(p_limit integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_last bigint;
    v_timeline text;
    v_now_timeline text;
    v_numbered bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM entry_changes WHERE seq IS NULL) THEN
        RETURN (SELECT last FROM change_feed_head);
    END IF;
    SELECT last, timeline INTO v_last, v_timeline FROM change_feed_head FOR UPDATE;
    v_now_timeline := tc_wal_timeline();
    IF v_now_timeline IS DISTINCT FROM v_timeline THEN
        -- A new timeline: numbers after this head may have been handed out (and lost) on the
        -- history it branched from. Skip far past them (10^12: room for millions of failovers).
        INSERT INTO change_feed_gaps (after_seq, before_seq) VALUES (v_last, v_last + 1000000000000);
        v_last := v_last + 1000000000000;
    END IF;
    WITH pending AS (
        SELECT ctid AS row_id, row_number() OVER (ORDER BY id) AS n
        FROM (SELECT ctid, id FROM entry_changes WHERE seq IS NULL ORDER BY id LIMIT p_limit) AS next_rows),
    numbered AS (
        UPDATE entry_changes c SET seq = v_last + p.n, numbered_at = clock_timestamp()
        FROM pending p WHERE c.ctid = p.row_id RETURNING c.seq)
    SELECT max(seq) INTO v_numbered FROM numbered;
    UPDATE change_feed_head SET last = coalesce(v_numbered, v_last), timeline = v_now_timeline;
    RETURN coalesce(v_numbered, v_last);
END $$;

--
-- Name: tc_trim_changes(timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_trim_changes(p_before timestamp with time zone, p_limit integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_count bigint;
BEGIN
    WITH gone AS (
        DELETE FROM entry_changes WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM entry_changes WHERE numbered_at < p_before LIMIT p_limit))
          AND numbered_at < p_before
        RETURNING namespace, seq),
    floors AS (
        INSERT INTO change_feed_floors (namespace, floor) SELECT namespace, max(seq) FROM gone GROUP BY namespace
        ON CONFLICT (namespace) DO UPDATE SET floor = greatest(change_feed_floors.floor, EXCLUDED.floor)
        RETURNING 1)
    -- (A data-modifying WITH runs to completion whether or not the query reads it.)
    SELECT count(*) INTO v_count FROM gone;
    RETURN v_count;
END $$;

--
-- Name: tc_trim_history(integer, timestamp with time zone, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_trim_history(p_step integer, p_before timestamp with time zone, p_limit bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_trimmed bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(127970269162596);  -- "tcfold"
    WITH gone AS (
        DELETE FROM stats_history WHERE (namespace, step, t) IN (
            SELECT namespace, step, t FROM stats_history WHERE step = p_step AND t < p_before
            ORDER BY t LIMIT p_limit)
        RETURNING 1)
    SELECT count(*) INTO v_trimmed FROM gone;
    RETURN v_trimmed;
END $$;

--
-- Name: tc_wal_timeline(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_wal_timeline() RETURNS text
    LANGUAGE sql
    AS $$
    SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)
$$;

--
-- Name: tc_write_group(text[], bytea[], bytea[], text[], text[], bigint[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], bigint[], timestamp with time zone, bigint, bigint, double precision, boolean, integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tc_write_group(text[], bytea[], bytea[], text[], text[], bigint[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], bigint[], timestamp with time zone, bigint, bigint, double precision, boolean, integer[]) RETURNS TABLE(ordinal bigint, entry_id bigint, expires_at timestamp with time zone, created boolean, admitted boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT b.*, s.default_ttl_seconds AS namespace_ttl, s.max_bytes AS quota,
               -- A create-only write over a fresh entry fails its precondition before any cap
               -- is asked (as in tc_put_entry): it grows nothing, and is admitted to fail.
               CASE WHEN $21::bool AND coalesce(o.fresh, false) THEN 0
                    ELSE octet_length(b.body) - coalesce(o.stored_size, 0) END AS growth,
               coalesce(o.fresh, false) AS was_fresh
        FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::text[],
                    $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int8[], $14::int8[],
                    $15::int8[], $16::int8[], $22::int4[])
             WITH ORDINALITY AS b(namespace, key, body, encoding, content_type, identity_size, etag, model,
                                  version, prompt_digest, tags, metadata, input_tokens, output_tokens, ttl,
                                  writer, stale_while_revalidate, ordinal)
        -- LATERAL: one index probe per row. A generic plan (it knows nothing of the arrays'
        -- lengths) would otherwise hash-join a scan of the table.
        LEFT JOIN LATERAL (SELECT default_ttl_seconds, max_bytes FROM namespace_settings
                           WHERE namespace = b.namespace) s ON true
        LEFT JOIN LATERAL (SELECT stored_size, expires_at > coalesce($17::timestamptz, now()) AS fresh
                           FROM entries WHERE namespace = b.namespace AND key = b.key) o
            ON true),
    -- What the caps count each row against: the store's and its namespace's folded totals.
    sized AS (
        SELECT i.*, f.store_stored, f.namespace_stored,
               (($19::int8 = 0 OR f.store_stored + i.growth <= $19::int8)
                AND (i.quota IS NULL OR f.namespace_stored + i.growth <= i.quota * $20::float8)) AS fits_alone
        FROM input i
        CROSS JOIN LATERAL (
            SELECT (SELECT coalesce(sum(stored_bytes), 0) FROM namespace_counters WHERE namespace = '') AS store_stored,
                   (SELECT coalesce(sum(c.stored_bytes), 0) FROM namespace_counters c
                    WHERE c.namespace = i.namespace) AS namespace_stored) f),
    -- A row's running sums count the rows before it that could be admitted at all: one too
    -- large to fit even alone is refused and takes no room from the rows after it. Never over
    -- a cap: a row that fits alone counts whether or not the sums then admit it.
    admitted AS (
        SELECT i.* FROM (
            SELECT i.*,
                   sum(CASE WHEN i.fits_alone THEN i.growth ELSE 0 END)
                       OVER (PARTITION BY i.namespace ORDER BY i.ordinal) AS namespace_growth,
                   sum(CASE WHEN i.fits_alone THEN i.growth ELSE 0 END) OVER (ORDER BY i.ordinal) AS store_growth
            FROM sized i) AS i
        WHERE i.growth <= 0
           OR (i.fits_alone
               AND ($19::int8 = 0 OR i.store_stored + i.store_growth <= $19::int8)
               AND (i.quota IS NULL OR i.namespace_stored + i.namespace_growth <= i.quota * $20::float8))),
    written AS (
        INSERT INTO entries AS e (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                  model, version, prompt_digest, tags, metadata, input_tokens, output_tokens,
                                  created_at, updated_at, expires_at, writer_token_id, stale_while_revalidate)
        SELECT namespace, key, body, encoding, content_type, identity_size, octet_length(body), etag, model,
               version, prompt_digest,
               CASE WHEN tags = '[]' THEN '{}'::text[] ELSE ARRAY(SELECT jsonb_array_elements_text(tags::jsonb)) END,
               metadata::jsonb, input_tokens, output_tokens, coalesce($17::timestamptz, now()), coalesce($17::timestamptz, now()),
               coalesce($17::timestamptz, now()) + make_interval(secs => coalesce(ttl, namespace_ttl, $18::int8)), writer, stale_while_revalidate
        FROM admitted ORDER BY namespace COLLATE "C", key
        ON CONFLICT ON CONSTRAINT entries_namespace_key DO UPDATE
           SET body = excluded.body, encoding = excluded.encoding, content_type = excluded.content_type,
               identity_size = excluded.identity_size, stored_size = excluded.stored_size, etag = excluded.etag,
               model = excluded.model, version = excluded.version, prompt_digest = excluded.prompt_digest,
               tags = excluded.tags, metadata = excluded.metadata, input_tokens = excluded.input_tokens,
               output_tokens = excluded.output_tokens, updated_at = excluded.updated_at, expires_at = excluded.expires_at,
               stale_while_revalidate = excluded.stale_while_revalidate, writer_token_id = excluded.writer_token_id,
               created_at = CASE WHEN e.expires_at <= coalesce($17::timestamptz, now()) THEN excluded.created_at ELSE e.created_at END
           WHERE NOT $21::bool OR e.expires_at <= coalesce($17::timestamptz, now())
        RETURNING e.id, e.namespace, e.key, e.expires_at, e.created_at = coalesce($17::timestamptz, now()) AS created,
                  e.xmax = 0 AS inserted),
    accessed AS (
        -- A write counts as an access (LRU), to the minute: an access row touched within the
        -- last minute is left as it is, which spares a new version of it and of its five
        -- index entries for most rewrites of a busy key. The access row is the entry's own:
        -- only a flush (which never waits) or a delete holding the entry row could hold it.
        INSERT INTO entry_access AS a (entry_id, namespace, hit_count, last_accessed_at)
        SELECT id, namespace, 0, coalesce($17::timestamptz, now()) FROM written ORDER BY id
        ON CONFLICT (entry_id) DO UPDATE SET last_accessed_at = excluded.last_accessed_at
           WHERE a.last_accessed_at < excluded.last_accessed_at - interval '1 minute')
    -- Created: a new row was inserted (xmax 0: no conflict, even when the snapshot held a
    -- fresh entry that a delete removed meanwhile), or one past its freshness was replaced
    -- (its created_at is now then) and the statement's snapshot held no fresh entry there.
    -- The timestamp alone cannot tell: a fresh entry written at the same instant (a test's
    -- clock) carries it too. The snapshot alone cannot either: a writer elsewhere may have
    -- inserted the key since (then the conflict updates its row, created at its own instant).
    SELECT i.ordinal, w.id AS entry_id, w.expires_at,
           (w.inserted OR (w.created AND NOT i.was_fresh)) AS created,
           (a.ordinal IS NOT NULL) AS admitted
    FROM input i
    LEFT JOIN admitted a ON a.ordinal = i.ordinal
    LEFT JOIN written w ON w.namespace = i.namespace AND w.key = i.key
    ORDER BY i.ordinal;
END $_$;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: api_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_tokens (
    id bigint NOT NULL,
    name text NOT NULL,
    secret_hash bytea NOT NULL,
    namespace_pattern text NOT NULL,
    scopes text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone
);

--
-- Name: api_tokens_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.api_tokens ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.api_tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: change_feed_floors; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.change_feed_floors (
    namespace text NOT NULL,
    floor bigint NOT NULL
);

--
-- Name: change_feed_gaps; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.change_feed_gaps (
    after_seq bigint NOT NULL,
    before_seq bigint NOT NULL
);

--
-- Name: change_feed_head; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.change_feed_head (
    only_row boolean DEFAULT true NOT NULL,
    last bigint NOT NULL,
    timeline text NOT NULL,
    CONSTRAINT change_feed_head_only_row_check CHECK (only_row)
);

--
-- Name: counter_deltas; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.counter_deltas (
    id bigint NOT NULL,
    namespace text NOT NULL,
    entries bigint DEFAULT 0 NOT NULL,
    identity_bytes bigint DEFAULT 0 NOT NULL,
    stored_bytes bigint DEFAULT 0 NOT NULL,
    hits bigint DEFAULT 0 NOT NULL,
    misses bigint DEFAULT 0 NOT NULL,
    stale bigint DEFAULT 0 NOT NULL,
    bypass bigint DEFAULT 0 NOT NULL,
    input_tokens_saved bigint DEFAULT 0 NOT NULL,
    output_tokens_saved bigint DEFAULT 0 NOT NULL,
    collapsed bigint DEFAULT 0 NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    writes bigint DEFAULT 0 NOT NULL,
    evicted_expired bigint DEFAULT 0 NOT NULL,
    evicted_idle bigint DEFAULT 0 NOT NULL,
    evicted_size bigint DEFAULT 0 NOT NULL,
    evicted_manual bigint DEFAULT 0 NOT NULL,
    cost_saved_nanos bigint DEFAULT 0 NOT NULL,
    local_hits bigint DEFAULT 0 NOT NULL
);

--
-- Name: counter_deltas_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.counter_deltas ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.counter_deltas_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: data_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.data_keys (
    id bigint NOT NULL,
    namespace text NOT NULL,
    wrapped bytea NOT NULL,
    master_key_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: data_keys_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.data_keys ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.data_keys_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: entries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.entries (
    id bigint NOT NULL,
    namespace text NOT NULL,
    key bytea NOT NULL,
    body bytea NOT NULL,
    encoding text NOT NULL,
    content_type text NOT NULL,
    identity_size bigint NOT NULL,
    stored_size bigint NOT NULL,
    etag text NOT NULL,
    model text,
    version text,
    prompt_digest text,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    metadata jsonb,
    input_tokens bigint DEFAULT 0 NOT NULL,
    output_tokens bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    writer_token_id bigint,
    stale_while_revalidate integer DEFAULT 0 NOT NULL,
    CONSTRAINT entries_identity_size_check CHECK ((identity_size >= 0)),
    CONSTRAINT entries_key_check CHECK (((octet_length(key) >= 1) AND (octet_length(key) <= 512))),
    CONSTRAINT entries_stored_size_check CHECK ((stored_size >= 0))
);
ALTER TABLE ONLY public.entries ALTER COLUMN body SET STORAGE EXTERNAL;

--
-- Name: entries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.entries ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.entries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: entry_access; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.entry_access (
    entry_id bigint NOT NULL,
    namespace text NOT NULL,
    hit_count bigint DEFAULT 0 NOT NULL,
    last_accessed_at timestamp with time zone NOT NULL
)
WITH (fillfactor='70');

--
-- Name: entry_changes_id; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.entry_changes_id
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: entry_changes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.entry_changes (
    id bigint DEFAULT nextval('public.entry_changes_id'::regclass) NOT NULL,
    seq bigint,
    namespace text NOT NULL,
    key bytea NOT NULL,
    kind text NOT NULL,
    etag text,
    identity_size bigint,
    stored_size bigint,
    content_type text,
    expires_at timestamp with time zone,
    stale_while_revalidate integer,
    numbered_at timestamp with time zone
);

--
-- Name: eviction_schedule; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.eviction_schedule (
    id smallint NOT NULL,
    last_slot bigint DEFAULT 0 NOT NULL,
    CONSTRAINT eviction_schedule_id_check CHECK ((id = 1))
);

--
-- Name: hit_reporters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.hit_reporters (
    namespace text NOT NULL,
    reporter text NOT NULL,
    seq bigint NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: leases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.leases (
    namespace text NOT NULL,
    key bytea NOT NULL,
    id_digest bytea NOT NULL,
    holder bigint,
    granted_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: namespace_counters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.namespace_counters (
    namespace text NOT NULL,
    shard smallint NOT NULL,
    entries bigint DEFAULT 0 NOT NULL,
    identity_bytes bigint DEFAULT 0 NOT NULL,
    stored_bytes bigint DEFAULT 0 NOT NULL,
    hits bigint DEFAULT 0 NOT NULL,
    misses bigint DEFAULT 0 NOT NULL,
    stale bigint DEFAULT 0 NOT NULL,
    bypass bigint DEFAULT 0 NOT NULL,
    input_tokens_saved bigint DEFAULT 0 NOT NULL,
    output_tokens_saved bigint DEFAULT 0 NOT NULL,
    collapsed bigint DEFAULT 0 NOT NULL,
    writes bigint DEFAULT 0 NOT NULL,
    evicted_expired bigint DEFAULT 0 NOT NULL,
    evicted_idle bigint DEFAULT 0 NOT NULL,
    evicted_size bigint DEFAULT 0 NOT NULL,
    evicted_manual bigint DEFAULT 0 NOT NULL,
    cost_saved_nanos bigint DEFAULT 0 NOT NULL,
    local_hits bigint DEFAULT 0 NOT NULL
);

--
-- Name: namespace_settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.namespace_settings (
    namespace text NOT NULL,
    default_ttl_seconds bigint,
    max_bytes bigint,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    prices jsonb,
    CONSTRAINT namespace_settings_default_ttl_seconds_check CHECK ((default_ttl_seconds > 0)),
    CONSTRAINT namespace_settings_max_bytes_check CHECK ((max_bytes > 0))
);

--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    keeps_older_builds_working boolean DEFAULT false NOT NULL
);

--
-- Name: stats_history; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.stats_history (
    namespace text NOT NULL,
    step integer NOT NULL,
    t timestamp with time zone NOT NULL,
    hits bigint DEFAULT 0 NOT NULL,
    misses bigint DEFAULT 0 NOT NULL,
    stale bigint DEFAULT 0 NOT NULL,
    collapsed bigint DEFAULT 0 NOT NULL,
    bypass bigint DEFAULT 0 NOT NULL,
    writes bigint DEFAULT 0 NOT NULL,
    evicted_expired bigint DEFAULT 0 NOT NULL,
    evicted_idle bigint DEFAULT 0 NOT NULL,
    evicted_size bigint DEFAULT 0 NOT NULL,
    evicted_manual bigint DEFAULT 0 NOT NULL,
    input_tokens_saved bigint DEFAULT 0 NOT NULL,
    output_tokens_saved bigint DEFAULT 0 NOT NULL,
    cost_saved_nanos bigint DEFAULT 0 NOT NULL,
    stored_bytes bigint DEFAULT 0 NOT NULL,
    entries bigint DEFAULT 0 NOT NULL,
    local_hits bigint DEFAULT 0 NOT NULL,
    CONSTRAINT stats_history_step_check CHECK ((step = ANY (ARRAY[60, 3600])))
);

--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);

--
-- Name: api_tokens api_tokens_secret_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_secret_hash_key UNIQUE (secret_hash);

--
-- Name: change_feed_floors change_feed_floors_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.change_feed_floors
    ADD CONSTRAINT change_feed_floors_pkey PRIMARY KEY (namespace);

--
-- Name: change_feed_head change_feed_head_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.change_feed_head
    ADD CONSTRAINT change_feed_head_pkey PRIMARY KEY (only_row);

--
-- Name: counter_deltas counter_deltas_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.counter_deltas
    ADD CONSTRAINT counter_deltas_pkey PRIMARY KEY (id);

--
-- Name: data_keys data_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.data_keys
    ADD CONSTRAINT data_keys_pkey PRIMARY KEY (id);

--
-- Name: entries entries_encoding_check; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.entries
    ADD CONSTRAINT entries_encoding_check CHECK ((encoding = ANY (ARRAY['identity'::text, 'gzip'::text, 'aes256gcm/identity'::text, 'aes256gcm/gzip'::text]))) NOT VALID;

--
-- Name: entries entries_namespace_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entries
    ADD CONSTRAINT entries_namespace_key UNIQUE (namespace, key);

--
-- Name: entries entries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entries
    ADD CONSTRAINT entries_pkey PRIMARY KEY (id);

--
-- Name: entry_access entry_access_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entry_access
    ADD CONSTRAINT entry_access_pkey PRIMARY KEY (entry_id);

--
-- Name: eviction_schedule eviction_schedule_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.eviction_schedule
    ADD CONSTRAINT eviction_schedule_pkey PRIMARY KEY (id);

--
-- Name: hit_reporters hit_reporters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.hit_reporters
    ADD CONSTRAINT hit_reporters_pkey PRIMARY KEY (namespace, reporter);

--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (namespace, key);

--
-- Name: namespace_counters namespace_counters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespace_counters
    ADD CONSTRAINT namespace_counters_pkey PRIMARY KEY (namespace, shard);

--
-- Name: namespace_settings namespace_settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespace_settings
    ADD CONSTRAINT namespace_settings_pkey PRIMARY KEY (namespace);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: stats_history stats_history_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.stats_history
    ADD CONSTRAINT stats_history_pkey PRIMARY KEY (namespace, step, t);

--
-- Name: data_keys_namespace; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX data_keys_namespace ON public.data_keys USING btree (namespace, id);

--
-- Name: entries_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entries_created_at ON public.entries USING btree (namespace, created_at);

--
-- Name: entries_expires_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entries_expires_at ON public.entries USING btree (expires_at);

--
-- Name: entries_model; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entries_model ON public.entries USING btree (namespace, model) WHERE (model IS NOT NULL);

--
-- Name: entries_tags; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entries_tags ON public.entries USING gin (tags);

--
-- Name: entries_version; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entries_version ON public.entries USING btree (namespace, version) WHERE (version IS NOT NULL);

--
-- Name: entry_access_idle; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entry_access_idle ON public.entry_access USING btree (last_accessed_at);

--
-- Name: entry_access_lru; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entry_access_lru ON public.entry_access USING btree (namespace, last_accessed_at);

--
-- Name: entry_access_top; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entry_access_top ON public.entry_access USING btree (namespace, hit_count DESC);

--
-- Name: entry_access_top_global; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entry_access_top_global ON public.entry_access USING btree (hit_count DESC);

--
-- Name: entry_changes_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entry_changes_age ON public.entry_changes USING brin (numbered_at);

--
-- Name: entry_changes_feed; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX entry_changes_feed ON public.entry_changes USING btree (namespace, seq) WHERE (seq IS NOT NULL);

--
-- Name: entry_changes_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX entry_changes_pending ON public.entry_changes USING btree (id) WHERE (seq IS NULL);

--
-- Name: leases_expires_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_expires_at ON public.leases USING btree (expires_at);

--
-- Name: stats_history_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX stats_history_age ON public.stats_history USING btree (step, t);

--
-- Name: entries entries_access_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_access_delete AFTER DELETE ON public.entries REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_access_rows_deleted();

--
-- Name: entries entries_access_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_access_truncate AFTER TRUNCATE ON public.entries FOR EACH STATEMENT EXECUTE FUNCTION public.tc_access_rows_truncated();

--
-- Name: entries entries_count_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_count_delete AFTER DELETE ON public.entries REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_count_deleted();

--
-- Name: entries entries_count_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_count_insert AFTER INSERT ON public.entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_count_inserted();

--
-- Name: entries entries_count_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_count_update AFTER UPDATE ON public.entries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_count_updated();

--
-- Name: entries entries_feed_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_feed_delete AFTER DELETE ON public.entries REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_feed_old_rows();

--
-- Name: entries entries_feed_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_feed_insert AFTER INSERT ON public.entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_feed_new_rows();

--
-- Name: entries entries_feed_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_feed_truncate AFTER TRUNCATE ON public.entries FOR EACH STATEMENT EXECUTE FUNCTION public.tc_feed_truncated();

--
-- Name: entries entries_feed_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_feed_update AFTER UPDATE ON public.entries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_feed_updated_rows();

--
-- Name: entries entries_no_prompt_when_encrypted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_no_prompt_when_encrypted BEFORE INSERT OR UPDATE OF prompt_digest, namespace ON public.entries FOR EACH ROW WHEN ((new.prompt_digest IS NOT NULL)) EXECUTE FUNCTION public.tc_drop_prompt_in_encrypted();

--
-- Name: entries entries_notify_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_notify_delete AFTER DELETE ON public.entries REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_notify_old_rows();

--
-- Name: entries entries_notify_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_notify_insert AFTER INSERT ON public.entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_notify_new_rows();

--
-- Name: entries entries_notify_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_notify_truncate AFTER TRUNCATE ON public.entries FOR EACH STATEMENT EXECUTE FUNCTION public.tc_notify_everything();

--
-- Name: entries entries_notify_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_notify_update AFTER UPDATE ON public.entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_notify_new_rows();

--
-- Name: entries entries_sealed_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_sealed_insert AFTER INSERT ON public.entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_refuse_plain_in_encrypted();

--
-- Name: entries entries_sealed_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER entries_sealed_update AFTER UPDATE ON public.entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_refuse_plain_in_encrypted();

--
-- Name: leases leases_notify_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER leases_notify_delete AFTER DELETE ON public.leases REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.tc_notify_old_rows();

--
-- PostgreSQL database dump complete
--
