import CacheKeys
import Foundation
@testable import TeamCacheClient
import Testing
import TestSupport

/// The local tier's feed follower against a service that does not behave as a long poll
/// expects: one that keeps the follower waiting, one that cannot hold its long poll, and a
/// namespace encrypted while it is followed.
extension ClientLocalTierTests {
    /// A follower the service keeps waiting past what its long poll takes says so, naming the
    /// call, before the call's own timeout: a tier that stops answering locally because the
    /// service answers its feed late is told apart from one whose calls fail (a CI run once
    /// saw a tier not live after `warm` with "no follower error").
    @Test func aFollowerKeptWaitingSaysWhichCall() async throws {
        let frozen = try ClientFailOpenTests.Frozen()
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(frozen.port)")!,
                                                          token: "tc_frozen")
        configuration.timeout = 60
        let tier = try LocalTier(feedWait: 2)
        _ = TeamCacheClient(configuration, localTier: tier)
        tier.state.withLock { tier.follow("late", in: &$0) }
        let deadline = ProcessInfo.processInfo.systemUptime + 20
        while tier.followerError("late") == nil && ProcessInfo.processInfo.systemUptime < deadline {
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        let error = tier.followerError("late") ?? "none"
        #expect(error.hasPrefix("the follower's stats call has had no answer for ") && !tier.isLive("late"), "\(error)")
        await tier.close()
    }

