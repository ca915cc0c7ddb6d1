import CacheStore
import Observability

/// Every metric family the service serves, defined once: the service and the store register
/// by these definitions, docs/metrics.md's table is rendered from them (`table`), and
/// `MetricsPageTests` checks that what a running service serves is exactly this catalogue
/// (names, kinds, help) and that the page is current.
public enum MetricCatalogue {
    static let prefix = Configuration.metricPrefix

    // MARK: Registered by the store's components (CacheStore), under these names.
    public static let accessFlushesTotal = MetricDefinition(.counter, "teamcache_access_flushes_total",
        "Access-tracker flushes by outcome.",
        labels: ["outcome"])
    public static let lookupsTotal = MetricDefinition(.counter, "teamcache_lookups_total",
        "Cache lookups by namespace and result.",
        labels: ["namespace", "result"],
        notes: "`result`: hit, miss, stale, bypass, collapsed, local (reported by clients' local tiers; also in hit)")
    public static let tokensSavedTotal = MetricDefinition(.counter, "teamcache_tokens_saved_total",
        "Model tokens not paid for thanks to hits.",
        labels: ["namespace", "kind"],
        notes: "`kind`: input, output")
    public static let costSavedTotal = MetricDefinition(.counter, "teamcache_cost_saved_total",
        "What hits saved, in the price table's currency (`TEAMCACHE_PRICES_FILE`, namespace prices).",
        labels: ["namespace"],
        notes: "Priced when the hit happened; models without a price count nothing")
    public static let evictionRunsTotal = MetricDefinition(.counter, "teamcache_eviction_runs_total",
        "Eviction cycles by outcome.",
        labels: ["outcome"],
        notes: "`outcome`: ok, skipped, error")
    public static let evictionsTotal = MetricDefinition(.counter, "teamcache_evictions_total",
        "Entries evicted by reason.",
        labels: ["reason"],
        notes: "`reason`: expired, idle, size, manual")
    public static let evictedBytesTotal = MetricDefinition(.counter, "teamcache_evicted_bytes_total",
        "Stored bytes evicted by reason.",
        labels: ["reason"])
    public static let evictionDurationSeconds = MetricDefinition(.histogram, "teamcache_eviction_duration_seconds",
        "Duration of eviction cycles.")
    public static let evictionLastSuccessTimestampSeconds = MetricDefinition(
        .gauge, "teamcache_eviction_last_success_timestamp_seconds",
        "When an eviction cycle last completed, Unix seconds.")
    public static let integrityErrorsTotal = MetricDefinition(.counter, "teamcache_integrity_errors_total",
        "Sealed entries that did not open (tampered or corrupt): answered as misses.",
        labels: ["namespace"])
    public static let leasesTotal = MetricDefinition(.counter, "teamcache_leases_total",
        "Miss leases by outcome.",
        labels: ["outcome"],
        notes: "`outcome`: granted, completed, released, handed_over, undelivered, expired")

