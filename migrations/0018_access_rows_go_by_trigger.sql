-- teamcache: compatible-with-older-builds
-- teamcache: takes-table-locks
-- An entry's access row goes with the entry through statement triggers instead of a foreign
-- key with ON DELETE CASCADE.
--
-- The key's check ran for every access row inserted, one SPI query per row that probes
-- `entries` and locks the entry row just inserted (FOR KEY SHARE): 1.9 ms of a 500-entry
-- import chunk's 15 ms, and the same per new entry of a PUT. It never refused anything: every
-- path that inserts an access row (a write group, an import chunk, tc_put_entry,
-- tc_import_entry) inserts its entry in the same statement or transaction, where no other
-- transaction can see, let alone delete, it; the access flush only updates. What the key did
-- that mattered was the cascade, and its cascade deleted the access rows one statement per
-- entry. Now one statement per DELETE removes them all (by the primary key: an array probe,
-- whatever the number of rows), and a TRUNCATE of `entries` empties `entry_access` too.
--
-- Locks: the access rows are deleted at the end of the deleting statement, as the cascade's
-- per-row triggers did, by the transaction that holds their entry rows. Their other holders
-- are the access flush (which never waits: SKIP LOCKED) and a writer's upsert of its own
-- entry's access row, which holds the entry row first (docs/consistency.md). A hand-run
-- DELETE of more than ~100 million entries in one statement passes the array's 1 GB limit:
-- delete in batches.
--
-- A TRUNCATE of `entries` empties `entry_access` by DELETE, not TRUNCATE: `TRUNCATE entries,
-- entry_access` (the form the key forced) still has both tables open when its triggers run,
-- and a nested TRUNCATE would refuse; and a DELETE's lock does not conflict with the readers
-- of `entry_access` that then read `entries` (the `top` lists, the LRU pass), which a
-- TRUNCATE holding `entries` would deadlock with. (0012's truncate trigger deletes too.) A
-- TRUNCATE is an operator's act; a DELETE of every access row is its price.
--
-- Compatible: older builds insert access rows with their entries and delete only entries;
-- these triggers remove the access rows for them as the cascade did. Table locks: both
-- tables, for a moment (no rewrite, no scan), taken first and in the order writers take
-- them (`entries`, then `entry_access`): dropping the key needs both, and taking
-- `entry_access` first could deadlock with a write between its entry row and its access row.

LOCK TABLE entries, entry_access IN ACCESS EXCLUSIVE MODE;

ALTER TABLE entry_access DROP CONSTRAINT entry_access_entry_id_fkey;

CREATE FUNCTION tc_access_rows_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM entry_access WHERE entry_id = ANY (ARRAY(SELECT id FROM old_rows));
    RETURN NULL;
END $$;

CREATE TRIGGER entries_access_delete AFTER DELETE ON entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_access_rows_deleted();

CREATE FUNCTION tc_access_rows_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM entry_access;
    RETURN NULL;
END $$;

CREATE TRIGGER entries_access_truncate AFTER TRUNCATE ON entries
    FOR EACH STATEMENT EXECUTE FUNCTION tc_access_rows_truncated();
