import CacheKeys
import Foundation
import Locking
@testable import TeamCacheClient
import Testing
import TestSupport

/// The local tier's outbox (issue #31): writes made while the service cannot be reached wait
/// in it and are sent when it answers again; in a file it outlives the process, in the Python
/// client's row format, and belongs to one tier at a time.
extension ClientLocalTierTests {
    @Test func offlineWritesWaitInTheOutboxAndReachTheServiceWhenItAnswersAgain() async throws {
        let database = try await offThePool { try TestDatabase.shared.migratedDatabase(prefix: "swifttierbox") }
        let replica = try await offThePool { try ServeProcess(database: database) }
        defer { replica.stop(SIGKILL) }
        try #require(await replica.listening())
        let url = URL(string: "http://127.0.0.1:\(replica.port)")!
        let tier = try LocalTier(feedWait: 2, reportInterval: 0.2)
        var configuration = TeamCacheClient.Configuration(baseURL: url, token: nil)
        // Generous deadlines: a stopped service refuses at once, and the debug replica on a
        // loaded machine once took over 0.5 s for the first PUT.
        configuration.timeout = 5
        configuration.lookupTimeout = 2
        configuration.breaker = CircuitBreaker(cooldown: 0.5)
        let b = TeamCacheClient(configuration, localTier: tier)
        try await following(tier, "box")
        let descriptor = Descriptor(model: "m", input: .prompt("made offline"))
        try await b.put(namespace: "box", key: "k", body: Data("base".utf8), ttl: 300)
        replica.stop(SIGKILL)  // stopped: every call is refused
        let offline = ProcessInfo.processInfo.systemUptime
        let first = try await b.put(namespace: "box", key: "k", body: Data("first".utf8), ttl: 300)
        let second = try await b.put(namespace: "box", key: "k", body: Data("second".utf8), ttl: 300)
        let upserted = try await b.upsert(namespace: "box", descriptor, answer: ModelAnswer(response: "from B"),
                                          staleWhileRevalidate: 25)
        // Queued on the refusal, not after a deadline (5 s each).
        let queuing = ProcessInfo.processInfo.systemUptime - offline
        #expect(queuing < 2.5, "three offline writes took \(queuing) s to queue")
        #expect(first.queued && second.queued && upserted.queued && tier.outboxCount == 2)
        // The queued upsert's copy keeps its window, as the service's answer would.
        #expect(tier.state.withLock { $0.copies.peek(.init(namespace: "box", key: descriptor.key)) }?
            .staleWhileRevalidate == 25)
        // B reads its own write meanwhile (marked stale: the service could not be asked).
        let own = try #require(try await b.get(namespace: "box", key: "k", maxStale: 0))
        #expect(own.fromLocal && String(decoding: own.body, as: UTF8.self) == "second")
        // Started again where B looks for it.
        let port = replica.port
        let restarted = try await offThePool { try ServeProcess(database: database, port: port) }
        defer { restarted.stop(SIGKILL) }
        try #require(await restarted.listening())
        for _ in 0..<100 where tier.outboxCount > 0 {
            await tier.flush()
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        #expect(tier.outboxCount == 0 && tier.conflicts.isEmpty, "\(tier.conflicts)")
        var patient = TeamCacheClient.Configuration(baseURL: url, token: nil)
        patient.lookupTimeout = 5
        let plain = TeamCacheClient(patient)
        let stored = try #require(try await plain.get(namespace: "box", key: "k"))
        #expect(String(decoding: stored.body, as: UTF8.self) == "second")
        guard case .hit(let answer, _, _, _) = try await plain.lookup(namespace: "box", descriptor) else {
            Issue.record("the offline upsert did not arrive")
            return
        }
        #expect(answer.response == "from B")
        await tier.close()
    }