    // MARK: Registered by the service itself.
    public static let dbWriteBatchSize = MetricDefinition(.histogram, "teamcache_db_write_batch_size",
        "Entry writes per committed transaction.")
    public static let dbWriteGroupSeconds = MetricDefinition(.histogram, "teamcache_db_write_group_seconds",
        "Time a group of entry writes took, per group: a pool connection, its statement and its commit.",
        notes: "Every write of the group waits for it. After a rejected statement, its writes' one-at-a-time "
            + "replays count too.")
    public static let dbWriteWaitSeconds = MetricDefinition(.histogram, "teamcache_db_write_wait_seconds",
        "Time an entry write waited in the queue for its group to start, per write.",
        notes: "It grows when groups run long: a write queued behind a running group waits for it. A write "
            + "given up at its request's deadline never starts and is not counted here.")
    public static let inflateCacheBytes = MetricDefinition(.gauge, "teamcache_inflate_cache_bytes",
        "Inflated bodies held for clients without gzip, in bytes.")
    public static let notificationQueueUsage = MetricDefinition(.gauge, "teamcache_notification_queue_usage",
        "PostgreSQL's notification queue in use (0-1; -1 unknown): full, every write fails.",
        notes: "Alert above 0.5.")
    public static let storeMaxBytes = MetricDefinition(.gauge, "teamcache_store_max_bytes",
        "Configured soft cap of the store in stored bytes (0: none).")
    public static let storeHardCapBytes = MetricDefinition(.gauge, "teamcache_store_hard_cap_bytes",
        "Writes past this many stored bytes get 507 (0: none).")
    public static let heapInUseBytes = MetricDefinition(.gauge, "teamcache_heap_in_use_bytes",
        "Heap bytes in use (glibc mallinfo2).")
    public static let heapFreeBytes = MetricDefinition(.gauge, "teamcache_heap_free_bytes",
        "Heap bytes free but still held by glibc's arenas.")
    public static let logLinesDroppedTotal = MetricDefinition(.counter, "teamcache_log_lines_dropped_total",
        "Log lines dropped because the log output did not drain.")
    public static let loopBlockingWaitsTotal = MetricDefinition(.counter, "teamcache_loop_blocking_waits_total",
        "Waits that could sleep (the database, a lock) made on an event loop thread: a bug; alert above 0.")
    public static let dbReadsTotal = MetricDefinition(.counter, "teamcache_db_reads_total",
        "Batched entry reads by the database that answered them.",
        labels: ["database"],
        notes: "`database`: standby, primary")
    public static let nearCacheBytes = MetricDefinition(.gauge, "teamcache_near_cache_bytes",
        "Memory held by hot entries kept in this process.")
    public static let nearCacheEntries = MetricDefinition(.gauge, "teamcache_near_cache_entries",
        "Hot entries kept in this process.")
    public static let nearCacheHitsTotal = MetricDefinition(.counter, "teamcache_near_cache_hits_total",
        "Reads answered from the near-cache.")
    public static let nearCacheEnabled = MetricDefinition(.gauge, "teamcache_near_cache_enabled",
        "1 while the near-cache answers (its listener is up).")
    public static let dbReadBatchSize = MetricDefinition(.histogram, "teamcache_db_read_batch_size",
        "Entry reads per batched statement.")
    public static let readStandbyLagSeconds = MetricDefinition(.gauge, "teamcache_read_standby_lag_seconds",
        "How far behind the primary the read standby may be (-1: unknown, not read from).")
    public static let entries = MetricDefinition(.gauge, "teamcache_entries",
        "Entries stored, by namespace.",
        labels: ["namespace"])
    public static let storedBytes = MetricDefinition(.gauge, "teamcache_stored_bytes",
        "Bytes stored, by namespace and encoding basis.",
        labels: ["namespace", "kind"],
        notes: "`kind`: identity, stored")
    public static let upsertsTotal = MetricDefinition(.counter, "teamcache_upserts_total",
        "Writes by namespace and outcome.",
        labels: ["namespace", "outcome"],
        notes: "`outcome`: created, replaced, precondition_failed, store_full")
    public static let writePositionsMissingTotal = MetricDefinition(.counter, "teamcache_write_positions_missing_total",
        "Write answers sent without TeamCache-Position: the primary's position was not read in time.")
    public static let feedPagesTotal = MetricDefinition(.counter, "teamcache_feed_pages_total",
        "Change feed pages by where they came from: the database, or a read shared with followers asking the same.",
        labels: ["source"],
        notes: "`source`: database, shared")
    public static let waitsTotal = MetricDefinition(.counter, "teamcache_waits_total",
        "Parked lookups by how their wait ended.",
        labels: ["outcome"],
        notes: "`outcome`: filled, handed_over, timeout, disconnected")
    public static let waiters = MetricDefinition(.gauge, "teamcache_waiters",
        "Requests parked waiting for a key to be filled.")
    public static let notifyListenerUp = MetricDefinition(.gauge, "teamcache_notify_listener_up",
        "1 while this process listens for key changes.")

