-- teamcache: compatible-with-older-builds
-- Miss leases (single-flight): at most one live lease per (namespace, key), across every
-- replica. The lease id is its holder's secret: only its SHA-256 is stored, with the token
-- that got it (NULL with auth off). Granting is one INSERT … ON CONFLICT DO UPDATE … WHERE
-- the current lease has expired, so exactly one of any number of concurrent callers gets
-- it; completing and releasing delete the row only for its holder. The eviction job sweeps
-- expired leases. A new table that older builds never read: compatible with them.
CREATE TABLE leases (
    namespace  text        NOT NULL,
    key        bytea       NOT NULL,
    id_digest  bytea       NOT NULL,
    holder     bigint,
    granted_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX leases_expires_at ON leases (expires_at);
