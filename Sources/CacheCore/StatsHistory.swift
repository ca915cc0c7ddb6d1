import Foundation

/// What happened in a namespace during one step of time (a point of its stats history).
public struct StatsPoint: Sendable, Equatable {
    /// The step's start, seconds since the epoch (UTC, a multiple of the step).
    public var t: Int
    public var hits = 0, misses = 0, stale = 0, collapsed = 0, bypass = 0, writes = 0
    /// Hits a client's local tier answered (counted in `hits` too).
    public var localHits = 0
    public var evictedExpired = 0, evictedIdle = 0, evictedSize = 0, evictedManual = 0
    public var inputTokensSaved = 0, outputTokensSaved = 0
    /// What the hits saved, in billionths of the price table's currency.
    public var costSavedNanos = 0
    /// The namespace's stored bytes and entries at the end of the step (as last folded).
    public var storedBytes = 0, entries = 0

    public init(t: Int) { self.t = t }

    public var evictions: Int { evictedExpired + evictedIdle + evictedSize + evictedManual }

    /// Adds `other`'s counts (the levels, bytes and entries, are not counts: they are left).
    public mutating func addCounts(_ other: StatsPoint) {
        hits &+= other.hits
        misses &+= other.misses
        stale &+= other.stale
        collapsed &+= other.collapsed
        localHits &+= other.localHits
        bypass &+= other.bypass
        writes &+= other.writes
        evictedExpired &+= other.evictedExpired
        evictedIdle &+= other.evictedIdle
        evictedSize &+= other.evictedSize
        evictedManual &+= other.evictedManual
        inputTokensSaved &+= other.inputTokensSaved
        outputTokensSaved &+= other.outputTokensSaved
        costSavedNanos &+= other.costSavedNanos
    }
}

/// A history request made valid: which step, which points. Points cover `[since, until)`,
/// each `step` seconds from a multiple of `step` (UTC), oldest first; the stored rollups
/// have minute and hour rows, and days are summed from hours.
public struct HistoryRange: Sendable, Equatable {
    public static let steps = [60, 3600, 86400]
    /// The most points one answer holds (a minute step over 24 h is 1,440).
    public static let maxPoints = 1500

    public let step: Int
    /// The first point's start and the end of the last point (exclusive), epoch seconds.
    public let since: Int
    public let until: Int

    /// Why a request cannot be answered (a 400 for the route).
    public struct Refusal: Error, Equatable {
        public let message: String
    }

    /// The rollup step read for `step` (days come from hours).
    public var storedStep: Int { step == 86400 ? 3600 : step }
    public var count: Int { (until - since) / step }
    public var times: StrideTo<Int> { stride(from: since, to: until, by: step) }

    /// `since`/`until` as asked (nil: 24 hours back from now, and now); `step` nil: the
    /// smallest whose points fit. `until` past now ends with the step now is in; `since` older
    /// than `step`'s retention starts at the oldest point kept (said in the answer's `since`),
    /// before the points are counted: `since=0&step=86400` is the days kept, not a refusal.
    public init(since asked: Date?, until askedUntil: Date?, step askedStep: Int?, now: Date,
                policy: CachePolicy) throws {
        let nowSeconds = Int(now.timeIntervalSince1970.rounded(.down))
        let until = min(askedUntil.map { Int($0.timeIntervalSince1970.rounded(.up)) } ?? nowSeconds + 1, nowSeconds + 1)
        let since = asked.map { Int($0.timeIntervalSince1970.rounded(.down)) } ?? until - 86400
        guard since < until else { throw Refusal(message: "since must be before until (and before now).") }
        if let askedStep, !Self.steps.contains(askedStep) {
            throw Refusal(message: "step must be 60, 3600 or 86400.")
        }
        // Each step's range starts no earlier than its oldest point kept; the step is the one
        // asked for, or the smallest whose points then fit.
        func start(_ step: Int) -> Int {
            let retention = step == 60 ? policy.minutePointRetention : policy.hourPointRetention
            let kept = Self.floor(nowSeconds - retention, step) + step
            return max(Self.floor(since, step), min(kept, Self.floor(until - 1, step)))
        }
        let step = askedStep ?? Self.steps.first { Self.count(start($0), until, $0) <= Self.maxPoints } ?? 86400
        let count = Self.count(start(step), until, step)
        guard count <= Self.maxPoints else {
            throw Refusal(message: "\(count) points of \(step) s: at most \(Self.maxPoints) a request; "
                          + "ask for a larger step or a shorter range.")
        }
        self.step = step
        self.since = start(step)
        self.until = Self.floor(until - 1, step) + step
    }

    static func count(_ since: Int, _ until: Int, _ step: Int) -> Int {
        (floor(until - 1, step) - floor(since, step)) / step + 1
    }

    /// Rounds down to a multiple of `step` (also below zero): the start of the step that
    /// `value` (epoch seconds) falls in, UTC, as the rollups are aligned.
    public static func floor(_ value: Int, _ step: Int) -> Int {
        let remainder = value % step
        return remainder < 0 ? value - remainder - step : value - remainder
    }

    /// The answer's points: `samples` (stored rows in the range, and counts not folded yet,
    /// any order, any step dividing `step`) summed into each point, every point present.
    /// Levels (bytes, entries) carry forward from `carried` (the last row before `since`) and
    /// from `levels` (each known step's end, by its start); within a point, the latest wins.
    public func points(samples: [StatsPoint], levels: [Int: (storedBytes: Int, entries: Int)],
                       carried: (storedBytes: Int, entries: Int)?) -> [StatsPoint] {
        var points = times.map { StatsPoint(t: $0) }
        guard !points.isEmpty else { return [] }
        for sample in samples where sample.t >= since && sample.t < until {
            points[(sample.t - since) / step].addCounts(sample)
        }
        var byPoint: [Int: (Int, Int)] = [:]
        for t in levels.keys.sorted() where t >= since && t < until {
            byPoint[(t - since) / step] = levels[t]
        }
        var level = carried ?? (0, 0)
        for index in points.indices {
            if let known = byPoint[index] { level = known }
            points[index].storedBytes = level.0
            points[index].entries = level.1
        }
        return points
    }
}
