import Observability

/// What the write groups tell the metrics page: how many writes a group carried, how long
/// it took (a pool connection, its statement and commit; after a rejected statement, the
/// writes' one-at-a-time replays too), and how long each write waited for its group to start
/// (a write given up at its request's deadline never starts, and is not counted).
/// A PUT's latency is the last two together: a slow commit (a WAL flush) holds every write
/// of its group and every write queued behind it, and these tell that apart from a queue
/// that is merely long (bench/results/2026-12-06-writes-7.md).
public struct WriteGroupMetrics: Sendable {
    let sizes: HistogramFamily?
    let groupSeconds: HistogramFamily?
    let waitSeconds: HistogramFamily?

    public init(sizes: HistogramFamily?, groupSeconds: HistogramFamily? = nil, waitSeconds: HistogramFamily? = nil) {
        self.sizes = sizes
        self.groupSeconds = groupSeconds
        self.waitSeconds = waitSeconds
    }

    /// A group of `count` writes that ran `nanoseconds`, its writes queued for `waits` each.
    func observe(count: Int, ranNanoseconds nanoseconds: UInt64, waitedNanoseconds waits: [UInt64]) {
        sizes?.observe([], Double(count))
        groupSeconds?.observe([], Double(nanoseconds) / 1e9)
        guard let waitSeconds else { return }
        for wait in waits { waitSeconds.observe([], Double(wait) / 1e9) }
    }
}