    public static let gatewayRequestsTotal = MetricDefinition(.counter, "teamcache_gateway_requests_total",
        "Gateway requests by upstream and outcome.",
        labels: ["upstream", "outcome"],
        notes: "`outcome`: hit, miss, collapsed, stale, bypass, error")
    public static let gatewayUpstreamFirstByteSeconds = MetricDefinition(
        .histogram, "teamcache_gateway_upstream_first_byte_seconds",
        "Time from a gateway call's start to the upstream's response head.",
        labels: ["upstream"])
    public static let gatewayUpstreamSeconds = MetricDefinition(.histogram, "teamcache_gateway_upstream_seconds",
        "Time from a gateway call's start to the upstream answer's last byte.",
        labels: ["upstream"])
    public static let gatewayUpstreamErrorsTotal = MetricDefinition(.counter, "teamcache_gateway_upstream_errors_total",
        "Gateway calls that failed, by upstream and kind.",
        labels: ["upstream", "kind"],
        notes: "`kind`: dns, connect, tls, connect_timeout, first_byte_timeout, idle_timeout, total_timeout, malformed, "
            + "too_large, closed, overloaded, store")

    // MARK: The HTTP server's and the database pool's own families: those libraries name them, under
    /// the service's prefix (a test keeps these entries equal to what they serve).
    public static let httpConnections = MetricDefinition(.gauge, prefix + "http_connections",
        "Open client connections.")
    public static let httpWorkerQueue = MetricDefinition(.gauge, prefix + "http_worker_queue",
        "Handler jobs waiting for a worker thread.")
    public static let httpRequestsTotal = MetricDefinition(.counter, prefix + "http_requests_total",
        "HTTP requests answered.",
        labels: ["route", "method", "status_class"])
    public static let httpRequestDurationSeconds = MetricDefinition(
        .histogram, prefix + "http_request_duration_seconds",
        "Time from a complete request to its queued response.",
        labels: ["route", "method"])
    public static let httpConnectionsRefusedTotal = MetricDefinition(
        .counter, prefix + "http_connections_refused_total",
        "Connections refused at the connection limit (server_limit) or a client's (client_limit).",
        labels: ["limit"],
        notes: "`limit`: server_limit, client_limit")
    public static let httpDeadlineExceededTotal = MetricDefinition(.counter, prefix + "http_deadline_exceeded_total",
        "Requests answered 503 because they outlived the request timeout.",
        notes: "The timeout is `TEAMCACHE_REQUEST_TIMEOUT`.")
    public static let httpBodyBudgetRefusalsTotal = MetricDefinition(
        .counter, prefix + "http_body_budget_refusals_total",
        "Requests refused 503 because bodies in flight passed the body budget.",
        notes: "The budget is `TEAMCACHE_BODY_BUDGET_BYTES`.")
    public static let dbPoolConnectionsInUse = MetricDefinition(.gauge, prefix + "db_pool_connections_in_use",
        "Database connections handed out.")
    public static let dbPoolConnectionsIdle = MetricDefinition(.gauge, prefix + "db_pool_connections_idle",
        "Database connections open and idle.")
    public static let dbPoolConnectionsMax = MetricDefinition(.gauge, prefix + "db_pool_connections_max",
        "Configured pool size.")
    public static let dbPoolWaitsTotal = MetricDefinition(.counter, prefix + "db_pool_waits_total",
        "Acquires that had to wait for a connection.")
    public static let dbPoolTimeoutsTotal = MetricDefinition(.counter, prefix + "db_pool_timeouts_total",
        "Acquires that gave up at the deadline.")
    public static let dbPoolWaitSeconds = MetricDefinition(.histogram, prefix + "db_pool_wait_seconds",
        "Time spent waiting for a connection.")

    // MARK: The process's, as Prometheus' client libraries name them.
    public static let processResidentMemoryBytes = MetricDefinition(.gauge, "process_resident_memory_bytes",
        "Resident memory size in bytes.")
    public static let processCpuSecondsTotal = MetricDefinition(.counter, "process_cpu_seconds_total",
        "User and system CPU time in seconds.")
    public static let processOpenFds = MetricDefinition(.gauge, "process_open_fds",
        "Open file descriptors.")
    public static let processStartTimeSeconds = MetricDefinition(.gauge, "process_start_time_seconds",
        "Start time of the process, Unix seconds.")

