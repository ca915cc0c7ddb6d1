-- teamcache: compatible-with-older-builds
-- teamcache: takes-table-locks
-- Two indexes fewer on every write and every flushed hit.
--
-- `entry_access` had five indexes, and every new entry inserts its access row into each.
-- Every flushed hit updates one: its count and time are indexed, so the update is never
-- heap-only, and it adds an entry to each index too. Two of the five ordered the whole
-- store, by time (`entry_access_idle`) and by hits (`entry_access_top_global`). Only the
-- eviction cycle's idle and store-wide LRU passes and the whole-store stats read them. These
-- now read namespace by namespace from the per-namespace indexes (`entry_access_lru`,
-- `entry_access_top`) and merge the results (see Sources/CacheStore/AccessNamespaces.swift).
--
-- Compatible: an older build's statements still run without these indexes. During a rolling
-- deploy, such a build's idle and store-wide LRU passes scan `entry_access` instead, once per
-- batch of the cycle that one replica runs. Dropping an index rewrites nothing; it takes
-- `entry_access`'s lock for a moment (the runner's lock_timeout bounds the wait).
DROP INDEX entry_access_idle;
DROP INDEX entry_access_top_global;
