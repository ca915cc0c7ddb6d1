-- teamcache: compatible-with-older-builds
-- Local-hit reports counted once (`POST /v1/caches/{ns}/hits` with `reporter` and `seq`).
--
-- A client's tier numbers its reports; a report whose answer was lost (a time-out after the
-- service counted it) is sent again with the same number, and must not be counted twice, or
-- the hits and savings users read would be overstated. One row per reporter and namespace
-- keeps the highest number counted: a report counts only when its number is higher (one
-- conditional upsert, on whichever replica it lands). Reporters unheard of for a week are
-- trimmed by the eviction cycle (a tier picks a new reporter id each time it starts), by a
-- scan: one row per running tier and namespace is a small table, and without an index on
-- `seen_at` each report's update can stay a heap-only one.
--
-- Compatible: older builds neither read nor write it.

CREATE TABLE hit_reporters (
    namespace text NOT NULL,
    reporter text NOT NULL,
    seq bigint NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, reporter)
);
