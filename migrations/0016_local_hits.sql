-- teamcache: compatible-with-older-builds
-- teamcache: takes-table-locks
-- Hits answered by a client's local tier (`POST /v1/caches/{ns}/hits`): counted as hits
-- (and in tokens and cost saved, as any hit) and also as `local_hits`, so `/stats`, the
-- history and the dashboard show how much of a namespace's traffic never reached the
-- service. Like `collapsed`, a part of `hits`, not beside them.
--
-- Compatible: older builds insert deltas without the column (its default, 0) and call the
-- same fold.

ALTER TABLE counter_deltas ADD COLUMN local_hits bigint NOT NULL DEFAULT 0;
ALTER TABLE namespace_counters ADD COLUMN local_hits bigint NOT NULL DEFAULT 0;
ALTER TABLE stats_history ADD COLUMN local_hits bigint NOT NULL DEFAULT 0;

-- As 0015's, carrying `local_hits` into the totals and the rollups, and keeping an old step's
-- level when late lookup counts land in it (`levels`).
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
