-- teamcache: compatible-with-older-builds
-- Lookups answered by waiting for another caller's fill ("collapsed") get a count of their
-- own beside hits (they are hits too). A new column with a default on the totals and on the
-- deltas, and the fold adding it: builds that do not know it insert deltas without it (0).
ALTER TABLE namespace_counters ADD COLUMN collapsed bigint NOT NULL DEFAULT 0;
ALTER TABLE counter_deltas ADD COLUMN collapsed bigint NOT NULL DEFAULT 0;

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
               sum(collapsed) AS collapsed
        FROM moved
        GROUP BY GROUPING SETS ((namespace), ())
        HAVING count(*) > 0 AND (GROUPING(namespace) = 1 OR namespace <> '_other')),
    folded AS (
        INSERT INTO namespace_counters AS c (namespace, shard, entries, identity_bytes, stored_bytes, hits, misses,
                                             stale, bypass, input_tokens_saved, output_tokens_saved, collapsed)
        SELECT namespace, 0, entries, identity_bytes, stored_bytes, hits, misses, stale, bypass, tin, tout, collapsed
        FROM summed ORDER BY namespace
        ON CONFLICT (namespace, shard) DO UPDATE
           SET entries = c.entries + excluded.entries, identity_bytes = c.identity_bytes + excluded.identity_bytes,
               stored_bytes = c.stored_bytes + excluded.stored_bytes, hits = c.hits + excluded.hits,
               misses = c.misses + excluded.misses, stale = c.stale + excluded.stale,
               bypass = c.bypass + excluded.bypass,
               input_tokens_saved = c.input_tokens_saved + excluded.input_tokens_saved,
               output_tokens_saved = c.output_tokens_saved + excluded.output_tokens_saved,
               collapsed = c.collapsed + excluded.collapsed
        RETURNING 1)
    SELECT count(*) INTO v_folded FROM moved;
    RETURN v_folded;
END $$;
