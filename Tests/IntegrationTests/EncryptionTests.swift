import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// Encryption at rest (migration 0013): the real CLI encrypts and rotates, a listening service
/// seals and opens, and PostgreSQL is read directly to see what is at rest. Each test has a
/// database of its own: a data key in the shared one would stop every other service there
/// from starting without a master key (as it should).
@Suite(.serialized) struct EncryptionTests {
    /// A key file of `lines` (new keys when nil), and its path.
    static func keyFile(_ lines: [String]) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("master-\(UUID().uuidString).key").path
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func service(url: String, keys: String?) throws -> TestService {
        let masterKeys = try keys.map { try MasterKeys.load(path: $0) }
        return try TestService {
            $0.databaseURL = url
            $0.authEnabled = false
            $0.masterKeys = masterKeys
        }
    }

    /// A database of its own, a new master key file, and a service using both.
    static func serviceWithNewKey(prefix: String) throws -> (url: String, keys: String, service: TestService) {
        let url = try DumpTests.databaseURL(prefix: prefix)
        let keys = try keyFile([MasterKeys.generateLine()])
        return (url, keys, try service(url: url, keys: keys))
    }

    static func encrypt(_ namespace: String, url: String, keys: String) throws {
        let (status, errors) = try DumpTests.cli("namespaces set \(namespace) --encrypt --settle 0", url: url, masterKeyFile: keys)
        #expect(status == 0, "\(errors)")
    }

