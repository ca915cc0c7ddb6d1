-- teamcache: compatible-with-older-builds
-- Waking waiters across replicas: every committed change to an entry, and every lease that
-- ends (completed, released, swept), NOTIFYs channel `teamcache_keys` with
-- `<namespace>/<key as hex>`; a statement that touches more than 64 rows of a namespace
-- (a bulk eviction) sends `<namespace>/` once for all of them instead. Payloads stay far below
-- NOTIFY's 8000-byte limit (keys are at most 512 bytes), notifications are sent only when the
-- transaction commits, and PostgreSQL folds identical ones within a transaction. Older builds
-- do not listen: the notifications cost them nothing but the sending.

CREATE FUNCTION tc_notify_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('teamcache_keys', payload)
    FROM (SELECT DISTINCT CASE WHEN count(*) OVER (PARTITION BY namespace) > 64 THEN namespace || '/'
                               ELSE namespace || '/' || encode(key, 'hex') END AS payload
          FROM new_rows) AS payloads;
    RETURN NULL;
END $$;

CREATE FUNCTION tc_notify_old_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('teamcache_keys', payload)
    FROM (SELECT DISTINCT CASE WHEN count(*) OVER (PARTITION BY namespace) > 64 THEN namespace || '/'
                               ELSE namespace || '/' || encode(key, 'hex') END AS payload
          FROM old_rows) AS payloads;
    RETURN NULL;
END $$;

CREATE TRIGGER entries_notify_insert AFTER INSERT ON entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_notify_new_rows();
CREATE TRIGGER entries_notify_update AFTER UPDATE ON entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_notify_new_rows();
CREATE TRIGGER entries_notify_delete AFTER DELETE ON entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_notify_old_rows();
CREATE TRIGGER leases_notify_delete AFTER DELETE ON leases
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_notify_old_rows();
