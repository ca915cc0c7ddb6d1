import CacheCore
import Foundation

/// What the access tracker counts between flushes: an entry's hits and last access, and a
/// namespace's lookup counts (pending by minute, and its running totals).
extension AccessTracker {
    struct EntryAccess {
        var namespace: String
        var hits = 0
        var lastAccess: Date

        mutating func add(at now: Date) {
            hits += 1
            lastAccess = max(lastAccess, now)
        }
    }

    struct NamespaceCounts {
        var hits = 0, misses = 0, stale = 0, bypass = 0, collapsed = 0, local = 0, inputTokens = 0, outputTokens = 0
        /// What the answers from entries saved, priced when they were given (billionths).
        var costNanos = 0

        var isEmpty: Bool { hits == 0 && misses == 0 && stale == 0 && bypass == 0 }

        mutating func add(_ lookup: Lookup, input: Int?, output: Int?, costNanos cost: Int) {
            costNanos = Self.saturating(costNanos, cost)
            switch lookup {
            case .hit: hits += 1
            case .collapsed:
                hits += 1
                collapsed += 1
            case .local:
                hits += 1
                local += 1
            case .stale: stale += 1
            case .miss: misses += 1
            case .bypass: bypass += 1
            }
            // An entry's token counts are its writer's word (up to a bigint): each hit counts
            // at most `maxPricedTokens`, and sums saturate rather than wrap or trap.
            inputTokens = Self.saturating(inputTokens, Self.tokens(input))
            outputTokens = Self.saturating(outputTokens, Self.tokens(output))
        }

        static func tokens(_ count: Int?) -> Int { min(max(count ?? 0, 0), PriceTable.maxPricedTokens) }

        /// `count` local hits on `entry` (a client's report), each priced `cost`: the counts
        /// made at once (a report may carry a million hits), saturating as every sum does.
        static func local(count: Int, _ entry: StoredEntry?, costNanos cost: Int) -> NamespaceCounts {
            func times(_ value: Int) -> Int {
                let (product, overflow) = value.multipliedReportingOverflow(by: count)
                return overflow ? Int.max : product
            }
            var counts = NamespaceCounts()
            counts.hits = count
            counts.local = count
            counts.inputTokens = times(tokens(entry?.inputTokens))
            counts.outputTokens = times(tokens(entry?.outputTokens))
            counts.costNanos = times(cost)
            return counts
        }

        static func saturating(_ a: Int, _ b: Int) -> Int {
            let (sum, overflow) = a.addingReportingOverflow(b)
            return overflow ? (b > 0 ? Int.max : Int.min) : sum
        }

        mutating func add(_ other: NamespaceCounts) {
            hits = Self.saturating(hits, other.hits)
            misses = Self.saturating(misses, other.misses)
            stale = Self.saturating(stale, other.stale)
            bypass = Self.saturating(bypass, other.bypass)
            collapsed = Self.saturating(collapsed, other.collapsed)
            local = Self.saturating(local, other.local)
            inputTokens = Self.saturating(inputTokens, other.inputTokens)
            outputTokens = Self.saturating(outputTokens, other.outputTokens)
            costNanos = Self.saturating(costNanos, other.costNanos)
        }
    }

    /// A namespace's counts not yet written, and its running totals since start (the
    /// lookup and token metrics, published at scrape time). One dictionary entry for both,
    /// so a lookup costs one lock and one hash, not one per metric series it touches.
    ///
    /// Pending counts are kept per minute (the history's finest step): the current minute's
    /// in `pending`, earlier ones, only when a flush was late across a minute's end, in `earlier`.
    struct NamespaceState {
        var pending = NamespaceCounts()
        /// The start (epoch seconds) of the minute `pending` counts.
        var pendingMinute = 0
        var earlier: [Int: NamespaceCounts] = [:]
        var total = NamespaceCounts()

        var hasPending: Bool { !pending.isEmpty || !earlier.isEmpty }

        mutating func record(_ lookup: Lookup, input: Int?, output: Int?, costNanos: Int, minute: Int,
                             pending isPending: Bool) {
            total.add(lookup, input: input, output: output, costNanos: costNanos)
            guard isPending else { return }
            if minute != pendingMinute {
                if !pending.isEmpty { keepEarlier(pendingMinute, pending) }
                pending = NamespaceCounts()
                pendingMinute = minute
            }
            pending.add(lookup, input: input, output: output, costNanos: costNanos)
        }

        /// Minutes kept apart while flushes fail; past them, earlier counts are kept by hour
        /// (so a long outage costs a bounded map, and the history loses only minute detail).
        static let earlierMinutes = 120

        /// As `record`, for counts made already (a client's reported local hits).
        mutating func record(_ counts: NamespaceCounts, minute: Int, pending isPending: Bool) {
            total.add(counts)
            guard isPending else { return }
            if minute != pendingMinute {
                if !pending.isEmpty { keepEarlier(pendingMinute, pending) }
                pending = NamespaceCounts()
                pendingMinute = minute
            }
            pending.add(counts)
        }

        mutating func keepEarlier(_ minute: Int, _ counts: NamespaceCounts) {
            earlier[minute, default: NamespaceCounts()].add(counts)
            guard earlier.count > Self.earlierMinutes else { return }
            var byHour: [Int: NamespaceCounts] = [:]
            for (start, kept) in earlier { byHour[HistoryRange.floor(start, 3600), default: NamespaceCounts()].add(kept) }
            earlier = byHour
        }

        /// Takes every pending minute, oldest first.
        mutating func takePending() -> [(minute: Int, counts: NamespaceCounts)] {
            var taken = earlier.sorted { $0.key < $1.key }.map { (minute: $0.key, counts: $0.value) }
            if !pending.isEmpty { taken.append((pendingMinute, pending)) }
            pending = NamespaceCounts()
            earlier = [:]
            return taken
        }

        /// Gives back what a failed flush took (its running totals counted it already).
        mutating func restore(_ minute: Int, _ counts: NamespaceCounts) {
            if minute == pendingMinute { pending.add(counts) } else { keepEarlier(minute, counts) }
        }
    }
}
