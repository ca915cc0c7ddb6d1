-- teamcache: compatible-with-older-builds
-- teamcache: takes-table-locks
-- Stats over time (`GET /v1/caches/{ns}/stats/history`) and what hits saved in money.
--
-- History is kept as rollups: one row per namespace per minute and per hour, written by the
-- counter fold (the one folder across replicas, under its advisory lock) from the very
-- deltas it adds to the totals, so the rollups and `/stats` can never disagree and two
-- replicas can never write a point twice. Nothing on a request path writes them.
--
-- So that a point lands in the minute its events happened in (not the minute they were
-- folded in), every delta row now carries `at`: the write's own time for writes (the
-- entry's `updated_at`, the service's clock), the flush's minute for lookups (the access
-- tracker splits its counts at minute boundaries), the statement's time otherwise.
--
-- New counts beside the lookups: `writes` (rows inserted or rewritten, counted by the entry
-- triggers; a re-encryption rewrites a row without being a write and says so through
-- `teamcache.counting`), evictions by reason (inserted by the eviction statements
-- themselves, in the same statement as their DELETE), and `cost_saved_nanos`: what the
-- hits saved, in billionths of the price table's currency, priced by the service when the
-- hit happened (so a price change does not rewrite the past).
--
-- Compatible: older builds insert deltas without the new columns (their defaults: now, 0)
-- and call the same fold.

ALTER TABLE counter_deltas
    ADD COLUMN at               timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN writes           bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_expired  bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_idle     bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_size     bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_manual   bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_saved_nanos bigint NOT NULL DEFAULT 0;

ALTER TABLE namespace_counters
    ADD COLUMN writes           bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_expired  bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_idle     bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_size     bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted_manual   bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_saved_nanos bigint NOT NULL DEFAULT 0;

-- A namespace's own prices (the settings route), over the server's price file: a JSON array
-- of {"model", "input", "output"} (per million tokens), checked by the service.
ALTER TABLE namespace_settings ADD COLUMN prices jsonb;

-- `step` is 60 or 3600; `t` the step's start (UTC, aligned to the epoch). Counts are sums of
-- the step's deltas; `stored_bytes` and `entries` are the namespace's totals after the last
-- fold that touched the step.
CREATE TABLE stats_history (
    namespace           text        NOT NULL,
    step                integer     NOT NULL CHECK (step IN (60, 3600)),
    t                   timestamptz NOT NULL,
    hits                bigint      NOT NULL DEFAULT 0,
    misses              bigint      NOT NULL DEFAULT 0,
    stale               bigint      NOT NULL DEFAULT 0,
    collapsed           bigint      NOT NULL DEFAULT 0,
    bypass              bigint      NOT NULL DEFAULT 0,
    writes              bigint      NOT NULL DEFAULT 0,
    evicted_expired     bigint      NOT NULL DEFAULT 0,
    evicted_idle        bigint      NOT NULL DEFAULT 0,
    evicted_size        bigint      NOT NULL DEFAULT 0,
    evicted_manual      bigint      NOT NULL DEFAULT 0,
    input_tokens_saved  bigint      NOT NULL DEFAULT 0,
    output_tokens_saved bigint      NOT NULL DEFAULT 0,
    cost_saved_nanos    bigint      NOT NULL DEFAULT 0,
    stored_bytes        bigint      NOT NULL DEFAULT 0,
    entries             bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, step, t)
);
-- The retention trim's walk: oldest points of one step first, whatever their namespace.
CREATE INDEX stats_history_age ON stats_history (step, t);

-- When a row change happened, for the history: the write's own time (`updated_at`, the
-- service's clock) for a live write; the statement's time for an import (whose rows carry
-- the dump's times) and for a re-encryption (which keeps them): they happen now. A statement
-- says which it is through `teamcache.counting` ('import', 'rewrite'), for its transaction.
CREATE FUNCTION tc_change_time(p_written timestamptz) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN coalesce(current_setting('teamcache.counting', true), '') IN ('import', 'rewrite')
                THEN now() ELSE coalesce(p_written, now()) END
$$;

CREATE OR REPLACE FUNCTION tc_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes, writes, at)
    SELECT namespace, count(*), sum(identity_size), sum(stored_size), count(*), tc_change_time(max(updated_at))
    FROM new_rows GROUP BY namespace;
    RETURN NULL;
END $$;

-- An update is a write unless it is a re-encryption (same entries, new ciphertext).
CREATE OR REPLACE FUNCTION tc_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- A sum as a bigint, saturating: a count that reached the type's end stays there instead of
-- failing the fold (one failing chunk would stop every namespace's totals, the caps that
-- read them, and the eviction cycle that folds first).
CREATE FUNCTION tc_clamp(p_value numeric) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT least(greatest(p_value, -9223372036854775808), 9223372036854775807)::bigint
$$;

