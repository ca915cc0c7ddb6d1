-- teamcache: compatible-with-older-builds
-- Encryption at rest, per namespace (`teamcache namespaces set NS --encrypt`).
--
-- A namespace is encrypted once it has a data key. Each data key is 32 random bytes, stored
-- only wrapped (AES-256-GCM) by a master key that lives outside the database
-- (TEAMCACHE_MASTER_KEY_FILE); `master_key_id` names which one, by fingerprint, so a
-- rotation can re-wrap keys one master at a time. The newest key of a namespace seals its
-- writes; older ones still open what they sealed until `teamcache keys rotate --reencrypt`
-- rewrites those entries.
--
-- A sealed entry's `encoding` is 'aes256gcm/identity' or 'aes256gcm/gzip' (the body's own
-- encoding under the seal) and its body is the data key's id (8 bytes) and the sealed bytes;
-- its metadata, if any, is sealed the same way. Compatible: builds that do not know it never
-- see a sealed entry until a namespace is encrypted (encrypt only once every replica runs a
-- build that knows it), and one that did would fail to decode the encoding and answer an
-- error, never the ciphertext.
CREATE TABLE data_keys (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace     text        NOT NULL,
    wrapped       bytea       NOT NULL,
    master_key_id text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX data_keys_namespace ON data_keys (namespace, id);

-- NOT VALID: existing rows are known to pass, and validating would scan the table under a lock.
ALTER TABLE entries DROP CONSTRAINT entries_encoding_check;
ALTER TABLE entries ADD CONSTRAINT entries_encoding_check
    CHECK (encoding IN ('identity', 'gzip', 'aes256gcm/identity', 'aes256gcm/gzip')) NOT VALID;

-- The database itself refuses a plain body in an encrypted namespace, whoever writes it: a
-- replica that has not yet learned of the namespace's key (it looks keys up every 10 s), or
-- an older build. The writer then learns the key and the client retries (503). One check per
-- statement, and none while no namespace is encrypted.
CREATE FUNCTION tc_refuse_plain_in_encrypted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM data_keys) AND EXISTS (
        SELECT 1 FROM new_rows n
        WHERE n.encoding NOT LIKE 'aes256gcm/%' AND EXISTS (SELECT 1 FROM data_keys k WHERE k.namespace = n.namespace))
    THEN
        RAISE EXCEPTION 'a plain body for an encrypted namespace' USING ERRCODE = 'TCE01';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER entries_sealed_insert AFTER INSERT ON entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_refuse_plain_in_encrypted();
CREATE TRIGGER entries_sealed_update AFTER UPDATE ON entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tc_refuse_plain_in_encrypted();