    /// The outbox outlives the process in the file, in the Python client's format: every byte
    /// of a body (as Latin-1 text) and a descriptor come back as they were queued.
    @Test func theOutboxOutlivesTheProcessInTheFile() async throws {
        let file = try TierFile()
        defer { file.remove() }
        let path = file.path
        let body = Data((0...255).map { UInt8($0) })
        let namespace = TestService.namespace("swiftkept")
        let token = try writer(namespace)
        let descriptor = Descriptor(model: "m", input: .prompt("kept across a restart"))
        do {
            let tier = try LocalTier(path: path)
            tier.state.withLock { $0.feeds[namespace] = LocalTier.Feed(syncedAt: nil, allowed: true, floor: 0) }
            let copy = LocalCopy(kind: .raw, etag: nil, body: body, contentType: "x", expiresAt: 0, updatedAt: 0)
            #expect(tier.queue(namespace, "raw", .put(body: body, contentType: "application/x-kept", ttl: 60, tags: ["t"]), copy: copy))
            let upsert = LocalTier.Queued.Write.upsert(descriptor, ModelAnswer(response: "r"), ttl: nil, tags: [],
                                                       staleWhileRevalidate: 30)
            #expect(tier.queue(namespace, descriptor.key, upsert, copy: copy))
            await tier.close()
        }
        let again = try LocalTier(path: path)
        let queued = again.state.withLock { $0.outbox }
        #expect(queued.count == 2)
        guard case .put(let kept, "application/x-kept", 60, ["t"])? = queued.first?.write,
              case .upsert(let keptDescriptor, let answer, nil, [], 30)? = queued.last?.write else {
            Issue.record("\(queued.map(\.write))")
            return
        }
        #expect(kept == body && keptDescriptor.key == descriptor.key && answer.response == "r")
        // Sent by the process that found them, byte for byte.
        _ = client(service.port, token, tier: again)
        for _ in 0..<50 where again.outboxCount > 0 {
            await again.flush()
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        #expect(again.outboxCount == 0 && again.conflicts.isEmpty, "\(again.conflicts.map(\.outcome))")
        // The queued upsert's stale-while-revalidate window reached the service with it.
        let answered = try object(try service.request("POST", "/v1/caches/\(namespace)/lookup", token: token,
                                                      json: JSONValue.object(descriptor.jsonMembers).serialized))
        #expect(answered["response"] as? String == "r" && answered["stale_while_revalidate"] as? Int == 30,
                "\(answered)")
        await again.close()
        let plain = client(service.port, token, tier: nil)
        let stored = try #require(try await plain.get(namespace: namespace, key: "raw"))
        #expect(stored.body == body)
        guard case .hit(let sent, _, _, _) = try await plain.lookup(namespace: namespace, descriptor) else {
            Issue.record("the kept upsert did not arrive")
            return
        }
        #expect(sent.response == "r")
        // Nothing is left in the file to be sent twice.
        let third = try LocalTier(path: path)
        #expect(third.outboxCount == 0)
        await third.close()
    }

    /// Rows the Python client wrote (its `json.dumps`: every byte above 0x7E and below 0x20
    /// escaped) come back as the writes it queued: a body byte for byte, a descriptor whole.
    @Test func theOutboxReadsThePythonClientsRows() async throws {
        let file = try TierFile()
        defer { file.remove() }
        let path = file.path
        await (try LocalTier(path: path)).close()  // the schema
        let sqlite = try LocalFile(path: path)
        // As printed by Python 3.11's json.dumps for these payloads.
        let put = #"{"body": "\u0000\u0001\n\"\\\u007f\u0080\u00c8\u00ff", "content_type": "application/x-kept", "#
            + #""ttl": 60, "tags": ["t"], "stale_while_revalidate": null}"#
        let upsert = #"{"descriptor": {"model": "m", "prompt": "\u00e9 from python"}, "response": "r", "#
            + #""metadata": {"input_tokens": 3}, "ttl": null, "tags": [], "stale_while_revalidate": null}"#
        for (kind, key, payload) in [("put", "raw", put), ("upsert", "d", upsert)] {
            try sqlite.run("INSERT INTO outbox (namespace, kind, key, payload, base_etag, written_at, size) "
                           + "VALUES ('ns', ?1, ?2, ?3, NULL, 1.5, 10)", [.text(kind), .text(key), .text(payload)])
        }
        sqlite.close()
        let tier = try LocalTier(path: path)
        let queued = tier.state.withLock { $0.outbox }
        guard queued.count == 2, case .put(let body, "application/x-kept", 60, ["t"]) = queued[0].write,
              case .upsert(let descriptor, let answer, nil, [], nil) = queued[1].write else {
            Issue.record("\(queued.map(\.write))")
            return
        }
        #expect(body == Data([0, 1, 10, 34, 92, 127, 128, 200, 255]))
        #expect(descriptor.key == Descriptor(model: "m", input: .prompt("é from python")).key)
        #expect(answer.response == "r" && answer.metadata == .object([("input_tokens", .int(3))]))
        await tier.close()
    }

