import CacheKeys
import Foundation

/// The follower's calls, as `followerError` names the one it waits for.
enum FollowerCall: String, Sendable {
    case stats = "stats call"
    case head = "call for the feed's head"
    case longPoll = "long poll"
    case catchingUp = "catching-up call"
}

/// The follower of one namespace's change feed: drops copies as changes arrive, and says
/// whether the namespace is live (caught up, heard from lately).
extension LocalTier {
    func follow(_ namespace: String) async {
        var cursor: String?
        var pause: TimeInterval = 0.2
        while !Task.isCancelled, let client = state.withLock({ $0.stopped ? nil : $0.client }) {
            do {
                try await checkEncryption(namespace, client)
                let from: String
                if let cursor { from = cursor } else { from = try await start(namespace, client) }
                cursor = from
                // Not live (just started, behind, or after a failure): asked without a wait, so a
                // quiet namespace is live after one round trip instead of one long poll (10 s at
                // the default, which held every `warm` and every first local answer that long).
                let waits = state.withLock { $0.feeds[namespace]?.syncedAt != nil }
                asking(namespace, waits ? .longPoll : .catchingUp)
                let asked = DispatchTime.now().uptimeNanoseconds
                let page = try await client.changes(namespace: namespace, since: from, limit: 1000,
                                                    wait: waits ? feedWait : nil)
                state.withLock { state in
                    for change in page.changes { Self.apply(&state, namespace, change) }
                    state.copies.saveCursor(namespace, page.next)
                    // Behind (more to read): not live until caught up.
                    state.feeds[namespace]?.syncedAt = page.more ? nil : DispatchTime.now().uptimeNanoseconds
                    state.feeds[namespace]?.lastError = nil
                    state.feeds[namespace]?.asking = nil
                }
                cursor = page.next
                pause = 0.2
                // An empty page at once (the service could not hold the request: its waiter room
                // full, or a proxy that does not hold long polls): asked again after a rest, never
                // in a tight loop that would add to an overloaded service's load.
                if waits, page.changes.isEmpty, !page.more, Self.seconds(since: asked) < feedWait / 2 {
                    try? await Task.sleep(nanoseconds: UInt64(min(1, feedWait / 4) * 1e9))
                } else if !waits, page.changes.isEmpty, page.more {
                    // Behind with nothing to read yet (the service is numbering a backlog): a call
                    // without a wait comes back at once, so rest as a long poll would have been
                    // held (the service looks again every 0.2 s).
                    try? await Task.sleep(nanoseconds: 200_000_000)
                }
            } catch TeamCacheClientError.problem(status: 410, _, _) {
                // The feed lost this cursor's place: nothing held can be trusted.
                state.withLock { state in
                    state.feeds[namespace]?.syncedAt = nil
                    state.feeds[namespace]?.asking = nil
                    state.feeds[namespace]?.lastError = "the feed no longer holds the cursor (410): copies dropped"
                    state.copies.dropNamespace(namespace)
                    state.counts.cleared += 1
                }
                cursor = nil
            } catch {
                state.withLock { state in
                    state.feeds[namespace]?.syncedAt = nil
                    state.feeds[namespace]?.asking = nil
                    // A tier closing ends its followers' calls: not a failure to report.
                    if !(error is CancellationError) { state.feeds[namespace]?.lastError = "\(error)" }
                }
                try? await Task.sleep(nanoseconds: UInt64(pause * 1e9))
                pause = min(pause * 2, 5)
            }
        }
    }

