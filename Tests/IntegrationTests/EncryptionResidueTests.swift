import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// What an encrypted namespace leaves in clear: no prompt in any column of any table, and
/// after `--encrypt --rewrite` no old plaintext in any relation file.
@Suite(.serialized) struct EncryptionResidueTests {
    /// Every row of every table of the database as text (bytea as hex): where a marker or its
    /// hex form would show if any column kept it.
    static func everyRow(_ url: String) throws -> String {
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        let tables = try connection.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").rows
            .compactMap { try $0.string("tablename") }
        var text = ""
        for table in tables {
            for row in try connection.query("SELECT t::text AS row FROM \"\(table)\" t").rows {
                text += (try row.string("row") ?? "") + "\n"
            }
        }
        return text
    }

    static func hex(_ text: String) -> String { text.utf8.map { String(format: "%02x", $0) }.joined() }

    /// A marker in a prompt upserted into an encrypted namespace (created encrypted before
    /// its first write, or encrypted after), and one stored before encryption: in no column.
    @Test func anEncryptedNamespaceKeepsNoPromptInClear() throws {
        let (url, keys, service) = try EncryptionTests.serviceWithNewKey(prefix: "noprompt")
        defer { service.stop() }
        let marker = "prompt-marker-\(UUID().uuidString)"
        let (created, errors) = try DumpTests.cli("namespaces create fresh --encrypt", url: url, masterKeyFile: keys)
        #expect(created == 0, "\(errors)")
        #expect(try service.request("POST", "/v1/caches/later/upsert",
                                    json: "{\"model\":\"m\",\"prompt\":\"before \(marker)\",\"response\":\"r\"}").status == 201)
        try EncryptionTests.encrypt("later", url: url, keys: keys)
        Thread.sleep(forTimeInterval: Double(Keyring.currentFor) + 1)  // the service learns of both keys
        for namespace in ["fresh", "later"] {
            // A 503 says this replica learnt of the key just now: the retry is sealed.
            var status = 0
            for _ in 0..<20 where status != 201 && status != 200 {
                status = try service.request("POST", "/v1/caches/\(namespace)/upsert",
                                             json: "{\"model\":\"m\",\"prompt\":\"\(namespace) \(marker)\",\"response\":\"r\"}").status
                if status == 503 { Thread.sleep(forTimeInterval: 0.5) }
            }
            #expect(status == 201 || status == 200, "\(namespace): \(status)")
        }
        // An older build's write with the digest in clear: the database drops it.
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        _ = try connection.query("UPDATE entries SET prompt_digest = $1 WHERE namespace = 'fresh'", [.text(marker)])
        let stored = try connection.query("SELECT count(*)::int8 AS n FROM entries WHERE namespace IN ('fresh', 'later')")
        #expect(try stored.first?.int("n") == 3)
        let rows = try Self.everyRow(url)
        #expect(!rows.contains(marker) && !rows.contains(Self.hex(marker)), "a prompt is kept in clear")
        // `create` refuses a namespace that holds entries already (`set --encrypt` is for those).
        #expect(try DumpTests.cli("namespaces create later --encrypt", url: url, masterKeyFile: keys).0 != 0)
    }

    /// A marker PUT in clear, then `set --encrypt --rewrite` and a CHECKPOINT: no file of the
    /// database's relations holds the marker (a plain VACUUM leaves freed page space as it was).
    @Test func rewriteLeavesNoPlaintextInRelationFiles() throws {
        try rewrite(holdingASnapshotFor: nil)
    }

    /// The same with a transaction that holds an xid and, between its statements, no snapshot
    /// (read committed): its xid holds the vacuum horizon back just as well.
    @Test func rewriteWaitsForATransactionThatHoldsAnXid() throws {
        try rewrite(holdingASnapshotFor: 2, xidOnly: true)
    }

    /// A transaction with an xid in another database of the cluster (another application's,
    /// or under the test suite another test's): every snapshot, VACUUM FULL's own among them,
    /// counts it as running, so VACUUM FULL would keep the plain versions: the rewrite waits
    /// for it too. (The waits once looked only at this database's sessions: the test above
    /// failed now and then under the whole suite, its files holding the marker.)
    @Test func rewriteWaitsForATransactionInAnotherDatabase() throws {
        try rewrite(holdingASnapshotFor: 2, xidOnly: true, elsewhere: true)
    }

    /// A transaction that began before the sealing still runs when the rewrite starts (an
    /// access flush, a fold, a long read under load): VACUUM FULL would copy the plain versions
    /// it can still see into the new files. Held on purpose here for 2 s: the rewrite waits
    /// for it to end, and the files then hold no plain body.
    @Test func rewriteWaitsForATransactionThatStillSeesThePlainRows() throws {
        try rewrite(holdingASnapshotFor: 2)
    }

    private func rewrite(holdingASnapshotFor seconds: TimeInterval?, xidOnly: Bool = false,
                         elsewhere: Bool = false) throws {
        let (url, keys, service) = try EncryptionTests.serviceWithNewKey(prefix: "residue")
        defer { service.stop() }
        let marker = "body-marker-\(UUID().uuidString)"
        for index in 0..<50 {
            #expect(try service.request("PUT", entryPath("residue", "k\(index)"), body: Array("\(marker) \(index)".utf8))
                .status == 201)
        }
        let large = Array((String(repeating: "\(UUID().uuidString)", count: 200) + marker).utf8)
        #expect(try service.request("PUT", entryPath("residue", "large"), headers: [("Content-Type", "image/png")],
                                    body: large).status == 201)
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        _ = try connection.query("CHECKPOINT")
        let directory = try #require(try connection.query("SHOW data_directory").first?.string("data_directory"))
        let oid = try #require(try connection.query("SELECT oid::int8 AS oid FROM pg_database WHERE datname = current_database()")
            .first?.int("oid"))
        let folder = URL(fileURLWithPath: directory).appendingPathComponent("base/\(oid)")
        func filesHolding(_ text: String) throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { name in
                guard let bytes = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) else {
                    return false
                }
                return EncryptionTests.contains(Array(bytes), text)
            }
        }
        #expect(!(try filesHolding(marker)).isEmpty, "the marker was written in clear first")
        let reader = try PostgresConnection(url: elsewhere ? try DumpTests.databaseURL(prefix: "elsewhere") : url,
                                            limits: .unbounded)
        if let seconds, xidOnly {
            try reader.execute("BEGIN")
            // Simple protocol: no portal keeps a snapshot open after the statement.
            try reader.execute("SELECT txid_current()")
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { try? reader.execute("COMMIT") }
        } else if let seconds {
            try reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            // A snapshot that holds no lock on the entries table (one that did would make the
            // VACUUM FULL wait for its lock anyway): it keeps the rows it can see all the same.
            _ = try reader.query("SELECT count(*) AS n FROM namespace_settings")
            let done = DispatchTime.now() + seconds
            DispatchQueue.global().asyncAfter(deadline: done) { try? reader.execute("COMMIT") }
        }
        let started = Date()
        let (status, errors) = try DumpTests.cli("namespaces set residue --encrypt --rewrite --settle 0", url: url,
                                                 masterKeyFile: keys)
        #expect(status == 0, "\(errors)")
        if let seconds { #expect(Date().timeIntervalSince(started) >= seconds, "the rewrite did not wait") }
        #expect(errors.contains("WAL archives, base backups and standbys"))
        _ = try connection.query("CHECKPOINT")
        let left = try filesHolding(marker)
        // Which relations, to tell a horizon holder (the entries table's files) from another copy.
        let relations = try left.map { file in
            try connection.query("SELECT coalesce((SELECT relname::text FROM pg_class WHERE pg_relation_filenode(oid) = $1::text::oid), '?') AS name",
                                 [.text(String(file.prefix { $0.isNumber }))]).first?.string("name") ?? "?"
        }
        #expect(left == [], "old plaintext left in relation files \(left), of \(relations)")
        #expect(try service.request("GET", entryPath("residue", "k7")).body == Array("\(marker) 7".utf8))
    }
}