    /// A follower started on a namespace nobody writes to is live after one round trip (its
    /// first call asks without a wait), not after its first long poll's wait: `warm` at start
    /// returns at once and the next read answers locally. (With the long poll first, `warm`
    /// took the whole `feedWait`, 10 s here.)
    @Test func aQuietNamespaceIsLiveAfterOneRoundTrip() async throws {
        let namespace = TestService.namespace("swifttierquiet")
        let token = try writer(namespace)
        let a = client(service.port, token, tier: nil)
        try await a.put(namespace: namespace, key: "quiet", body: Data("q".utf8), tags: ["quiet"])
        // Quiet from here: the write is numbered in the feed (a moment after its commit), so the
        // follower's head comes after it and its first long poll would find nothing.
        var numbered = false
        for _ in 0..<200 {
            numbered = try await !a.changes(namespace: namespace, since: "0").changes.isEmpty
            if numbered { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        #expect(numbered, "the write never reached the feed")
        let tier = try LocalTier(feedWait: 10)
        let b = client(service.port, token, tier: tier)
        let started = ProcessInfo.processInfo.systemUptime
        #expect(try await b.warm(namespace: namespace, tag: "quiet") == 1)
        let took = ProcessInfo.processInfo.systemUptime - started
        // Half the long poll's wait: a loaded machine's round trips fit many times over.
        #expect(took < 5 && tier.isLive(namespace), "warm took \(took) s; \(tier.followerError(namespace) ?? "")")
        #expect(try await b.get(namespace: namespace, key: "quiet")?.fromLocal == true)
        await tier.close()
    }

    /// A follower that is not live asks without a wait; while the service is numbering a
    /// backlog it answers an empty page with `more` at once (here every page): the follower rests
    /// between such calls (0.2 s, as a held long poll would look again) instead of asking in a
    /// tight loop, and is not live meanwhile.
    @Test func aFollowerBehindABusyNumberingRestsBetweenCalls() async throws {
        let busy = try BusyFeedServer()
        let tier = try LocalTier(feedWait: 2)
        _ = TeamCacheClient(.init(baseURL: URL(string: "http://127.0.0.1:\(busy.port)")!, token: "tc_busy"),
                            localTier: tier)
        tier.state.withLock { tier.follow("busy", in: &$0) }
        for _ in 0..<200 where busy.asked.value == 0 { try await Task.sleep(nanoseconds: 50_000_000) }
        let started = busy.asked.value
        let from = ProcessInfo.processInfo.systemUptime
        #expect(started > 0, "the follower never asked from the busy page's cursor")
        try await Task.sleep(nanoseconds: 2_000_000_000)
        let calls = busy.asked.value - started
        // Measured, not assumed: a loaded machine may resume this task late.
        let elapsed = ProcessInfo.processInfo.systemUptime - from
        // One every 0.2 s at most (fewer on a loaded machine); a tight loop makes thousands.
        #expect(calls >= 1 && Double(calls) <= elapsed / 0.2 + 3, "\(calls) calls in \(elapsed) s")
        #expect(!tier.isLive("busy"))
        await tier.close()
    }

    /// When a call is late, by the rule, for each call; after a failure, both; and a namespace
    /// no follower runs for (a tier with no client) says so. (States set by hand: the clock is
    /// the subject, not the service.)
    @Test func whatTheFollowerErrorSaysWhen() throws {
        let tier = try LocalTier(feedWait: 2)
        func said(_ call: FollowerCall, _ age: Double, lastError: String? = nil, synced: Bool = false) -> String? {
            tier.state.withLock { state in
                let now = DispatchTime.now().uptimeNanoseconds
                var feed = LocalTier.Feed(syncedAt: synced ? now : nil, allowed: true, floor: 0)
                feed.task = Task {}
                feed.lastError = lastError
                feed.asking = (call, now &- UInt64(age * 1e9))
                state.feeds["ns"] = feed
            }
            return tier.followerError("ns")
        }
        #expect(said(.stats, 0.5) == nil && said(.head, 0.5) == nil, "within a second")
        #expect(said(.stats, 1.5) == "the follower's stats call has had no answer for 1 s")
        #expect(said(.head, 4.2) == "the follower's call for the feed's head has had no answer for 4 s")
        #expect(said(.longPoll, 2.5) == nil, "within its wait and a second")
        #expect(said(.longPoll, 3.5) == "the follower's long poll has had no answer for 3 s (it waits 2 s)")
        #expect(said(.longPoll, 3.5, lastError: "timedOut")
                == "timedOut; since then the follower's long poll has had no answer for 3 s (it waits 2 s)")
        #expect(said(.longPoll, 0.5, lastError: "timedOut") == "timedOut")
        #expect(said(.longPoll, 9, synced: true) == nil, "live: nothing to explain")
        tier.state.withLock { tier.follow("unfollowed", in: &$0) }
        #expect(tier.followerError("unfollowed") == "no follower runs: the tier has no client")
        #expect(tier.followerError("never") == nil)
        tier.state.withLock { $0.stopped = true }
        #expect(said(.longPoll, 0.5) == "the tier is closed: no follower runs")
    }

    /// A service that cannot hold the follower's long poll (its waiter room full: `maxWaiters`
    /// 0) answers an empty page at once. The follower rests between polls (a quarter of its
    /// wait, at most a second) instead of asking again in a tight loop, and stays live.
    @Test func aFollowerAnsweredAtOnceRestsBetweenPolls() async throws {
        let full = try await offThePool {
            try TestService {
                $0.maxWaiters = 0
                $0.authEnabled = false
            }
        }
        let namespace = TestService.namespace("swiftrest")
        let tier = try LocalTier(feedWait: 2)
        _ = client(full.port, nil, tier: tier)
        try await following(tier, namespace)
        let before = try await offThePool { try Self.feedPolls(full) }
        try await Task.sleep(nanoseconds: 3_000_000_000)
        let polls = try await offThePool { try Self.feedPolls(full) } - before
        // One every 0.5 s: about 6 (fewer on a loaded machine); a tight loop makes hundreds.
        #expect(polls >= 1 && polls <= 12, "\(polls) long polls in 3 s")
        try await live(tier, namespace)
        await tier.close()
        try await offThePool { full.stop() }
    }

    /// Change-feed requests `service` has answered, from its metrics.
    static func feedPolls(_ service: TestService) throws -> Int {
        let text = String(decoding: try service.request("GET", "/metrics").body, as: UTF8.self)
        let prefix = "teamcache_http_requests_total{route=\"/v1/caches/{ns}/changes\",method=\"GET\","
            + "status_class=\"2xx\"} "
        let line = text.split(separator: "\n").first { $0.hasPrefix(prefix) }
        return line.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
    }

    /// A minute on, the encryption recheck fails (the stats route refused by a proxy while the
    /// feed answers): the answer held stays, the feed goes on, and the recheck is tried again in
    /// 10 s, not at every turn (a failing recheck used to stop the feed until it succeeded).
    @Test func anEncryptionRecheckThatFailsDoesNotHoldUpTheFeed() async throws {
        let proxy = try StatsRefusingProxy(to: service.port)
        let namespace = TestService.namespace("swiftrecheck")
        let token = try writer(namespace)
        let tier = try LocalTier(feedWait: 2)
        _ = client(proxy.port, token, tier: tier)
        try await following(tier, namespace)
        proxy.refusing.withLock { $0 = true }
        func feed() -> LocalTier.Feed? { tier.state.withLock { $0.feeds[namespace] } }
        tier.state.withLock { $0.feeds[namespace]?.checkedAt = DispatchTime.now().uptimeNanoseconds &- 61_000_000_000 }
        var deadline = Date().addingTimeInterval(10)
        while proxy.refused.value == 0 && Date() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
        try #require(proxy.refused.value > 0, "the recheck never came")
        let synced = feed()?.syncedAt ?? 0
        deadline = Date().addingTimeInterval(10)
        while (feed()?.syncedAt ?? 0) <= synced && Date() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
        #expect((feed()?.syncedAt ?? 0) > synced, "the feed stopped: \(tier.followerError(namespace) ?? "")")
        #expect(feed()?.allowed == true && feed()?.lastError == nil)
        // One recheck (its transport may send a request that met a closed connection once more).
        #expect(proxy.refused.value <= 2, "asked again at every turn: \(proxy.refused.value)")
        await tier.close()
    }

    /// A namespace encrypted while it is followed is asked about again (every
    /// `encryptionRecheck`; moved back here rather than waited for): its copies are dropped, as
    /// when it was encrypted from the start, and none is kept after.
    @Test func aNamespaceEncryptedWhileFollowedIsNoLongerKept() async throws {
        let (url, keys, service) = try await offThePool { try EncryptionTests.serviceWithNewKey(prefix: "tierrecheck") }
        let namespace = "recheck"
        let tier = try LocalTier(feedWait: 2)
        let b = client(service.port, nil, tier: tier)
        try await following(tier, namespace)
        try await b.put(namespace: namespace, key: "k", body: Data("plain".utf8), ttl: 300)
        _ = try await localReads(1, tier, namespace) {
            try await b.get(namespace: namespace, key: "k")?.fromLocal == true
        }
        #expect(tier.bytes > 0, "kept before the namespace was encrypted")
        try await offThePool { try EncryptionTests.encrypt(namespace, url: url, keys: keys) }
        tier.state.withLock { $0.feeds[namespace]?.checkedAt = DispatchTime.now().uptimeNanoseconds &- 61_000_000_000 }
        let deadline = Date().addingTimeInterval(15)
        while tier.state.withLock({ $0.feeds[namespace]?.allowed }) != false && Date() < deadline {
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        #expect(tier.state.withLock { $0.feeds[namespace]?.allowed } == false, "asked again after a minute")
        #expect(tier.bytes == 0)
        _ = try await b.get(namespace: namespace, key: "k")
        #expect(tier.bytes == 0, "nothing kept once encrypted")
        await tier.close()
        try await offThePool { service.stop() }
    }

    /// Past 10,000 keys' changes the oldest are forgotten, not all of them: a fill of an older
    /// version of a key changed just before (a lagging standby's answer) is still refused, and
    /// a fill that started before a forgotten change is refused whatever its key.
    @Test func theLatestChangesStayKnownPastTheBound() throws {
        let tier = try LocalTier()
        let now = Date().timeIntervalSince1970
        func copy(_ etag: String) -> LocalCopy {
            LocalCopy(kind: .raw, etag: etag, body: Data("v".utf8), contentType: "text/plain", expiresAt: now + 60,
                      updatedAt: now)
        }
        tier.state.withLock { $0.feeds["ns"] = LocalTier.Feed(syncedAt: nil, allowed: true, floor: 0) }
        let early = tier.mark()
        tier.state.withLock { state in
            for index in 0..<LocalTier.changedKeys - 1 {
                LocalTier.note(&state, .init(namespace: "ns", key: "k\(index)"), etag: "\"e\"")
            }
            LocalTier.note(&state, .init(namespace: "ns", key: "hot"), etag: "\"new\"")
            // One more key: past the bound, the oldest tenth goes.
            LocalTier.note(&state, .init(namespace: "ns", key: "last"), etag: "\"e\"")
        }
        tier.keep("ns", "hot", copy("\"old\""), since: tier.mark())
        #expect(tier.peek("ns", "hot") == nil, "an older version of a key changed just before was kept")
        tier.keep("ns", "hot", copy("\"new\""), since: tier.mark())
        #expect(tier.peek("ns", "hot")?.etag == "\"new\"")
        tier.keep("ns", "other", copy("\"x\""), since: early)
        #expect(tier.peek("ns", "other") == nil, "a fill from before a forgotten change was kept")
        #expect(tier.state.withLock { $0.changed.count } == LocalTier.changedKeys + 1 - LocalTier.changedKeys / 10)
    }

    /// A copy past its local expiry is revalidated with its ETag; the service's 304 says it is
    /// current, and the answer says so too: the service's ttl, not the copy's old expiry (a
    /// negative one), and not stale.
    @Test func aRevalidatedAnswerCarriesTheServicesFreshness() async throws {
        let namespace = TestService.namespace("swiftreval")
        let token = try writer(namespace)
        let tier = try LocalTier(feedWait: 2)
        let b = client(service.port, token, tier: tier)
        let descriptor = Descriptor(model: "m", input: .prompt("revalidated"))
        try await following(tier, namespace)
        let before = tier.mark()
        try await b.put(namespace: namespace, key: "k", body: Data("v".utf8), ttl: 300)
        try await b.upsert(namespace: namespace, descriptor, answer: ModelAnswer(response: "r"), ttl: 300)
        // Both writes noted twice: as this client's own, then from the feed (a change arriving
        // after the expiry is moved below would drop the copy: its expiry no longer agrees).
        for _ in 0..<500 where tier.mark() < before + 4 { try await Task.sleep(nanoseconds: 10_000_000) }
        try #require(tier.mark() >= before + 4, "the feed did not bring both writes")
        _ = try await localReads(1, tier, namespace) {
            try await b.get(namespace: namespace, key: "k")?.fromLocal == true
        }
        _ = try await localReads(1, tier, namespace) {
            guard case .hit(let answer, _, _, _) = try await b.lookup(namespace: namespace, descriptor) else {
                return false
            }
            return answer.fromLocal
        }
        // Reads that asked the service above may have revalidated: counted from here.
        let revalidated = tier.counts.revalidated
        // Both copies expire here (the service still holds them fresh).
        tier.state.withLock { state in
            for key in ["k", descriptor.key] {
                let name = LocalCopies.Name(namespace: namespace, key: key)
                guard var copy = state.copies.get(name) else { continue }
                copy.expiresAt = Date().timeIntervalSince1970 - 30
                state.copies.put(name, copy)
            }
        }
        let entry = try #require(try await b.get(namespace: namespace, key: "k"))
        #expect(tier.counts.revalidated == revalidated + 1, "the raw copy was not revalidated")
        #expect(!entry.fromLocal && (250...300).contains(CachedEntry.ttl(entry.cacheStatus) ?? -1),
                "\(entry.cacheStatus ?? "")")
        guard case .hit(let answer, _, _, let stale) = try await b.lookup(namespace: namespace, descriptor) else {
            Issue.record("no hit")
            return
        }
        #expect(answer.response == "r" && !answer.fromLocal && !stale)
        #expect(tier.counts.revalidated == revalidated + 2, "the lookup's copy was not revalidated")
        await tier.close()
    }
}
