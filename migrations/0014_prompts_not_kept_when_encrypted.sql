-- teamcache: compatible-with-older-builds
-- teamcache: takes-table-locks
-- An encrypted namespace keeps no prompt in clear. `prompt_digest` (the first 200
-- characters of a descriptor's prompt, for the stats' top entries) was written in clear
-- beside the sealed body, so every backup, WAL archive and standby held the prompt, which
-- carries more personal data than the answer. From here on it is not stored at all in an
-- encrypted namespace (the stats show it as null there): this build does not send it, and
-- the database clears it whoever writes (an older build, a replica that has not yet learned
-- of the namespace's key, psql). Rows already stored are scrubbed below.
--
-- A row trigger with a WHEN clause: raw entries (no digest) pay nothing; a descriptor write
-- pays one probe of data_keys' index.
CREATE FUNCTION tc_drop_prompt_in_encrypted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM data_keys k WHERE k.namespace = NEW.namespace) THEN
        NEW.prompt_digest := NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER entries_no_prompt_when_encrypted BEFORE INSERT OR UPDATE OF prompt_digest, namespace ON entries
    FOR EACH ROW WHEN (NEW.prompt_digest IS NOT NULL) EXECUTE FUNCTION tc_drop_prompt_in_encrypted();

-- Holds the trigger's lock while it runs: bounded by the descriptor entries of namespaces encrypted
-- since migration 0013 (a day old when this shipped), and the runner gives up after 5 s a try.
UPDATE entries SET prompt_digest = NULL
WHERE prompt_digest IS NOT NULL AND namespace IN (SELECT namespace FROM data_keys);