-- As 0008's, with every sum saturating (tc_clamp), and each chunk's deltas also go into the minute and hour rollups of their
-- namespace (not the store-wide row, not `_other`), bucketed by `at`. A point's bytes and
-- entries are the namespace's totals at the step's end: the totals before the fold (this
-- session holds the fold lock, so nothing else moves them) plus the chunk's changes so far.
CREATE OR REPLACE FUNCTION tc_fold_counters(p_limit bigint, p_wait boolean) RETURNS bigint LANGUAGE plpgsql AS $$
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
               tc_clamp(sum(cost_saved_nanos)) AS cost
        FROM moved
        GROUP BY GROUPING SETS ((namespace), ())
        HAVING count(*) > 0 AND (GROUPING(namespace) = 1 OR namespace <> '_other')),
    folded AS (
        INSERT INTO namespace_counters AS c (namespace, shard, entries, identity_bytes, stored_bytes, hits, misses,
                                             stale, bypass, input_tokens_saved, output_tokens_saved, collapsed,
                                             writes, evicted_expired, evicted_idle, evicted_size, evicted_manual,
                                             cost_saved_nanos)
        SELECT namespace, 0, entries, identity_bytes, stored_bytes, hits, misses, stale, bypass, tin, tout, collapsed,
               writes, ev_expired, ev_idle, ev_size, ev_manual, cost
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
               cost_saved_nanos = tc_clamp(c.cost_saved_nanos::numeric + excluded.cost_saved_nanos)
        RETURNING 1),
    buckets AS (
        SELECT m.namespace, b.step, date_bin(make_interval(secs => b.step), m.at, timestamptz 'epoch') AS t,
               tc_clamp(sum(m.hits)) AS hits, tc_clamp(sum(m.misses)) AS misses, tc_clamp(sum(m.stale)) AS stale, tc_clamp(sum(m.collapsed)) AS collapsed,
               tc_clamp(sum(m.bypass)) AS bypass, tc_clamp(sum(m.writes)) AS writes, tc_clamp(sum(m.evicted_expired)) AS ev_expired,
               tc_clamp(sum(m.evicted_idle)) AS ev_idle, tc_clamp(sum(m.evicted_size)) AS ev_size, tc_clamp(sum(m.evicted_manual)) AS ev_manual,
               tc_clamp(sum(m.input_tokens_saved)) AS tin, tc_clamp(sum(m.output_tokens_saved)) AS tout, tc_clamp(sum(m.cost_saved_nanos)) AS cost,
               tc_clamp(sum(m.stored_bytes)) AS d_bytes, tc_clamp(sum(m.entries)) AS d_entries
        FROM moved m CROSS JOIN (VALUES (60), (3600)) AS b(step)
        WHERE m.namespace <> '' AND m.namespace <> '_other'
        GROUP BY m.namespace, b.step, 3),
    -- A step's level is the folded total before this fold plus this chunk's changes up to
    -- the step's end (a running sum in time order).
    levels AS (
        SELECT b.*,
               tc_clamp(coalesce((SELECT sum(n.stored_bytes) FROM namespace_counters n
                                  WHERE n.namespace = b.namespace), 0) + sum(b.d_bytes) OVER running) AS stored_bytes,
               tc_clamp(coalesce((SELECT sum(n.entries) FROM namespace_counters n
                                  WHERE n.namespace = b.namespace), 0) + sum(b.d_entries) OVER running) AS entries
        FROM buckets b
        WINDOW running AS (PARTITION BY b.namespace, b.step ORDER BY b.t)),
    history AS (
        INSERT INTO stats_history AS h (namespace, step, t, hits, misses, stale, collapsed, bypass, writes,
                                        evicted_expired, evicted_idle, evicted_size, evicted_manual,
                                        input_tokens_saved, output_tokens_saved, cost_saved_nanos, stored_bytes,
                                        entries)
        SELECT l.namespace, l.step, l.t, l.hits, l.misses, l.stale, l.collapsed, l.bypass, l.writes, l.ev_expired,
               l.ev_idle, l.ev_size, l.ev_manual, l.tin, l.tout, l.cost, l.stored_bytes, l.entries
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
               stored_bytes = excluded.stored_bytes, entries = excluded.entries
        RETURNING 1)
    SELECT count(*) INTO v_folded FROM moved;
    RETURN v_folded;
END $$;

-- Drops up to p_limit points of one step older than p_before (the eviction cycle, in
-- batches), holding the fold's lock: the fold upserts rows in (namespace, step, t) order and
-- this walks them in (step, t) order, so the two never run at once (no lock cycle between them).
CREATE FUNCTION tc_trim_history(p_step integer, p_before timestamptz, p_limit bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
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
