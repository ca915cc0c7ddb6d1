-- teamcache: compatible-with-older-builds
-- A TRUNCATE of entries (an operator's wipe) changes every key without a row trigger: it
-- notifies `*`, "everything changed", so every replica empties its near-cache and every
-- waiter reads again. Older builds ignore a payload without a namespace.
CREATE FUNCTION tc_notify_everything() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('teamcache_keys', '*');
    RETURN NULL;
END $$;

CREATE TRIGGER entries_notify_truncate AFTER TRUNCATE ON entries
    FOR EACH STATEMENT EXECUTE FUNCTION tc_notify_everything();