    static func stored(_ namespace: String, _ key: String, url: String) throws -> (body: [UInt8], encoding: String,
                                                                                    metadata: String?) {
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        let row = try #require(try connection.query(
            "SELECT body, encoding, metadata::text AS metadata FROM entries WHERE namespace = $1 AND key = $2",
            [.text(namespace), .bytes(Array(key.utf8))]).first)
        return (try #require(try row.bytes("body")), try #require(try row.string("encoding")), try row.string("metadata"))
    }

    static func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
        let needle = Array(needle.utf8)
        guard haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { Array(haystack[$0..<($0 + needle.count)]) == needle }
    }

    /// Entries stored before `--encrypt` are sealed by it; writes after it are sealed by the
    /// service; both answer as before (body, ETag, gzip or identity, 304, descriptor metadata),
    /// while PostgreSQL holds none of their plaintext.
    @Test func entriesAreSealedAtRestAndAnsweredPlain() throws {
        let (url, keys, service) = try Self.serviceWithNewKey(prefix: "sealed")
        defer { service.stop() }
        let earlier = "sealed-earlier", later = "sealed-later"
        let secret = "secret-answer-42"
        let large = Array(String(repeating: "{\"diagnosis\":\"\(secret)\"},", count: 300).utf8)
        #expect(try service.request("PUT", entryPath(earlier, "small"), body: Array(secret.utf8)).status == 201)
        #expect(try service.request("PUT", entryPath(earlier, "large"), body: large).status == 201)
        let before = try service.request("GET", entryPath(earlier, "large"), headers: [("Accept-Encoding", "gzip")])
        try Self.encrypt(earlier, url: url, keys: keys)
        try Self.encrypt(later, url: url, keys: keys)
        let descriptor = "\"model\":\"m\",\"prompt\":\"who am I\""
        #expect(try service.request("POST", "/v1/caches/\(later)/upsert", json: "{\(descriptor),\"response\":\"\(secret)\","
            + "\"metadata\":{\"patient\":\"\(secret)-meta\"}}").status == 201)
        #expect(try service.request("PUT", entryPath(later, "small"), body: Array(secret.utf8)).status == 201)

        for (namespace, key) in [(earlier, "small"), (earlier, "large"), (later, "small")] {
            let row = try Self.stored(namespace, key, url: url)
            #expect(row.encoding.hasPrefix("aes256gcm/"), "\(namespace)/\(key): \(row.encoding)")
            #expect(!Self.contains(row.body, secret))
            let answer = try service.request("GET", entryPath(namespace, key))
            #expect(answer.status == 200)
            #expect(answer.body == (key == "large" ? large : Array(secret.utf8)))
        }
        let after = try service.request("GET", entryPath(earlier, "large"), headers: [("Accept-Encoding", "gzip")])
        #expect(after.body == before.body && after.header("ETag") == before.header("ETag"))
        #expect(after.header("Content-Encoding") == "gzip")
        let etag = try #require(after.header("ETag"))
        #expect(try service.request("GET", entryPath(earlier, "large"), headers: [("If-None-Match", etag)]).status == 304)
        let lookup = try object(try service.request("POST", "/v1/caches/\(later)/lookup", json: "{\(descriptor)}"))
        #expect((lookup["metadata"] as? [String: Any])?["patient"] as? String == "\(secret)-meta")
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        let metadata = try connection.query("SELECT metadata::text AS m FROM entries WHERE namespace = $1 AND metadata IS NOT NULL",
                                            [.text(later)]).rows.compactMap { try $0.string("m") }
        #expect(metadata.count == 1 && metadata.allSatisfy { !$0.contains(secret) }, "\(metadata)")
        // The export holds what the entries answer (a dump is for moving data; guard it).
        let export = try service.request("GET", "/v1/caches/\(later)/export")
        #expect(String(decoding: export.body, as: UTF8.self).contains("\(secret)-meta"))
    }

    /// A flipped byte, or a sealed row copied under another key, answers a miss (no 500),
    /// logged and counted; the next write replaces it.
    @Test func tamperedEntriesAreMisses() throws {
        let (url, keys, service) = try Self.serviceWithNewKey(prefix: "tamper")
        defer { service.stop() }
        let namespace = "tampered"
        try Self.encrypt(namespace, url: url, keys: keys)
        #expect(try service.request("PUT", entryPath(namespace, "k"), body: Array("original".utf8)).status == 201)
        #expect(try service.request("GET", entryPath(namespace, "k")).status == 200)
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        _ = try connection.query("""
            INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                 created_at, updated_at, expires_at)
            SELECT namespace, 'copied'::bytea, body, encoding, content_type, identity_size, stored_size, etag,
                   created_at, updated_at, expires_at FROM entries WHERE namespace = $1 AND key = 'k'::bytea
            """, [.text(namespace)])
        // One byte of the tag flipped (XOR, so it always changes: setting it to 0xff left the body
        // as it was whenever the byte already was 0xff, one run in 256, and the entry opened).
        _ = try connection.query("""
            UPDATE entries SET body = set_byte(body, octet_length(body) - 4, get_byte(body, octet_length(body) - 4) # 255)
            WHERE namespace = $1 AND key = 'k'::bytea
            """, [.text(namespace)])
        Thread.sleep(forTimeInterval: 0.3)  // the change's notification empties the near-cache
        let tampered = try service.request("GET", entryPath(namespace, "k"))
        #expect(tampered.status == 404, "\(tampered.status)")
        #expect(try service.request("GET", entryPath(namespace, "copied")).status == 404)
        let metrics = try service.metrics()
        #expect(metrics.contains("teamcache_integrity_errors_total{namespace=\"\(namespace)\"} "), "no integrity count")
        #expect(try service.request("PUT", entryPath(namespace, "k"), body: Array("again".utf8)).status == 200)
        #expect(try service.request("GET", entryPath(namespace, "k")).body == Array("again".utf8))
    }

    /// With an encrypted namespace, a service without TEAMCACHE_MASTER_KEY_FILE, or with a
    /// file that does not hold the key, refuses to start and names the variable.
    @Test func aMissingOrWrongMasterKeyStopsTheStart() throws {
        let url = try DumpTests.databaseURL(prefix: "nokey")
        let keys = try Self.keyFile([MasterKeys.generateLine()])
        try Self.encrypt("locked", url: url, keys: keys)
        for file in [nil, try Self.keyFile([MasterKeys.generateLine()])] {
            do {
                let service = try Self.service(url: url, keys: file)
                service.stop()
                Issue.record("started with master key file \(file ?? "(none)")")
            } catch {
                #expect("\(error)".contains("TEAMCACHE_MASTER_KEY_FILE"), "\(error)")
            }
        }
        // A key file that is not one is refused while the configuration is read.
        let bad = try Self.keyFile(["not a key"])
        #expect(throws: ConfigurationError.self) {
            try Configuration.load(environment: ["TEAMCACHE_MASTER_KEY_FILE": bad], flags: [:])
        }
    }

    /// Rotation: `keys rotate` re-wraps under a new master key (bodies untouched) and a service
    /// with only the new key reads everything; `--reencrypt` seals every entry under a new
    /// data key, and each still answers its body.
    @Test func rotationKeepsEveryEntryReadable() throws {
        let url = try DumpTests.databaseURL(prefix: "rotate")
        let old = MasterKeys.generateLine(), new = MasterKeys.generateLine()
        let oldFile = try Self.keyFile([old])
        let namespace = "rotated"
        try Self.encrypt(namespace, url: url, keys: oldFile)
        var bodies: [String: [UInt8]] = [:]
        do {
            let service = try Self.service(url: url, keys: oldFile)
            defer { service.stop() }
            for index in 0..<250 {
                let body = Array("answer \(index) \(String(repeating: "x", count: index))".utf8)
                #expect(try service.request("PUT", entryPath(namespace, "k\(index)"), body: body).status == 201)
                bodies["k\(index)"] = body
            }
        }
        let before = try Self.stored(namespace, "k7", url: url).body
        let feedBefore = try Self.feedHead(namespace, url: url)
        let (status, errors) = try DumpTests.cli("keys rotate", url: url, masterKeyFile: try Self.keyFile([new, old]))
        #expect(status == 0, "\(errors)")
        #expect(try Self.stored(namespace, "k7", url: url).body == before)
        let newOnly = try Self.keyFile([new])
        let service = try Self.service(url: url, keys: newOnly)
        defer { service.stop() }
        #expect(try service.request("GET", entryPath(namespace, "k7")).body == bodies["k7"])

        let (reencrypted, output) = try DumpTests.cli("keys rotate --reencrypt \(namespace) --settle 0", url: url, masterKeyFile: newOnly)
        #expect(reencrypted == 0, "\(output)")
        #expect(output.contains("250 rewritten"), "\(output)")
        let after = try Self.stored(namespace, "k7", url: url).body
        #expect(after.prefix(8) != before.prefix(8), "still under the first data key")
        for (key, body) in bodies {
            #expect(try service.request("GET", entryPath(namespace, key)).body == body, "\(key)")
        }
        // Sealing again changed nothing a follower sees: no change in the feed.
        let page = try ChangeFeedTests.page(service, namespace, since: feedBefore)
        #expect(page.status == 200 && page.changes.isEmpty, "\(page.changes.count) changes")
        // Nor anything the stats count: 250 writes, not 500 (a rewrite is not a write).
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats"))
        #expect(stats["writes"] as? Int == 250 && stats["entries"] as? Int == 250, "\(stats)")
        // Said, so a client's local tier asks before it keeps plaintext copies.
        #expect(stats["encrypted"] as? Bool == true)
    }

    /// The feed's head as a follower of `namespace` would start from now.
    static func feedHead(_ namespace: String, url: String) throws -> String {
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        let head = try connection.query("SELECT tc_sequence_changes(100000) AS head").first?.int("head")
        return String(try #require(head))
    }

    /// A running service that knew the namespace as plain keeps writing plain for up to 10 s
    /// after `--encrypt`: the second pass, after `--settle`, seals what it wrote, so nothing
    /// written before the command returned is left plain.
    @Test func writesDuringTheSwitchAreSealedToo() throws {
        let (url, keys, service) = try Self.serviceWithNewKey(prefix: "settle")
        defer { service.stop() }
        let namespace = "switching"
        #expect(try service.request("PUT", entryPath(namespace, "first"), body: [1]).status == 201)
        let stop = Locked(false)
        let writer = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var index = 0
            while !stop.value {
                _ = try? service.request("PUT", entryPath(namespace, "w\(index % 50)"), body: Array("v\(index)".utf8))
                index += 1
                Thread.sleep(forTimeInterval: 0.02)
            }
            writer.signal()
        }
        let (status, errors) = try DumpTests.cli("namespaces set \(namespace) --encrypt --settle 11", url: url,
                                                 masterKeyFile: keys)
        stop.withLock { $0 = true }
        #expect(writer.wait(timeout: .now() + 10) == .success)
        #expect(status == 0, "\(errors)")
        // The service still took the namespace for plain (it reads keys every 10 s) when it
        // began: the database refused its plain writes (503), and the retry was sealed.
        let second = TestService.namespace("switch")
        #expect(try service.request("PUT", entryPath(second, "k"), body: [1]).status == 201)
        try Self.encrypt(second, url: url, keys: keys)
        let refused = try service.request("PUT", entryPath(second, "k"), body: [2])
        #expect(refused.status == 503, "\(refused.status)")
        #expect(try service.request("PUT", entryPath(second, "k"), body: [3]).status == 200)
        #expect(try Self.stored(second, "k", url: url).encoding.hasPrefix("aes256gcm/"))
        #expect(try service.request("GET", entryPath(second, "k")).body == [3])
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        let plain = try connection.query("SELECT count(*) AS n FROM entries WHERE namespace = $1 AND encoding NOT LIKE 'aes256gcm/%'",
                                         [.text(namespace)]).first?.int("n")
        #expect(plain == 0)
    }
}
