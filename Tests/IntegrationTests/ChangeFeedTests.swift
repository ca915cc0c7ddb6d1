import Locking
import CacheCore
@testable import CacheStore
import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

/// The change feed (`GET /v1/caches/{ns}/changes`, migration 0012), against a real PostgreSQL
/// and a listening service.
@Suite struct ChangeFeedTests {
    /// One page of the feed, decoded (@unchecked: JSON objects, never mutated once made).
    struct Page: @unchecked Sendable {
        let status: Int
        let changes: [[String: Any]]
        let next: String
        let more: Bool
        let object: [String: Any]
    }

    /// One page, as a follower reads it: an empty page that says `more` (changes were still
    /// waiting for their numbers, which the background sequencer gives) is asked again.
    static func page(_ service: TestService, _ namespace: String, since: String, query: String = "",
                     token: String? = nil) throws -> Page {
        for _ in 0..<40 {
            let page = try onePage(service, namespace, since: since, query: query, token: token)
            if page.status != 200 || !page.changes.isEmpty || !page.more { return page }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try onePage(service, namespace, since: since, query: query, token: token)
    }

    static func onePage(_ service: TestService, _ namespace: String, since: String, query: String = "",
                        token: String? = nil) throws -> Page {
        let response = try service.request("GET", "/v1/caches/\(namespace)/changes?since=\(since)\(query)", token: token)
        guard response.status == 200 else { return Page(status: response.status, changes: [], next: since, more: false,
                                                         object: (try? object(response)) ?? [:]) }
        let body = try object(response)
        return Page(status: 200, changes: body["changes"] as? [[String: Any]] ?? [], next: body["next"] as? String ?? "",
                    more: body["more"] as? Bool ?? true, object: body)
    }

    /// The namespace's keys and ETags as stored.
    static func storedETags(_ namespace: String, url: String) throws -> [String: String] {
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        var stored: [String: String] = [:]
        for row in try connection.query("SELECT key, etag FROM entries WHERE namespace = $1", [.text(namespace)]).rows {
            stored[String(decoding: try #require(try row.bytes("key")), as: UTF8.self)] = try row.string("etag")
        }
        return stored
    }

    /// 1,000 random writes and deletes from 8 clients at once, while a follower replays the
    /// feed from cursor 0 with long polls: it ends with exactly the store's keys and ETags,
    /// it was handed each acknowledged change exactly once, and every cursor it was handed is
    /// larger than the one before.
    @Test func aFollowerFromCursorZeroEndsWithTheStore() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("feed")
        let token = try writer(namespace)
        let writersDone = Locked(false)
        let failures = Locked<[String]>([])
        let acknowledged = Locked(0)
        let group = DispatchGroup()
        for client in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                for operation in 0..<125 {
                    let key = "k\(Int.random(in: 0..<40))"
                    do {
                        if Int.random(in: 0..<4) == 0 {
                            let status = try service.request("DELETE", entryPath(namespace, key), token: token).status
                            if status == 204 { acknowledged.withLock { $0 += 1 } }
                            if status != 204 && status != 404 { failures.withLock { $0.append("DELETE \(status)") } }
                        } else {
                            let body = Array("{\"client\":\(client),\"op\":\(operation)}".utf8)
                            let status = try service.request("PUT", entryPath(namespace, key), token: token, body: body).status
                            if status == 200 || status == 201 { acknowledged.withLock { $0 += 1 } }
                            if status != 200 && status != 201 { failures.withLock { $0.append("PUT \(status)") } }
                        }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
            }
        }
        Thread.detachNewThread {
            group.wait()
            writersDone.withLock { $0 = true }
        }
        var replica: [String: String] = [:]
        var cursor = "0", previous: Int64 = 0, applied = 0
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            let finished = writersDone.value
            let page = try Self.page(service, namespace, since: cursor, query: "&wait=1&limit=97", token: token)
            try #require(page.status == 200, "\(page.object)")
            for change in page.changes {
                let position = try #require((change["cursor"] as? String).flatMap { Int64($0) })
                #expect(position > previous)
                previous = position
                let key = try #require(change["key"] as? String)
                if change["kind"] as? String == "put" {
                    replica[key] = try #require(change["etag"] as? String)
                } else {
                    #expect(change["kind"] as? String == "delete")
                    replica[key] = nil
                }
                applied += 1
            }
            cursor = page.next
            // Caught up with a page read after the last write was acknowledged.
            if finished && !page.more && page.changes.isEmpty { break }
        }
        #expect(failures.value.isEmpty, "\(failures.value.prefix(5))")
        let stored = try Self.storedETags(namespace, url: try TestDatabase.shared.migratedDefault())
        #expect(replica == stored)
        #expect(!stored.isEmpty && applied == acknowledged.value, "applied \(applied) of \(acknowledged.value)")
    }

    /// A change committed after a later-inserted one was already read is still delivered:
    /// the feed is ordered by commit, not by insertion. A transaction deletes key a and stays
    /// open while key b is written and read from the feed; once it commits, the next page
    /// from the cursor past b has a's deletion.
    @Test func aChangeCommittedLateIsNotSkipped() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("feedlate")
        let token = try writer(namespace)
        #expect(try service.request("PUT", entryPath(namespace, "a"), token: token, body: [1]).status == 201)
        let start = try Self.page(service, namespace, since: "0", token: token)
        #expect(start.changes.count == 1)
        let holder = try PostgresConnection(url: try TestDatabase.shared.migratedDefault(), limits: .unbounded)
        try holder.execute("BEGIN")
        let deleted = try holder.query("DELETE FROM entries WHERE namespace = $1 AND key = $2",
                                       [.text(namespace), .bytes(Array("a".utf8))])
        #expect(deleted.affectedRows == 1)
        #expect(try service.request("PUT", entryPath(namespace, "b"), token: token, body: [2]).status == 201)
        let seen = try Self.page(service, namespace, since: start.next, token: token)
        #expect(seen.changes.map { $0["key"] as? String } == ["b"])
        try holder.execute("COMMIT")
        let late = try Self.page(service, namespace, since: seen.next, token: token)
        #expect(late.changes.map { $0["key"] as? String } == ["a"])
        #expect(late.changes.first?["kind"] as? String == "delete")
    }