    /// Whether the namespace is encrypted (its answers are then not kept, unless `keepEncrypted`):
    /// asked first, then again every minute, since it may be encrypted later. The first answer
    /// is needed before anything is kept, so its failure is the follower's; a later one that
    /// fails keeps the answer held and is tried again in 10 s, never holding up the feed (a
    /// service under pressure would otherwise lose every live follower once a minute).
    private func checkEncryption(_ namespace: String, _ client: TeamCacheClient) async throws {
        let checkedAt = state.withLock { $0.feeds[namespace]?.checkedAt }
        if let checkedAt, Self.seconds(since: checkedAt) <= Self.encryptionRecheck { return }
        asking(namespace, .stats)
        let encrypted: Bool
        do {
            encrypted = try await client.stats(namespace: namespace, top: 0)["encrypted"]?.boolValue == true
        } catch let error where checkedAt != nil && !(error is CancellationError) {
            state.withLock { state in
                state.feeds[namespace]?.asking = nil
                state.feeds[namespace]?.checkedAt = DispatchTime.now().uptimeNanoseconds
                    &- UInt64((Self.encryptionRecheck - 10) * 1e9)
            }
            return
        }
        let allowed = keepEncrypted || !encrypted
        state.withLock { state in
            state.feeds[namespace]?.allowed = allowed
            state.feeds[namespace]?.checkedAt = DispatchTime.now().uptimeNanoseconds
            if !allowed { state.copies.dropNamespace(namespace) }
        }
    }

    /// `asking`, when it has waited past its time: a long poll its wait and a second more, any
    /// other call a second (half the wait, when that is longer). Shorter than the calls' own
    /// timeouts (the client's `timeout`, plus the wait for a long poll), so a service that is
    /// slow to answer, or an app whose tasks cannot run to take the answer, shows here before
    /// the call fails; and only while the namespace is not live (`followerError`).
    static func late(_ asking: (call: FollowerCall, since: UInt64)?, feedWait: TimeInterval) -> String? {
        guard let asking else { return nil }
        let waited = seconds(since: asking.since)
        let due = asking.call == .longPoll ? feedWait + 1 : max(1, feedWait / 2)
        guard waited > due else { return nil }
        let wait = asking.call == .longPoll ? " (it waits \(String(format: "%g", feedWait)) s)" : ""
        return "the follower's \(asking.call.rawValue) has had no answer for \(Int(waited)) s\(wait)"
    }

    /// How often a followed namespace's encryption is asked again.
    static let encryptionRecheck: TimeInterval = 60

    static func seconds(since uptime: UInt64) -> TimeInterval {
        Double(DispatchTime.now().uptimeNanoseconds &- uptime) / 1e9
    }

    /// Notes the call the follower is about to wait for (`followerError` says so when it is late).
    private func asking(_ namespace: String, _ call: FollowerCall) {
        state.withLock { $0.feeds[namespace]?.asking = (call, DispatchTime.now().uptimeNanoseconds) }
    }

    /// The cursor to follow from: the one kept with the copies, else the feed's head (copies
    /// kept without a cursor are then dropped: they cannot be trusted).
    private func start(_ namespace: String, _ client: TeamCacheClient) async throws -> String {
        if let kept = state.withLock({ state -> String? in
            guard let kept = state.copies.cursor(namespace) else { return nil }
            // Replaying from the kept cursor brings every change since: a fill made meanwhile
            // is dropped by its change, or refused as raced.
            state.feeds[namespace]?.floor = 0
            return kept
        }) {
            return kept
        }
        asking(namespace, .head)
        let head = try await client.changes(namespace: namespace, since: "now").next
        state.withLock { state in
            state.copies.dropNamespace(namespace)
            state.copies.saveCursor(namespace, head)
            // A fill that starts from here on read the entry after the head was taken, so every
            // later change to it is numbered past the head; one that started before is refused.
            state.applied += 1
            state.feeds[namespace]?.floor = state.applied
        }
        return head
    }

    static func apply(_ state: inout State, _ namespace: String, _ change: CacheChange) {
        guard let key = change.keyText else { return }
        let name = LocalCopies.Name(namespace: namespace, key: key)
        note(&state, name, etag: change.kind == .put ? change.etag : nil)
        // The same version written again with another expiry is a change too: the copy stays
        // only when its expiry agrees with the change's (within the clocks' and rounding's 2 s).
        guard let copy = state.copies.peek(name) else { return }
        let expires = change.kind == .put && copy.etag == change.etag ? change.expiresAt.flatMap(TeamCacheClient.instant)
            : nil
        if expires.map({ abs($0 - copy.expiresAt) > 2 }) ?? true {
            state.copies.drop(name)
            state.counts.dropped += 1
        }
    }
}
