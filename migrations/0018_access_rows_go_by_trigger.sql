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
-- whatever the number of rows), and a TRUNCATE of `entries` truncates `entry_access` too.
--
-- Locks: the access rows are deleted at the end of the deleting statement, as the cascade's
-- per-row triggers did, by the transaction that holds their entry rows; no other path waits
-- for an access row (the flush and the writers' updates of them skip locked rows).
--
-- Compatible: older builds insert access rows with their entries and delete only entries;
-- these triggers remove the access rows for them as the cascade did. Table locks: dropping
-- the key and creating the triggers lock `entries` and `entry_access` for a moment each
-- (no rewrite, no scan).

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
    TRUNCATE entry_access;
    RETURN NULL;
END $$;

CREATE TRIGGER entries_access_truncate AFTER TRUNCATE ON entries
    FOR EACH STATEMENT EXECUTE FUNCTION tc_access_rows_truncated();
