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

CREATE OR REPLACE FUNCTION tc_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes, writes, at)
    SELECT namespace, count(*), sum(identity_size), sum(stored_size), count(*), max(updated_at)
    FROM new_rows GROUP BY namespace;
    RETURN NULL;
END $$;

-- An update is a write unless the statement says it is not (a re-encryption sets
-- `teamcache.counting` to 'rewrite' for its transaction: same entries, new ciphertext).
CREATE OR REPLACE FUNCTION tc_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_writes boolean := coalesce(current_setting('teamcache.counting', true), '') <> 'rewrite';
BEGIN
    INSERT INTO counter_deltas (namespace, entries, identity_bytes, stored_bytes, writes, at)
    SELECT namespace, sum(n), sum(identity_size), sum(stored_size),
           CASE WHEN v_writes THEN sum(greatest(n, 0)) ELSE 0 END, coalesce(max(updated_at), now())
    FROM (SELECT namespace, 1 AS n, identity_size, stored_size, updated_at FROM new_rows
          UNION ALL
          SELECT namespace, -1, -identity_size, -stored_size, NULL FROM old_rows) AS changes
    GROUP BY namespace
    HAVING v_writes OR sum(n) <> 0 OR sum(identity_size) <> 0 OR sum(stored_size) <> 0;
    RETURN NULL;
END $$;

-- As 0008's, and each chunk's deltas also go into the minute and hour rollups of their
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
        SELECT coalesce(namespace, '') AS namespace, sum(entries) AS entries, sum(identity_bytes) AS identity_bytes,
               sum(stored_bytes) AS stored_bytes, sum(hits) AS hits, sum(misses) AS misses, sum(stale) AS stale,
               sum(bypass) AS bypass, sum(input_tokens_saved) AS tin, sum(output_tokens_saved) AS tout,
               sum(collapsed) AS collapsed, sum(writes) AS writes, sum(evicted_expired) AS ev_expired,
               sum(evicted_idle) AS ev_idle, sum(evicted_size) AS ev_size, sum(evicted_manual) AS ev_manual,
               sum(cost_saved_nanos) AS cost
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
           SET entries = c.entries + excluded.entries, identity_bytes = c.identity_bytes + excluded.identity_bytes,
               stored_bytes = c.stored_bytes + excluded.stored_bytes, hits = c.hits + excluded.hits,
               misses = c.misses + excluded.misses, stale = c.stale + excluded.stale,
               bypass = c.bypass + excluded.bypass,
               input_tokens_saved = c.input_tokens_saved + excluded.input_tokens_saved,
               output_tokens_saved = c.output_tokens_saved + excluded.output_tokens_saved,
               collapsed = c.collapsed + excluded.collapsed, writes = c.writes + excluded.writes,
               evicted_expired = c.evicted_expired + excluded.evicted_expired,
               evicted_idle = c.evicted_idle + excluded.evicted_idle,
               evicted_size = c.evicted_size + excluded.evicted_size,
               evicted_manual = c.evicted_manual + excluded.evicted_manual,
               cost_saved_nanos = c.cost_saved_nanos + excluded.cost_saved_nanos
        RETURNING 1),
    buckets AS (
        SELECT m.namespace, b.step, date_bin(make_interval(secs => b.step), m.at, timestamptz 'epoch') AS t,
               sum(m.hits) AS hits, sum(m.misses) AS misses, sum(m.stale) AS stale, sum(m.collapsed) AS collapsed,
               sum(m.bypass) AS bypass, sum(m.writes) AS writes, sum(m.evicted_expired) AS ev_expired,
               sum(m.evicted_idle) AS ev_idle, sum(m.evicted_size) AS ev_size, sum(m.evicted_manual) AS ev_manual,
               sum(m.input_tokens_saved) AS tin, sum(m.output_tokens_saved) AS tout, sum(m.cost_saved_nanos) AS cost,
               sum(m.stored_bytes) AS d_bytes, sum(m.entries) AS d_entries
        FROM moved m CROSS JOIN (VALUES (60), (3600)) AS b(step)
        WHERE m.namespace <> '' AND m.namespace <> '_other'
        GROUP BY m.namespace, b.step, 3),
    -- A step's level is the folded total before this fold plus this chunk's changes up to
    -- the step's end (a running sum in time order).
    levels AS (
        SELECT b.*,
               coalesce((SELECT sum(n.stored_bytes) FROM namespace_counters n WHERE n.namespace = b.namespace), 0)
                   + sum(b.d_bytes) OVER running AS stored_bytes,
               coalesce((SELECT sum(n.entries) FROM namespace_counters n WHERE n.namespace = b.namespace), 0)
                   + sum(b.d_entries) OVER running AS entries
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
           SET hits = h.hits + excluded.hits, misses = h.misses + excluded.misses, stale = h.stale + excluded.stale,
               collapsed = h.collapsed + excluded.collapsed, bypass = h.bypass + excluded.bypass,
               writes = h.writes + excluded.writes, evicted_expired = h.evicted_expired + excluded.evicted_expired,
               evicted_idle = h.evicted_idle + excluded.evicted_idle,
               evicted_size = h.evicted_size + excluded.evicted_size,
               evicted_manual = h.evicted_manual + excluded.evicted_manual,
               input_tokens_saved = h.input_tokens_saved + excluded.input_tokens_saved,
               output_tokens_saved = h.output_tokens_saved + excluded.output_tokens_saved,
               cost_saved_nanos = h.cost_saved_nanos + excluded.cost_saved_nanos,
               stored_bytes = excluded.stored_bytes, entries = excluded.entries
        RETURNING 1)
    SELECT count(*) INTO v_folded FROM moved;
    RETURN v_folded;
END $$;

-- Drops up to p_limit points of one step older than p_before (the eviction cycle, in batches).
CREATE FUNCTION tc_trim_history(p_step integer, p_before timestamptz, p_limit bigint) RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM stats_history WHERE (namespace, step, t) IN (
            SELECT namespace, step, t FROM stats_history WHERE step = p_step AND t < p_before
            ORDER BY t LIMIT p_limit)
        RETURNING 1)
    SELECT count(*) FROM gone;
$$;
