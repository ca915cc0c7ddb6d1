import CacheKeys
import Foundation
@testable import TeamCacheClient
import Testing
import TestSupport

/// The Swift client's local tier (issue #31) against a real service: two clients A and B on
/// one namespace, B with a tier. B answers fresh copies with no request while its feed is
/// live; A's writes reach B's tier through the feed; B's local hits are counted by the
/// service; B answers from its tier while the service is stopped; a restarted app finds its
/// file; the tier stays under its bound; a fill that raced a change is not kept.
@Suite struct ClientLocalTierTests {
    let service = TestService.shared

    /// Lookups and reads that ask the service wait up to 10 s: the tier is the subject here,
    /// not the short deadline of a caller's lookup (0.5 s), which a debug service on a loaded
    /// machine can pass (`aTieredClientNeverHoldsUpTheCallersCall` tests that deadline).
    func client(_ port: Int, _ token: String?, tier: LocalTier?) -> TeamCacheClient {
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: token)
        configuration.lookupTimeout = 10
        return TeamCacheClient(configuration, localTier: tier)
    }

    /// Starts following `namespace` and waits until live: reads made before (the first of a
    /// namespace) are not kept, as they may predate the follower's cursor.
    func following(_ tier: LocalTier, _ namespace: String) async throws {
        tier.state.withLock { tier.follow(namespace, in: &$0) }
        try await live(tier, namespace)
    }

    func live(_ tier: LocalTier, _ namespace: String) async throws {
        // Returns the moment it is live: a loaded service answers a long poll late now and then,
        // and the tier is then not live for a moment (by design), so a check made after the wait
        // (a `where` loop ran its 3,000 turns, most without sleeping, then checked) can miss.
        for _ in 0..<3000 {
            if tier.isLive(namespace) { return }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        let why = tier.followerError(namespace) ?? "none (no page has left it caught up and heard from lately)"
        try #require(tier.isLive(namespace), "not live; the follower's last error: \(why)")
    }

    /// Reads until `count` of them were answered locally, each once the feed is live, and
    /// returns how many asked the service instead. Only a live follower's copies answer
    /// unasked, and a page read while the service's sequencer was busy (the suites around
    /// write meanwhile) says `more`, which makes the tier revalidate until the next page: a
    /// read may lose the live feed between the check and the read (CI saw it right after a
    /// write, whose own change had just woken the follower), and then rightly asks. A few at
    /// most: a tier that never answers locally fails here.
    func localReads(_ count: Int, _ tier: LocalTier, _ namespace: String, _ read: () async throws -> Bool)
        async throws -> Int {
        var local = 0, asked = 0
        while local < count {
            try await live(tier, namespace)
            if try await read() {
                local += 1
            } else {
                asked += 1
                try #require(asked < 4, "live \(tier.isLive(namespace))")
            }
        }
        return asked
    }

    /// A tier's copies are what one token may read, and its queued writes go out with that token:
    /// a client of another token, or another service, works without it rather than through it.
    @Test func aTierServesOneServiceAndOneToken() throws {
        let tier = try LocalTier(path: nil)
        let token = try writer(TestService.namespace("one-token"))
        let first = client(service.port, token, tier: tier)
        #expect(first.localTier === tier)
        #expect(client(service.port, token, tier: tier).localTier === tier, "the same service and token share it")
        #expect(client(service.port, "tc_" + String(repeating: "9", count: 40), tier: tier).localTier == nil)
        #expect(client(service.port + 1, token, tier: tier).localTier == nil)
        let slashed = TeamCacheClient.Configuration(baseURL: URL(string: "HTTP://127.0.0.1:\(service.port)/")!,
                                                     token: token)
        #expect(TeamCacheClient(slashed, localTier: tier).localTier === tier, "a trailing slash is the same service")
    }

    @Test func freshCopiesAnswerLocallyAndAWriteElsewhereIsSeenWithinASecond() async throws {
        let namespace = TestService.namespace("swifttier")
        let token = try writer(namespace)
        let a = client(service.port, token, tier: nil)
        let tier = try LocalTier(feedWait: 2, reportInterval: 0.2)
        let b = client(service.port, token, tier: tier)
        try await following(tier, namespace)
        let descriptor = Descriptor(model: "m", input: .prompt("swift local"))
        try await a.upsert(namespace: namespace, descriptor,
                           answer: ModelAnswer(response: "first", metadata: ModelAnswer.metadata(inputTokens: 4,
                                                                                                    outputTokens: 6)))
        #expect(try await !b.lookup(namespace: namespace, descriptor).fromLocal)
        // (The age is not compared: on a loaded machine a second may pass.)
        let askedService = try await localReads(5, tier, namespace) {
            let read = try await b.lookup(namespace: namespace, descriptor)
            guard case .hit(let answer, descriptor.key, _, false) = read else {
                Issue.record("\(read)")
                return false
            }
            #expect(answer == ModelAnswer(response: "first", metadata: ModelAnswer.metadata(
                inputTokens: 4, outputTokens: 6)))
            return read.fromLocal
        }
        #expect(tier.counts.localHits == 5)
        // A's write reaches B's tier through the feed: the copy goes, the next read fetches.
        try await a.upsert(namespace: namespace, descriptor, answer: ModelAnswer(response: "second"))
        let written = ProcessInfo.processInfo.systemUptime
        while tier.peek(namespace, descriptor.key) != nil {
            #expect(ProcessInfo.processInfo.systemUptime - written < 1, "the write was not seen in 1 s")
            if ProcessInfo.processInfo.systemUptime - written > 1 { break }
            try await Task.sleep(nanoseconds: 1_000_000)
        }
        guard case .hit(let fresh, _, _, _) = try await b.lookup(namespace: namespace, descriptor) else {
            Issue.record("a miss")
            return
        }
        #expect(fresh.response == "second" && !fresh.fromLocal)
        // The five local hits reach the service's stats, marked local, with their tokens (by hand:
        // 1 service hit and 5 local ones on (4, 6), and any reads that asked the service on
        // (4, 6) too; 1 service hit on the second version).
        await tier.report()
        var lookups: [String: Int] = [:]
        for _ in 0..<50 {
            try service.app.tracker.flush()
            let stats = try await a.stats(namespace: namespace)
            lookups = Dictionary(uniqueKeysWithValues: ["hit", "local"].map { ($0, stats["lookups"]?[$0]?.integerValue ?? -1) })
            if lookups["hit"] == 7 + askedService
                && stats["tokens_saved"]?["input"]?.integerValue == 4 * (6 + askedService) { break }
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        #expect(lookups == ["hit": 7 + askedService, "local": 5])
        await tier.close()
    }

    @Test func bAnswersFromItsTierWhileTheServiceIsStopped() async throws {
        let replica = try await offThePool { try ServeProcess(prefix: "swifttieroff") }
        defer { replica.stop(SIGKILL) }
        try #require(await replica.listening())
        let tier = try LocalTier(feedWait: 2)
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(replica.port)")!,
                                                          token: nil)
        configuration.backoff = 0.01
        let b = TeamCacheClient(configuration, localTier: tier)
        try await following(tier, "off")
        let descriptor = Descriptor(model: "m", input: .prompt("kept offline"))
        try await b.put(namespace: "off", key: "short", body: Data("soon stale".utf8), ttl: 1)
        try await b.upsert(namespace: "off", descriptor, answer: ModelAnswer(response: "kept"), ttl: 60)
        try await Task.sleep(nanoseconds: 1_200_000_000)
        #expect(tier.followerError("off") == nil)
        replica.stop(SIGKILL)
        let stale = try #require(try await b.get(namespace: "off", key: "short", maxStale: 60))
        #expect(stale.fromLocal && String(decoding: stale.body, as: UTF8.self) == "soon stale")
        #expect(stale.cacheStatus?.contains("ttl=-") == true)
        await #expect(throws: TeamCacheClientError.self) { _ = try await b.get(namespace: "off", key: "short") }
        await #expect(throws: TeamCacheClientError.self) {
            _ = try await b.get(namespace: "off", key: "never held", maxStale: 60)
        }
        // Within its TTL, but the service cannot say it was not replaced: marked stale.
        let kept = try await b.lookup(namespace: "off", descriptor)
        guard case .hit(let answer, _, _, let stale) = kept else {
            Issue.record("\(kept)")
            return
        }
        #expect(kept.fromLocal && answer.response == "kept" && stale)
        // The follower says why the tier is no longer live (the app's log line).
        for _ in 0..<100 where tier.followerError("off") == nil { try await Task.sleep(nanoseconds: 100_000_000) }
        #expect(tier.followerError("off")?.contains("transport") == true, "\(tier.followerError("off") ?? "none")")
        await tier.close()
    }

    @Test func aRestartedAppFindsItsFileAndWhatChangedMeanwhile() async throws {
        let namespace = TestService.namespace("swifttierfile")
        let token = try writer(namespace)
        let file = try TierFile()
        defer { file.remove() }
        let path = file.path
        let a = client(service.port, token, tier: nil)
        let first = try LocalTier(path: path, feedWait: 2)
        let b = client(service.port, token, tier: first)
        try await following(first, namespace)
        for name in ["kept", "changed"] {
            try await a.put(namespace: namespace, key: name, body: Data(name.utf8), ttl: 300)
            _ = try await b.get(namespace: namespace, key: name)
        }
        #expect(first.peek(namespace, "kept") != nil && first.peek(namespace, "changed") != nil)
        await first.close()
        try await a.put(namespace: namespace, key: "changed", body: Data("while B was down".utf8), ttl: 300)
        let again = try LocalTier(path: path, feedWait: 2)
        let restarted = client(service.port, token, tier: again)
        #expect(again.peek(namespace, "kept") != nil)
        try await following(again, namespace)
        let kept = try #require(try await restarted.get(namespace: namespace, key: "kept"))
        #expect(kept.fromLocal && String(decoding: kept.body, as: UTF8.self) == "kept")
        #expect(again.peek(namespace, "changed") == nil)
        let changed = try #require(try await restarted.get(namespace: namespace, key: "changed"))
        #expect(String(decoding: changed.body, as: UTF8.self) == "while B was down")
        await again.close()
    }

    @Test(arguments: [false, true]) func theTierNeverHoldsMoreThanItsBound(onDisk: Bool) async throws {
        let namespace = TestService.namespace("swifttierbound")
        let file = try TierFile()
        defer { file.remove() }
        let bound = 64 * 1024
        let tier = try LocalTier(path: onDisk ? file.path : nil, maxBytes: bound,
                                 feedWait: 2)
        let b = client(service.port, try writer(namespace), tier: tier)
        try await following(tier, namespace)
        for index in 0..<150 {
            try await b.put(namespace: namespace, key: "k\(index)", body: Data(count: 1500), ttl: 300)
            #expect(tier.bytes <= bound)
        }
        #expect(tier.peek(namespace, "k149") != nil && tier.peek(namespace, "k0") == nil)
        try await b.put(namespace: namespace, key: "huge", body: Data(count: bound), ttl: 300)
        #expect(tier.peek(namespace, "huge") == nil)
        await tier.close()
    }

    @Test func warmFillsTheTierFromTheTopEntriesAndATagWithoutCountingLookups() async throws {
        let namespace = TestService.namespace("swifttierwarm")
        let token = try writer(namespace)
        let a = client(service.port, token, tier: nil)
        let descriptor = Descriptor(model: "m", input: .prompt("popular"))
        try await a.upsert(namespace: namespace, descriptor, answer: ModelAnswer(response: "pre-warmed"), tags: ["warm"])
        try await a.put(namespace: namespace, key: "raw", body: Data("raw body".utf8), tags: ["warm"])
        for _ in 0..<3 { _ = try await a.lookup(namespace: namespace, descriptor) }
        try service.app.tracker.flush()
        let tier = try LocalTier(feedWait: 2)
        let b = client(service.port, token, tier: tier)
        #expect(try await b.warm(namespace: namespace, top: 5) == 2)  // both: the raw one with 0 hits
        #expect(try await b.warm(namespace: namespace, tag: "warm") == 2)
        // warm waits for the follower up to feedWait + 5 s, then fills anyway: say why it was not live.
        #expect(tier.isLive(namespace), "not live after warm: \(tier.followerError(namespace) ?? "no follower error")")
        let hit = try await b.lookup(namespace: namespace, descriptor)
        guard case .hit(let answer, _, _, let stale) = hit else {
            Issue.record("\(hit)")
            return
        }
        #expect(hit.fromLocal && answer.response == "pre-warmed" && !stale)
        let raw = try #require(try await b.get(namespace: namespace, key: "raw"))
        #expect(raw.fromLocal && String(decoding: raw.body, as: UTF8.self) == "raw body")
        await tier.close()
    }

    enum Sick: String, CaseIterable, Sendable { case refused, frozen, unauthorized }

    /// A cache that refuses connections, never answers, or refuses the token: every entry point
    /// of a client with a tier fails fast (or `cached` goes on with the model call), and closing
    /// the tier does not wait on the service.
    @Test(arguments: Sick.allCases) func aTieredClientNeverHoldsUpTheCallersCall(_ sick: Sick) async throws {
        let frozen = try ClientFailOpenTests.Frozen(listening: sick != .refused)
        let port = sick == .unauthorized ? service.port : frozen.port
        let tier = try LocalTier(feedWait: 2)
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(port)")!,
                                                          token: "tc_refused")
        configuration.lookupTimeout = 0.3
        configuration.timeout = 0.5
        configuration.backoff = 0.01
        let client = TeamCacheClient(configuration, localTier: tier)
        let descriptor = Descriptor(model: "m", input: .prompt("fail open \(sick)"))
        var started = ProcessInfo.processInfo.systemUptime
        for _ in 0..<3 {
            let answer = try await client.cached(namespace: "failopen", descriptor) { ModelAnswer(response: "paid") }
            #expect(answer.response == "paid")
        }
        let paid = ProcessInfo.processInfo.systemUptime - started
        #expect(paid < 3, "three cached calls paid \(paid) s")
        let calls: [@Sendable () async throws -> Void] = [
            { _ = try await client.lookup(namespace: "failopen", descriptor) },
            { _ = try await client.get(namespace: "failopen", key: "k") },
            { _ = try await client.put(namespace: "failopen", key: "k", body: Data("v".utf8)) },
            { _ = try await client.upsert(namespace: "failopen", descriptor, answer: ModelAnswer(response: "a")) },
            { _ = try await client.warm(namespace: "failopen", top: 5) },
        ]
        for call in calls {
            started = ProcessInfo.processInfo.systemUptime
            await #expect(throws: TeamCacheClientError.self) { try await call() }
            #expect(ProcessInfo.processInfo.systemUptime - started < 1.5)
        }
        // The namespace was never known to be keepable: nothing waits in the outbox.
        #expect(tier.outboxCount == 0)
        started = ProcessInfo.processInfo.systemUptime
        await tier.flush()  // reports and sends now: nothing waits on the service
        #expect(ProcessInfo.processInfo.systemUptime - started < 1.5)
        // The follower says why the tier is not live, as an app would log it.
        let cause = switch sick {
        case .refused: "transport"
        case .frozen: "timedOut"
        case .unauthorized: "401"
        }
        for _ in 0..<100 {
            if tier.followerError("failopen") != nil { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        #expect(!tier.isLive("failopen"))
        #expect(tier.followerError("failopen")?.contains(cause) == true, "\(tier.followerError("failopen") ?? "none")")
        started = ProcessInfo.processInfo.systemUptime
        await tier.close()
        #expect(ProcessInfo.processInfo.systemUptime - started < 2.5)
    }

    /// A bound too small is an error, not a trap; a tier given to a second client is shared.
    @Test func aBadBoundThrowsAndASecondClientSharesTheTier() async throws {
        #expect(throws: (any Error).self) { _ = try LocalTier(maxBytes: 1000) }
        let tier = try LocalTier()
        let url = URL(string: "http://127.0.0.1:\(service.port)")!
        let first = TeamCacheClient(baseURL: url, token: nil, localTier: tier)
        let second = TeamCacheClient(baseURL: url, token: nil, localTier: tier)
        #expect(first.localTier === second.localTier)
        await tier.close()
    }

    /// A report whose answer was lost stays unanswered and is sent again as it was (same
    /// reporter, same number): the service counts its hits once. Counted by hand: 4 local hits
    /// (and a service hit for each read that asked the service).
    @Test func aReportSentAgainAfterALostAnswerIsCountedOnce() async throws {
        let namespace = TestService.namespace("swiftonce")
        let token = try writer(namespace)
        let tier = try LocalTier(feedWait: 2, reportInterval: 60)
        let b = client(service.port, token, tier: tier)
        try await following(tier, namespace)
        try await b.put(namespace: namespace, key: "k", body: Data("v".utf8), ttl: 300)
        let askedService = try await localReads(4, tier, namespace) {
            try await b.get(namespace: namespace, key: "k")?.fromLocal == true
        }
        // Numbered, then sent and counted; the answer "lost": the report is still unanswered.
        let lost = tier.state.withLock { state in
            LocalTier.numberPending(&state)
            return state.unsent
        }
        #expect(lost.count == 1 && lost.first?.hits.first?.count == 4)
        await tier.report()
        tier.state.withLock { $0.unsent = lost }
        await tier.report()
        #expect(tier.state.withLock { $0.unsent.isEmpty })
        var lookups: [String: Int] = [:]
        for _ in 0..<20 {
            try service.app.tracker.flush()
            let stats = try await b.stats(namespace: namespace)
            lookups = Dictionary(uniqueKeysWithValues: ["hit", "local"].map { ($0, stats["lookups"]?[$0]?.integerValue ?? -1) })
            if lookups["local"] != 0 { break }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        try await Task.sleep(nanoseconds: 500_000_000)
        try service.app.tracker.flush()
        let stats = try await b.stats(namespace: namespace)
        #expect(stats["lookups"]?["local"]?.integerValue == 4
                && stats["lookups"]?["hit"]?.integerValue == 4 + askedService, "\(lookups)")
        await tier.close()
    }

    @Test func aFillThatRacedAChangeIsNotKept() throws {
        let tier = try LocalTier()
        tier.state.withLock { state in
            state.feeds["ns"] = LocalTier.Feed(syncedAt: nil, allowed: true, floor: 0)
        }
        let copy = LocalCopy(kind: .raw, etag: "\"old\"", body: Data("old".utf8), contentType: "x",
                             expiresAt: Date().timeIntervalSince1970 + 60, updatedAt: Date().timeIntervalSince1970)
        let since = tier.mark()
        tier.state.withLock { state in
            LocalTier.apply(&state, "ns", CacheChange(cursor: "1", kind: .put, key: Array("k".utf8), etag: "\"new\"",
                                                      size: nil, contentType: nil, expiresAt: nil, staleUntil: nil,
                                                      body: nil, encoding: nil))
        }
        tier.keep("ns", "k", copy, since: since)
        #expect(tier.peek("ns", "k") == nil)
        // Asked after the change, and still answered the older version (a read standby that lags
        // the feed): not kept either.
        tier.keep("ns", "k", copy, since: tier.mark())
        #expect(tier.peek("ns", "k") == nil)
        var current = copy
        current.etag = "\"new\""
        tier.keep("ns", "k", current, since: tier.mark())
        #expect(tier.peek("ns", "k")?.etag == "\"new\"")
    }
}

/// A tier file's path in a temporary folder of its own (`remove()` deletes the folder).
struct TierFile {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tier-\(UUID().uuidString)")
    var path: String { folder.appendingPathComponent("tier.sqlite").path }

    init() throws { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) }

    func remove() { try? FileManager.default.removeItem(at: folder) }
}