    /// Every definition, in the order the page lists them.
    public static let all: [MetricDefinition] = [
        accessFlushesTotal,
        lookupsTotal,
        tokensSavedTotal,
        costSavedTotal,
        evictionRunsTotal,
        evictionsTotal,
        evictedBytesTotal,
        evictionDurationSeconds,
        evictionLastSuccessTimestampSeconds,
        integrityErrorsTotal,
        leasesTotal,
        dbWriteBatchSize,
        dbWriteGroupSeconds,
        dbWriteWaitSeconds,
        inflateCacheBytes,
        notificationQueueUsage,
        storeMaxBytes,
        storeHardCapBytes,
        heapInUseBytes,
        heapFreeBytes,
        logLinesDroppedTotal,
        loopBlockingWaitsTotal,
        dbReadsTotal,
        nearCacheBytes,
        nearCacheEntries,
        nearCacheHitsTotal,
        nearCacheEnabled,
        dbReadBatchSize,
        readStandbyLagSeconds,
        entries,
        storedBytes,
        upsertsTotal,
        writePositionsMissingTotal,
        feedPagesTotal,
        waitsTotal,
        waiters,
        notifyListenerUp,
        gatewayRequestsTotal,
        gatewayUpstreamFirstByteSeconds,
        gatewayUpstreamSeconds,
        gatewayUpstreamErrorsTotal,
        httpConnections,
        httpWorkerQueue,
        httpRequestsTotal,
        httpRequestDurationSeconds,
        httpConnectionsRefusedTotal,
        httpDeadlineExceededTotal,
        httpBodyBudgetRefusalsTotal,
        dbPoolConnectionsInUse,
        dbPoolConnectionsIdle,
        dbPoolConnectionsMax,
        dbPoolWaitsTotal,
        dbPoolTimeoutsTotal,
        dbPoolWaitSeconds,
        processResidentMemoryBytes,
        processCpuSecondsTotal,
        processOpenFds,
        processStartTimeSeconds,
    ]

    /// Families served only in some configurations: with a read standby (and positions
    /// tracked for it), with the near-cache on (`TEAMCACHE_NEAR_CACHE_BYTES` above 0), or
    /// once a hit was priced (a price table).
    public static let conditional: Set<String> = [
        costSavedTotal.name,
        dbReadsTotal.name, readStandbyLagSeconds.name, writePositionsMissingTotal.name,
        nearCacheHitsTotal.name, nearCacheEntries.name, nearCacheBytes.name, nearCacheEnabled.name,
    ]

    /// The store's families, for its components to register in `registry`.
    static func store(in registry: MetricsRegistry) -> StoreMetrics {
        StoreMetrics(registry: registry, lookups: lookupsTotal, tokensSaved: tokensSavedTotal,
                     costSaved: costSavedTotal,
                     accessFlushes: accessFlushesTotal, evictionRuns: evictionRunsTotal, evictions: evictionsTotal,
                     evictedBytes: evictedBytesTotal, evictionDuration: evictionDurationSeconds,
                     evictionLastSuccess: evictionLastSuccessTimestampSeconds, integrityErrors: integrityErrorsTotal,
                     leases: leasesTotal)
    }

    /// The page's table: one row a family.
    public static func table() -> String {
        var rows = ["| metric | type | labels | what it says |", "| --- | --- | --- | --- |"]
        for definition in all {
            let labels = definition.labels.map { "`\($0)`" }.joined(separator: ", ")
            let says = definition.notes.isEmpty ? definition.help : definition.help + " " + definition.notes
            rows.append("| `\(definition.name)` | \(definition.kind.rawValue) | \(labels) | \(says) |")
        }
        return rows.joined(separator: "\n") + "\n"
    }
}
