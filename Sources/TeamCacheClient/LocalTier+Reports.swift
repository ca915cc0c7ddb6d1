import CacheKeys
import Foundation

/// Local hits, reported to the service in numbered batches (`POST …/hits` with `reporter` and
/// `seq`). A report whose answer did not come back is sent again as it was, same number: the
/// service counts a number once, so a lost answer never counts hits twice. A namespace's
/// reports go out in order (a later number would overtake a waiting one, which the service
/// would then refuse as old), so one that fails holds the namespace's later ones to the next round.
extension LocalTier {
    struct NumberedReport: Sendable {
        let namespace: String
        let seq: Int
        let hits: [(key: String, etag: String?, count: Int)]
    }

    /// The service's bounds on one report.
    static let reportedKeys = 1000
    static let reportedHits = 1_000_000

    /// Reports the local hits now (and any report still unanswered, first).
    public func report() async {
        while !reporting.withLock({ busy in
            defer { busy = true }
            return !busy
        }) {
            // A cancelled waiter (close's bounded last report) gives up: its sleep would not wait.
            if Task.isCancelled { return }
            try? await Task.sleep(nanoseconds: 10_000_000)
        }
        defer { reporting.withLock { $0 = false } }
        let (unsent, client) = state.withLock { state in
            Self.numberPending(&state)
            return (state.unsent, state.client)
        }
        guard let client else { return }
        var failed = Set<String>()
        for report in unsent where !failed.contains(report.namespace) {
            let total = report.hits.reduce(0) { $0 + $1.count }
            do {
                try await send(report, client)
                state.withLock { $0.counts.reported += total }
            } catch TeamCacheClientError.problem(let status, _, _)
                where status < 500 && ![401, 403, 408, 425, 429].contains(status) {
                state.withLock { $0.counts.unreported += total }  // refused: sending again cannot mend it
            } catch {
                failed.insert(report.namespace)
                continue
            }
            state.withLock { $0.unsent.removeAll { $0.seq == report.seq } }
        }
    }

    /// Numbered; unnumbered once a service from before numbered reports refused the members
    /// (a `422`): from then on, as before them, a lost answer may count twice.
    private func send(_ report: NumberedReport, _ client: TeamCacheClient) async throws {
        if state.withLock({ $0.numbered }) {
            do {
                try await client.reportHits(namespace: report.namespace, report.hits, reporter: reporterID, seq: report.seq)
                return
            } catch TeamCacheClientError.problem(status: 422, _, _) {
                state.withLock { $0.numbered = false }
            }
        }
        try await client.reportHits(namespace: report.namespace, report.hits)
    }

    /// Turns the hits counted since the last round into numbered reports within the service's
    /// bounds, giving up what exceeds the tier's bound on waiting keys.
    static func numberPending(_ state: inout State) {
        var waiting = state.unsent.reduce(0) { $0 + $1.hits.count }
        let taken = state.hits
        state.hits = [:]
        for (namespace, hits) in taken {
            var chunk: [(key: String, etag: String?, count: Int)] = []
            var total = 0
            func close() {
                guard !chunk.isEmpty else { return }
                if waiting + chunk.count > pendingHitKeys {
                    state.counts.unreported += total
                } else {
                    state.seq += 1
                    state.unsent.append(NumberedReport(namespace: namespace, seq: state.seq, hits: chunk))
                    waiting += chunk.count
                }
                chunk = []
                total = 0
            }
            for (key, count) in hits {
                let capped = min(count, reportedHits)
                if chunk.count == reportedKeys || total + capped > reportedHits { close() }
                chunk.append((key.key, key.etag, capped))
                total += capped
            }
            close()
        }
    }
}
