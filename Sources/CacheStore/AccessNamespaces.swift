/// Whole-store orderings of the access rows (idle entries, the least recently used, the most
/// hit) read namespace by namespace from the per-namespace indexes (`entry_access_lru`,
/// `entry_access_top`), instead of from whole-store indexes of their own. Every new entry
/// inserts its access row into each index, and every flushed hit updates one (its count and
/// time are indexed, so the update is never heap-only): two whole-store indexes were two of
/// five index entries on every write and every flush, for statements that run in the eviction
/// cycle (and an admin's whole-store stats) only (migration 0018).
enum AccessNamespaces {
    /// `access_namespaces(namespace)`: every namespace that has access rows, in order, one
    /// index probe each (a skip scan of `entry_access_lru`), ending in a NULL row. For a
    /// `WITH RECURSIVE`; evaluated as far as the statement reads it.
    static let cte = """
        access_namespaces(namespace) AS (
            (SELECT namespace FROM entry_access ORDER BY namespace LIMIT 1)
            UNION ALL
            SELECT (SELECT a.namespace FROM entry_access a WHERE a.namespace > n.namespace
                    ORDER BY a.namespace LIMIT 1)
            FROM access_namespaces n WHERE n.namespace IS NOT NULL)
        """
}