    /// Two sequencer runs at once: the second waits for the first's head lock and then numbers
    /// only what the first did not, including a change committed while it waited. No number
    /// is given twice (the feed's unique index would refuse it) and numbers follow insertion.
    @Test func concurrentSequencerRunsNeverNumberARowTwice() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("feedseq")
        let token = try writer(namespace)
        let url = try TestDatabase.shared.migratedDefault()
        for key in ["a", "b"] {
            #expect(try service.request("PUT", entryPath(namespace, key), token: token, body: [1]).status == 201)
        }
        let first = try PostgresConnection(url: url, limits: .unbounded)
        try first.execute("BEGIN")
        _ = try first.query("SELECT tc_sequence_changes(10000)")
        #expect(try service.request("PUT", entryPath(namespace, "c"), token: token, body: [1]).status == 201)
        let second = Locked<Result<Int, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            second.withLock {
                $0 = Result {
                    let connection = try PostgresConnection(url: url, limits: .unbounded)
                    return try connection.query("SELECT tc_sequence_changes(10000) AS head").first?.int("head") ?? -1
                }
            }
            done.signal()
        }
        Thread.sleep(forTimeInterval: 0.5)
        try first.execute("COMMIT")
        #expect(done.wait(timeout: .now() + 10) == .success)
        _ = try #require(second.value).get()
        let rows = try first.query("SELECT key, seq FROM entry_changes WHERE namespace = $1 ORDER BY id", [.text(namespace)])
        let numbers = try rows.rows.map { try #require(try $0.int("seq")) }
        #expect(numbers.count == 3 && numbers == numbers.sorted() && Set(numbers).count == 3, "\(numbers)")
    }

    /// An empty page with `wait` parks until the namespace changes: a write on the same
    /// service wakes it well before its time is up, and it carries that write.
    @Test func aLongPollIsWokenByAWrite() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("feedwait")
        let token = try writer(namespace)
        let head = try Self.page(service, namespace, since: "0", token: token)
        #expect(head.changes.isEmpty && head.status == 200)
        let answer = Locked<(Page, TimeInterval)?>(nil)
        let done = DispatchSemaphore(value: 0)
        let from = head.next
        Thread.detachNewThread {
            let page = try? Self.page(service, namespace, since: from, query: "&wait=20", token: token)
            answer.withLock { $0 = page.map { ($0, ProcessInfo.processInfo.systemUptime) } }
            done.signal()
        }
        Thread.sleep(forTimeInterval: 0.5)
        // Another namespace's write does not answer it.
        let other = TestService.namespace("feedother")
        #expect(try service.request("PUT", entryPath(other, "x"), token: try writer(other), body: [1]).status == 201)
        Thread.sleep(forTimeInterval: 0.3)
        #expect(answer.value == nil)
        let wrote = ProcessInfo.processInfo.systemUptime
        #expect(try service.request("PUT", entryPath(namespace, "woken"), token: token, body: [1]).status == 201)
        #expect(done.wait(timeout: .now() + 10) == .success)
        let (page, at) = try #require(answer.value)
        #expect(page.changes.map { $0["key"] as? String } == ["woken"])
        #expect(at - wrote < 2, "woken \(at - wrote) s after the write")
        // Nothing more: a short wait answers empty, with the same cursor.
        let started = ProcessInfo.processInfo.systemUptime
        let quiet = try Self.page(service, namespace, since: page.next, query: "&wait=0.5", token: token)
        // (Its `next` may move on: the head is shared by every namespace's changes.)
        #expect(quiet.status == 200 && quiet.changes.isEmpty)
        #expect((Int64(quiet.next) ?? 0) >= (Int64(page.next) ?? .max))
        #expect(ProcessInfo.processInfo.systemUptime - started >= 0.4)
    }

    /// `include=body`: a current put carries its stored body; one replaced since does not
    /// (its replacement follows, with the body).
    @Test func bodiesComeWithCurrentPutsOnly() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("feedbody")
        let token = try writer(namespace)
        #expect(try service.request("PUT", entryPath(namespace, "k"), token: token, body: Array("old".utf8)).status == 201)
        let large = Array(String(repeating: "{\"x\":\"forty-two\"}", count: 200).utf8)
        #expect(try service.request("PUT", entryPath(namespace, "k"), token: token, body: large).status == 200)
        // Followed as a follower does: while `more` (a change may still wait for its number
        // under load), from `next`.
        var page = try Self.page(service, namespace, since: "0", query: "&include=body", token: token)
        for _ in 0..<40 where page.more && page.changes.count < 2 {
            Thread.sleep(forTimeInterval: 0.05)
            let rest = try Self.page(service, namespace, since: page.next, query: "&include=body", token: token)
            page = Page(status: rest.status, changes: page.changes + rest.changes, next: rest.next, more: rest.more,
                        object: rest.object)
        }
        #expect(page.changes.count == 2)
        #expect(page.changes.first?["body_base64"] == nil)
        let latest = try #require(page.changes.last)
        let stored = try #require((latest["body_base64"] as? String).flatMap { Data(base64Encoded: $0) })
        #expect(latest["encoding"] as? String == "gzip")
        #expect(try gunzip(Array(stored)) == large)
        #expect(latest["size"] as? Int == large.count)
        let entry = try service.request("GET", entryPath(namespace, "k"), token: token)
        #expect(latest["etag"] as? String == entry.header("ETag"))
        #expect(latest["expires_at"] is String && latest["content_type"] as? String == "application/octet-stream")
    }

    /// Malformed asks get 400; a cursor past the head (another store's) 410; the feed needs
    /// read scope on the namespace.
    @Test func badCursorsAndScopes() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("feedbad")
        let token = try writer(namespace)
        for query in ["since=abc", "since=-1", "since=99999999999999999999", "limit=0", "include=meta", "wait=61"] {
            let response = try service.request("GET", "/v1/caches/\(namespace)/changes?\(query)", token: token)
            #expect(response.status == 400, "\(query)")
            #expect(response.header("Content-Type") == "application/problem+json")
        }
        let ahead = try Self.page(service, namespace, since: "9000000000000000000", token: token)
        #expect(ahead.status == 410)
        let elsewhere = try service.token([.read], namespaces: "other-*")
        #expect(try service.request("GET", "/v1/caches/\(namespace)/changes", token: elsewhere).status == 403)
        #expect(try service.request("GET", "/v1/caches/\(namespace)/changes").status == 401)
    }

    /// Retention: the eviction cycle trims changes older than TEAMCACHE_CHANGE_RETENTION and a
    /// cursor before them answers 410, while one after them follows on; a TRUNCATE of the
    /// entries sends every follower of a namespace it held to resync (410).
    @Test func trimmedOrWipedFeedsAnswerGone() throws {
        let url = try DumpTests.databaseURL(prefix: "feedtrim")
        let clock = ManualClock()
        let service = try TestService(clock: clock) {
            $0.databaseURL = url
            $0.authEnabled = false
            $0.cache.changeRetention = 3600
        }
        defer { service.stop() }
        let namespace = "trimmed"
        #expect(try service.request("PUT", entryPath(namespace, "old"), body: [1]).status == 201)
        let afterOld = try Self.page(service, namespace, since: "0")
        #expect(afterOld.changes.count == 1)
        clock.advance(by: 7200)
        #expect(service.app.eviction.runCycle()?.changesTrimmed == 1)
        // A trim sends no notification: a page shared among followers is reused up to 1 s.
        Thread.sleep(forTimeInterval: 1.1)
        #expect(try Self.page(service, namespace, since: "0").status == 410)
        #expect(try Self.page(service, namespace, since: afterOld.next).status == 200)
        #expect(try service.request("PUT", entryPath(namespace, "new"), body: [1]).status == 201)
        let followed = try Self.page(service, namespace, since: afterOld.next)
        #expect(followed.changes.map { $0["key"] as? String } == ["new"])

        let connection = try PostgresConnection(url: url, limits: .unbounded)
        try connection.execute("TRUNCATE entries CASCADE")
        let wiped = try Self.page(service, namespace, since: followed.next)
        #expect(wiped.status == 410, "\(wiped.object)")
        #expect(wiped.object["title"] as? String == "Cursor too old")
    }

    /// An export's first page names the feed cursor a follower of that dump starts from:
    /// changes after it are in the feed, changes before it in the dump.
    @Test func anExportNamesWhereToFollowFrom() throws {
        let url = try DumpTests.databaseURL(prefix: "feedexport")
        let service = try TestService { $0.databaseURL = url; $0.authEnabled = false }
        defer { service.stop() }
        let namespace = "exported"
        #expect(try service.request("PUT", entryPath(namespace, "before"), body: [1]).status == 201)
        let export = try service.request("GET", "/v1/caches/\(namespace)/export")
        let cursor = try #require(export.header("TeamCache-Changes-Cursor"))
        #expect(String(decoding: export.body, as: UTF8.self).contains("\"before\""))
        #expect(try service.request("PUT", entryPath(namespace, "after"), body: [1]).status == 201)
        let page = try Self.page(service, namespace, since: cursor)
        #expect(page.changes.map { $0["key"] as? String } == ["after"])
    }

    /// Forty followers caught up on one namespace long-poll from the same cursor; one write
    /// wakes them all, and they are answered from a handful of database reads, not forty.
    @Test func followersWokenTogetherShareTheirRead() throws {
        // A service of its own: its metrics count only this test's pages.
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("feedshare")
        #expect(try service.request("PUT", entryPath(namespace, "first"), body: [1]).status == 201)
        let caughtUp = try Self.page(service, namespace, since: "0")
        #expect(caughtUp.changes.count == 1)
        let answers = Locked<[Page]>([])
        let group = DispatchGroup()
        for _ in 0..<40 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                if let page = try? Self.page(service, namespace, since: caughtUp.next, query: "&wait=20") {
                    answers.withLock { $0.append(page) }
                }
            }
        }
        Thread.sleep(forTimeInterval: 1.5)
        let before = try Self.pages(service)
        #expect(try service.request("PUT", entryPath(namespace, "second"), body: [2]).status == 201)
        #expect(group.wait(timeout: .now() + 15) == .success)
        let after = try Self.pages(service)
        #expect(answers.value.count == 40)
        #expect(answers.value.allSatisfy { $0.changes.map { $0["key"] as? String } == ["second"] })
        let read = after.database - before.database
        #expect(read <= 10, "\(read) database reads for 40 woken followers (\(after.shared - before.shared) shared)")
    }

    /// Followers woken by one write while numbering is held up (the sequencer busy, as under
    /// load) read an empty page that says it is behind; the one that read it and every follower
    /// it is shared with ask again soon, so all are answered once the change is numbered, not
    /// at the end of their wait. Held up on purpose: the test holds the sequencer's gate.
    @Test func followersSharingAPageReadWhileBehindAskAgainSoon() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("feedbehind")
        #expect(try service.request("PUT", entryPath(namespace, "first"), body: [1]).status == 201)
        let caughtUp = try Self.page(service, namespace, since: "0")
        let answers = Locked<[Page]>([])
        let group = DispatchGroup()
        for _ in 0..<10 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                if let page = try? Self.onePage(service, namespace, since: caughtUp.next, query: "&wait=20") {
                    answers.withLock { $0.append(page) }
                }
            }
        }
        Thread.sleep(forTimeInterval: 1.5)
        let gate = service.app.store.sequencerGate
        gate.lock()
        #expect(try service.request("PUT", entryPath(namespace, "second"), body: [2]).status == 201)
        // The woken followers read while nothing can be numbered: their page is behind.
        Thread.sleep(forTimeInterval: 1)
        gate.unlock()
        #expect(group.wait(timeout: .now() + 5) == .success, "followers waited out their 20 s")
        let keys = answers.value.map { $0.changes.compactMap { $0["key"] as? String } }
        #expect(keys.count == 10 && keys.allSatisfy { $0 == ["second"] }, "\(keys)")
    }

    /// `teamcache_feed_pages_total` by source.
    static func pages(_ service: TestService) throws -> (database: Double, shared: Double) {
        let text = try service.metrics()
        func sample(_ source: String) -> Double {
            let prefix = "teamcache_feed_pages_total{source=\"\(source)\"} "
            return text.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Double($0.dropFirst(prefix.count)) } ?? 0
        }
        return (sample("database"), sample("shared"))
    }
}
