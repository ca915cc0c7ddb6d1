-- teamcache: compatible-with-older-builds
-- The change feed (`GET /v1/caches/{ns}/changes`): every committed change to an entry, in an
-- order a follower can replay.
--
-- Written by triggers, so no change can commit without its feed row, whichever build (or
-- psql session) made it; older builds write the rows without knowing.
--
-- Why not order by an identity column: ids are taken when a row is inserted, not when its
-- transaction commits, so a reader could see id 11 committed while id 10 is still in flight,
-- move its cursor past 10 and never see it. Instead a row starts with no `seq`, and a
-- sequencer (`tc_sequence_changes`, run by readers and by the eviction cycle) numbers the
-- rows committed so far, one run at a time under the head row's lock. A reader's snapshot
-- therefore sees a prefix of the runs: every row numbered at or below the head it sees, and
-- nothing numbered later can appear below it. Two changes to one key are numbered in commit
-- order: the second writer waited for the first's row lock, so its row was inserted (and
-- given a larger id) after the first committed, and no run can see the second without the
-- first. Changes to different keys commute, so any order of them replays to the same store.
-- No write may commit between the floors below and the triggers: it would have neither.
LOCK TABLE entries IN SHARE ROW EXCLUSIVE MODE;

CREATE SEQUENCE entry_changes_id;
CREATE TABLE entry_changes (
    -- Insertion order: the sequencer numbers committed rows by it.
    id                     bigint      NOT NULL DEFAULT nextval('entry_changes_id'),
    -- The feed position; NULL until a sequencer run numbers the row.
    seq                    bigint,
    namespace              text        NOT NULL,
    key                    bytea       NOT NULL,
    -- 'put' (created or replaced) or 'delete' (deleted, evicted).
    kind                   text        NOT NULL,
    etag                   text,
    identity_size          bigint,
    stored_size            bigint,
    content_type           text,
    expires_at             timestamptz,
    stale_while_revalidate integer,
    -- When the sequencer numbered it: retention counts from here, so a change committed by a
    -- long transaction is not trimmed (raising the floor past current cursors) as it appears.
    numbered_at            timestamptz
);
-- The sequencer's work list: rows not numbered yet, in insertion order.
CREATE INDEX entry_changes_pending ON entry_changes (id) WHERE seq IS NULL;
-- A namespace's feed, read from a cursor.
CREATE UNIQUE INDEX entry_changes_feed ON entry_changes (namespace, seq) WHERE seq IS NOT NULL;
-- Trimming by age: rows are numbered in time order, so a BRIN index costs almost nothing.
CREATE INDEX entry_changes_age ON entry_changes USING brin (numbered_at);

-- The last number handed out. One row: its lock orders the sequencer's runs. `timeline`:
-- the WAL timeline it was handed out on (see tc_sequence_changes).
CREATE TABLE change_feed_head (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    last     bigint  NOT NULL,
    timeline text    NOT NULL
);
-- Numbers never handed out on this database's history: after a failover to a standby that
-- had not replayed the last commits (or a restore to a point in time), the old primary may
-- have handed out numbers after the new one's head. The new timeline skips a gap, so a cursor
-- inside one (from the lost history) answers 410 instead of silently skipping the changes
-- that the new timeline numbers again.
CREATE TABLE change_feed_gaps (
    after_seq  bigint NOT NULL,
    before_seq bigint NOT NULL
);
-- Per namespace, the highest number no longer in the feed (trimmed, or lost to a TRUNCATE):
-- a cursor below it may have missed changes, so it answers 410 Gone (resync from an export).
CREATE TABLE change_feed_floors (
    namespace text   PRIMARY KEY,
    floor     bigint NOT NULL
);

-- The timeline the primary writes WAL on now (a promotion or a point-in-time restore starts
-- a new one).
CREATE FUNCTION tc_wal_timeline() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)
$$;

-- Entries stored before the feed existed have no feed rows: following such a namespace from
-- cursor 0 would miss them, so its floor starts at 1 (and the head with it).
INSERT INTO change_feed_head (last, timeline) VALUES (1, tc_wal_timeline());
INSERT INTO change_feed_floors (namespace, floor) SELECT DISTINCT namespace, 1 FROM entries;

CREATE FUNCTION tc_feed_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO entry_changes (namespace, key, kind, etag, identity_size, stored_size, content_type, expires_at,
                               stale_while_revalidate)
    SELECT namespace, key, 'put', etag, identity_size, stored_size, content_type, expires_at, stale_while_revalidate
    FROM new_rows;
    RETURN NULL;
END $$;

-- A rewrite that changes nothing a follower sees (a re-encryption: same ETag, expiry, type
-- and window) is not a change.
CREATE FUNCTION tc_feed_updated_rows() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE FUNCTION tc_feed_old_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO entry_changes (namespace, key, kind) SELECT namespace, key, 'delete' FROM old_rows;
    RETURN NULL;
END $$;

-- A TRUNCATE removes keys without row triggers: the feed cannot say which, so every namespace
-- it knows of gets a floor above every cursor handed out (their followers resync), and the
-- feed starts over. The head moves on by one, so no cursor from before is current.
CREATE FUNCTION tc_feed_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER entries_feed_insert AFTER INSERT ON entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_feed_new_rows();
CREATE TRIGGER entries_feed_update AFTER UPDATE ON entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_feed_updated_rows();
CREATE TRIGGER entries_feed_delete AFTER DELETE ON entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_feed_old_rows();
CREATE TRIGGER entries_feed_truncate AFTER TRUNCATE ON entries
    FOR EACH STATEMENT EXECUTE FUNCTION tc_feed_truncated();

-- Numbers up to p_limit committed rows, in insertion order, after the head; returns the new
-- head. With nothing pending it only reads the head: no lock, no transaction id, no WAL (a row
-- committed after that check is numbered by a later run, above this head). The head's row lock is taken first, in its own statement: the numbering statement's
-- snapshot (a new one per statement in a volatile function under READ COMMITTED) is then
-- taken after the previous run committed, so it sees that run's numbers and never numbers a
-- row twice. Run it in a transaction of its own (autocommit), never in REPEATABLE READ.
CREATE FUNCTION tc_sequence_changes(p_limit integer) RETURNS bigint LANGUAGE plpgsql AS $$
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

-- Drops up to p_limit rows numbered before p_before, raising their namespaces' floors;
-- returns how many went.
CREATE FUNCTION tc_trim_changes(p_before timestamptz, p_limit integer) RETURNS bigint LANGUAGE plpgsql AS $$
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