    /// A file an earlier version left with a key's earlier row beside its last (it replaced them
    /// in two steps, and crashed between): only the last, made over the same base, is loaded.
    /// (Sent in order, the earlier would have won and the later been reported superseded.)
    @Test func aFileHoldingTwoRowsOfAKeyLoadsTheLast() async throws {
        let file = try TierFile()
        defer { file.remove() }
        await (try LocalTier(path: file.path)).close()  // the schema
        let sqlite = try LocalFile(path: file.path)
        for body in ["first", "second"] {
            try sqlite.run("INSERT INTO outbox (namespace, kind, key, payload, base_etag, written_at, size) "
                           + "VALUES ('ns', 'put', 'k', ?1, NULL, 1.5, 10)",
                           [.text(#"{"body": ""# + body + #"", "ttl": 60}"#)])
        }
        sqlite.close()
        let tier = try LocalTier(path: file.path)
        let queued = tier.state.withLock { $0.outbox }
        guard queued.count == 1, case .put(let body, _, _, _) = queued[0].write else {
            Issue.record("\(queued.map(\.write))")
            return
        }
        #expect(body == Data("second".utf8))
        await tier.close()
    }

    /// A tier file belongs to one tier at a time: a second tier on it (another process, or this
    /// one) keeps its copies in memory and does not load, so never sends, the first's outbox.
    @Test func aFileHeldByOneTierIsNotOpenedByAnother() async throws {
        let file = try TierFile()
        defer { file.remove() }
        let path = file.path
        let first = try Self.tierWithOneQueuedWrite(path)
        let second = try LocalTier(path: path)
        #expect(second.outboxCount == 0)
        await second.close()
        await first.close()
        let third = try LocalTier(path: path)
        #expect(third.outboxCount == 1)
        await third.close()
    }

    /// A lock held a moment after its tier closed (a child process between its fork and its
    /// exec holds a copy of the descriptor) is waited for: the tier reopened on the file loads
    /// its outbox. It once gave the file up at once and kept nothing but memory.
    @Test func aLockLetGoAMomentLaterIsWaitedFor() async throws {
        let file = try TierFile()
        defer { file.remove() }
        let path = file.path
        await (try Self.tierWithOneQueuedWrite(path)).close()
        let held = open(path + "-lock", O_RDWR)
        #expect(held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0)
        Thread.detachNewThread {
            usleep(150_000)
            close(held)
        }
        let again = try LocalTier(path: path)
        #expect(again.outboxCount == 1)
        await again.close()
    }

    /// A tier on `path` with one write queued (namespace "ns", key "k"), in its file.
    static func tierWithOneQueuedWrite(_ path: String) throws -> LocalTier {
        let tier = try LocalTier(path: path)
        tier.state.withLock { $0.feeds["ns"] = LocalTier.Feed(syncedAt: nil, allowed: true, floor: 0) }
        let copy = LocalCopy(kind: .raw, etag: nil, body: Data("v".utf8), contentType: "text/plain", expiresAt: 0,
                             updatedAt: 0)
        #expect(tier.queue("ns", "k", .put(body: Data("v".utf8), contentType: "text/plain", ttl: nil, tags: []),
                           copy: copy))
        return tier
    }

    /// A copy a change dropped never comes back from the file: here the file refuses the delete
    /// (a trigger another connection added; a read-only or corrupt file fails the same way), and
    /// the tier gives the file up for memory alone, as the Python client does. Before, the
    /// failed delete was ignored and the next read loaded the old row back as a fresh copy.
    @Test func aCopyWhoseRowCannotBeDeletedDoesNotComeBack() throws {
        let file = try TierFile()
        defer { file.remove() }
        let copies = try LocalCopies(path: file.path, maxBytes: 1 << 20)
        #expect(copies.loadOutbox().isEmpty)  // read, as a tier reads it at its start
        let name = LocalCopies.Name(namespace: "ns", key: "k")
        copies.put(name, LocalCopy(kind: .raw, etag: "\"v1\"", body: Data("old".utf8), contentType: "text/plain",
                                   expiresAt: Date().timeIntervalSince1970 + 300, updatedAt: 0))
        #expect(copies.fileBytes > 0)
        let other = try LocalFile(path: file.path)
        try other.run("CREATE TRIGGER refuse BEFORE DELETE ON entries BEGIN SELECT RAISE(ABORT, 'refused'); END")
        other.close()
        copies.drop(name)  // a change to the key arrived
        #expect(copies.get(name) == nil, "the dropped copy came back from the file")
        #expect(copies.fileBytes == 0)
        // Set aside: its outbox rows could no longer be deleted as they are sent.
        #expect(!FileManager.default.fileExists(atPath: file.path))
        // Memory goes on: a new copy is kept and answers.
        copies.put(name, LocalCopy(kind: .raw, etag: "\"v2\"", body: Data("new".utf8), contentType: "text/plain",
                                   expiresAt: Date().timeIntervalSince1970 + 300, updatedAt: 0))
        #expect(copies.get(name)?.etag == "\"v2\"")
        copies.close()
    }

    /// A file whose rows hold sizes no tier wrote (the extremes of 64 bits: another client's
    /// bug, a corruption) neither traps nor stops the tier: sizes are read within the bound,
    /// and the file is opened, trimmed and dropped from as usual.
    @Test func sizesInTheFileOutsideAnyBoundDoNotTrap() throws {
        let file = try TierFile()
        defer { file.remove() }
        try LocalCopies(path: file.path, maxBytes: 1 << 16).close()  // the schema
        let other = try LocalFile(path: file.path)
        for (key, size) in [("huge", Int64.max), ("negative", Int64.min), ("huge2", Int64.max)] {
            try other.run("INSERT INTO entries VALUES ('ns', ?1, 'raw', NULL, x'00', 't', NULL, 1e12, 0, 0, ?2, 0)",
                          [.text(key), .int(size)])
        }
        other.close()
        let copies = try LocalCopies(path: file.path, maxBytes: 1 << 16)
        #expect(copies.fileBytes == 1 << 16, "read within the bound")
        copies.drop(.init(namespace: "ns", key: "negative"))
        #expect((0...(1 << 16)).contains(copies.fileBytes))
        // A copy kept: the file is over its bound and trimmed, the oldest (the odd rows) first.
        let now = Date().timeIntervalSince1970
        copies.put(.init(namespace: "ns", key: "k"), LocalCopy(kind: .raw, etag: nil, body: Data("v".utf8),
                                                               contentType: "text/plain", expiresAt: now + 60,
                                                               updatedAt: now))
        #expect((0...(1 << 16)).contains(copies.fileBytes))
        #expect(copies.peek(.init(namespace: "ns", key: "huge")) == nil)
        #expect(copies.get(.init(namespace: "ns", key: "k"))?.body == Data("v".utf8))
        copies.close()
    }

    /// A key's new outbox row and its earlier row's removal are one transaction: when the
    /// removal fails (a trigger refuses it here, as a crash would stop it), the new row is not
    /// left beside the earlier one either (sent in order, the earlier would win).
    @Test func aRewrittenKeysRowsChangeInOneTransaction() throws {
        let file = try TierFile()
        defer { file.remove() }
        let copies = try LocalCopies(path: file.path, maxBytes: 1 << 20)
        func item(_ body: String) -> LocalTier.Queued {
            LocalTier.Queued(namespace: "ns", key: "k", write: .put(body: Data(body.utf8), contentType: "x", ttl: 60,
                                                                   tags: []), baseETag: nil, writtenAt: 1)
        }
        let first = copies.queue(item("first"))
        #expect(first > 0)
        let other = try LocalFile(path: file.path)
        try other.run("CREATE TRIGGER refuse BEFORE DELETE ON outbox BEGIN SELECT RAISE(ABORT, 'refused'); END")
        other.close()
        #expect(copies.queue(item("second"), replacing: first) == 0, "the file failed: given up")
        copies.close()
        let after = try LocalFile(path: file.path)  // kept: its outbox was never loaded
        let payloads = try after.run("SELECT payload FROM outbox ORDER BY id").compactMap { $0.first?.text }
        after.close()
        #expect(payloads.count == 1 && payloads[0].contains("first"), "\(payloads)")
    }

    /// Past its bound, the file gives up its least recently used copies until it is within it,
    /// not a whole batch: with fewer than 64 rows a batch took every copy, the one just written too.
    @Test func theFilesTrimTakesTheOldestCopiesOnly() throws {
        let file = try TierFile()
        defer { file.remove() }
        let copies = try LocalCopies(path: file.path, maxBytes: 1 << 16)
        let now = Date().timeIntervalSince1970
        for n in 0..<30 {
            copies.put(.init(namespace: "ns", key: "k\(n)"),
                       LocalCopy(kind: .raw, etag: nil, body: Data(repeating: 98, count: 7_000), contentType: "x",
                                 expiresAt: now + 60, updatedAt: now))
            let other = try LocalFile(path: file.path)
            let keys = try other.run("SELECT key FROM entries ORDER BY used_at").compactMap { $0.first?.text }
            other.close()
            #expect(keys.last == "k\(n)" && keys.count >= min(n + 1, 8), "\(keys)")
            #expect(copies.fileBytes <= 1 << 16)
        }
        copies.close()
    }

    /// `flush` sends what waits now, even while the background's round is running: it waits
    /// for that round, then sends what is left (it returned at once, the write still waiting).
    @Test func flushWaitsForTheRoundAlreadySending() async throws {
        let namespace = TestService.namespace("swiftflushwait")
        let token = try writer(namespace)
        let tier = try LocalTier(reportInterval: 60)
        _ = client(service.port, token, tier: tier)
        tier.state.withLock { $0.feeds[namespace] = LocalTier.Feed(syncedAt: nil, allowed: true, floor: 0) }
        let copy = LocalCopy(kind: .raw, etag: nil, body: Data("v".utf8), contentType: "text/plain", expiresAt: 0,
                             updatedAt: 0)
        #expect(tier.queue(namespace, "k", .put(body: Data("v".utf8), contentType: "text/plain", ttl: 60, tags: []),
                           copy: copy))
        tier.sending.withLock { $0 = true }  // the background's round, running
        let flushed = Task { await tier.flush() }
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(tier.outboxCount == 1, "sent while the other round ran")
        tier.sending.withLock { $0 = false }  // that round ends
        await flushed.value
        #expect(tier.outboxCount == 0, "flush returned before what waited was sent")
        await tier.close()
    }

    /// A write whose connection was lost after it was sent (the service took it, then hung up)
    /// may have been applied: it is not queued (it would be sent again, and meet itself as
    /// another's write), as one that timed out is not; the caller is told it failed.
    @Test func aWriteLostAfterItWasSentIsNotQueued() async throws {
        let hangUp = try HangUp()
        let tier = try await Self.putFails(at: hangUp, retries: 0)
        #expect(tier.outboxCount == 0)
        #expect(hangUp.accepted.value > 0, "the request reached the socket")
        // What certainly never left is still queued: refused, or not asked.
        #expect(TeamCacheClientError.transport("\(URLError.Code.cannotConnectToHost)").neverReached)
        #expect(TeamCacheClientError.skipped(reason: "the breaker is open").neverReached)
        #expect(!TeamCacheClientError.transport("\(URLError.Code.networkConnectionLost)").neverReached)
        await tier.close()
    }

    /// The same write lost, then refused on its retry (the service gone meanwhile): the first
    /// try may have been applied, and a refused retry must not hide it (the write was queued).
    @Test func aWriteLostThenRefusedOnItsRetryIsNotQueued() async throws {
        let hangUp = try HangUp(once: true)
        let tier = try await Self.putFails(at: hangUp, retries: 1)
        #expect(tier.outboxCount == 0)
        #expect(hangUp.accepted.value == 1)
        await tier.close()
    }

    /// A PUT through a tier (its namespace known keepable) to `hangUp`, which must fail.
    static func putFails(at hangUp: HangUp, retries: Int) async throws -> LocalTier {
        let tier = try LocalTier()
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(hangUp.port)")!,
                                                          token: nil)
        configuration.maxRetries = retries
        configuration.backoff = 0.01
        let client = TeamCacheClient(configuration, localTier: tier)
        tier.state.withLock { $0.feeds["ns"] = LocalTier.Feed(syncedAt: nil, allowed: true, floor: 0) }
        await #expect(throws: TeamCacheClientError.self) {
            try await client.put(namespace: "ns", key: "k", body: Data("v".utf8))
        }
        return tier
    }
}

/// Accepts connections, reads what the client sends, and closes without answering: a service
/// that died after it took the request (`once`: and stops listening after the first, so a
/// retry is refused).
final class HangUp: @unchecked Sendable {
    // @unchecked: `fd` and `port` are set in init; `accepted` is locked.
    let fd: Int32
    let port: Int
    let accepted = Locked(0)

    init(once: Bool = false) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = Loopback.bind(fd, port: 0)
        listen(fd, 16)
        self.fd = fd
        port = Loopback.boundPort(fd)
        let accepted = self.accepted
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }  // the listening socket was shut down
                accepted.withLock { $0 += 1 }
                if once { shutdown(fd, Int32(SHUT_RDWR)) }
                var buffer = [UInt8](repeating: 0, count: 65_536)
                _ = read(client, &buffer, buffer.count)
                close(client)
            }
        }
    }

    deinit {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }
}
