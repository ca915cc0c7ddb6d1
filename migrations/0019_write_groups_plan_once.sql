-- teamcache: compatible-with-older-builds
-- A write group's statement as a function that always runs one cached, generic plan.
--
-- The service sent its group statement (`EntryGroupWrite`) as a prepared statement of its
-- own. PostgreSQL's plan cache plans a prepared statement anew for its first five runs on a
-- connection, then keeps a generic plan only if that plan's estimate is below the average
-- of those five. A generic plan cannot see the arrays' lengths and takes each `unnest` for
-- 10 rows; a group of fewer than ~10 writes (every group, under a light or moderate load)
-- estimates cheaper than that, so the cache kept planning every group: 0.5-1 ms of
-- PostgreSQL's CPU a group, more than the group's writes cost at 8 a group
-- (bench/results/2026-12-07-writes-9.md). Behind a transaction pooler nothing is prepared,
-- so every group was planned at any load.
--
-- `SET plan_cache_mode = force_generic_plan` on the function makes its one statement use
-- the generic plan from its first run in each session, PL/pgSQL caching it per session (per
-- server connection behind a pooler too). The setting holds while the function runs, for its
-- statement and for what that fires (the entries' triggers, whose statements are lookups or
-- take no parameters: a trigger given an optional filter later would get a generic plan here),
-- and no longer: no other statement of the session is affected (the listing's and the predicate
-- evictions' optional filters need their custom plans). The caller's statement is only the
-- call, whose plan is trivial.
--
-- The statement is the one `EntryGroupWrite` sent until now, unchanged; `$n` are this
-- function's arguments in the same order (`EntryGroupWrite.run` lists them). `#variable_conflict use_column`: the result's
-- names are also columns of the statement.
--
-- Compatible: a function added; older builds keep sending their own statement.
CREATE FUNCTION tc_write_group(
    text[], bytea[], bytea[], text[], text[], int8[], text[], text[], text[], text[], text[], text[],
    int8[], int8[], int8[], int8[], timestamptz, int8, int8, float8, bool, int4[])
RETURNS TABLE (ordinal bigint, entry_id bigint, expires_at timestamptz, created boolean, admitted boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
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
END $$;
