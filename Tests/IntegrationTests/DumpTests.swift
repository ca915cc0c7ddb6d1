import CacheCore
import Foundation
import Postgres
import TeamCache
import Testing
import TestSupport

/// `teamcache export` and `teamcache import` (the binary, against a real PostgreSQL, beside a
/// live service on the same database).
@Suite(.serialized) struct DumpTests {
    /// Runs the debug binary through the shell (stdin and stdout redirected to files); the
    /// exit status and what it wrote to standard error.
    static func cli(_ arguments: String, url: String, stdin: URL? = nil, stdout: URL? = nil,
                    masterKeyFile: String? = nil, environment: [String: String] = [:]) throws -> (Int32, String) {
        let binary = TestPaths.repository.appendingPathComponent(".build/debug/teamcache").path
        let errors = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID().uuidString).err")
        defer { try? FileManager.default.removeItem(at: errors) }
        var command = masterKeyFile.map { "TEAMCACHE_MASTER_KEY_FILE='\($0)' " } ?? ""
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) { command += "\(name)='\(value)' " }
        command += "exec '\(binary)' \(arguments) --database-url '\(url)' --log-level error"
        if let stdin { command += " < '\(stdin.path)'" }
        command += " > '\(stdout?.path ?? "/dev/null")' 2> '\(errors.path)'"
        let status = try Subprocess.run(["/bin/sh", "-c", command], output: URL(fileURLWithPath: "/dev/null"))
        return (status, (try? String(contentsOf: errors, encoding: .utf8)) ?? "")
    }

    /// A database of the test's own, as a URL under the suite's server.
    static func databaseURL(prefix: String) throws -> String {
        let database = try TestDatabase.shared.migratedDatabase(prefix: prefix)
        let base = TestDatabase.shared.url
        return base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
    }

    /// A service on a database of its own (auth off unless asked), and that database's URL.
    static func service(prefix: String, auth: Bool = false) throws -> (TestService, String) {
        let url = try databaseURL(prefix: prefix)
        let service = try TestService {
            $0.databaseURL = url
            $0.authEnabled = auth
        }
        return (service, url)
    }

    struct Answer: Equatable {
        let status: Int
        let body: [UInt8]
        let headers: [String?]
    }

    static func answer(_ service: TestService, _ path: String, token: String? = nil) throws -> Answer {
        let response = try service.request("GET", path, token: token, headers: [("Accept-Encoding", "gzip")])
        return Answer(status: response.status, body: response.body,
                      headers: ["ETag", "Expires", "Last-Modified", "Content-Type", "Content-Encoding"]
                        .map { response.header($0) })
    }

    /// Export, wipe, import: every entry answers byte for byte as before (body, ETag, Expires,
    /// Last-Modified, type, encoding), a descriptor's lookup too; the same dump again changes
    /// nothing.
    @Test func exportWipeImportRestoresEveryEntryExactly() throws {
        let (service, url) = try Self.service(prefix: "dump")
        defer { service.stop() }
        let namespace = "dumped"
        let large = Array(String(repeating: "{\"answer\":\"forty-two\"},", count: 400).utf8)
        let paths = [entryPath(namespace, "small"), entryPath(namespace, "large"), entryPath(namespace, "gzipped"),
                     entryPath(namespace, "%FF%FEbinary"), entryPath(namespace, "tagged")]
        #expect(try service.request("PUT", paths[0] + "?ttl=600", body: Array("{\"a\":1}".utf8)).status == 201)
        #expect(try service.request("PUT", paths[1], headers: [("Content-Type", "application/json")], body: large).status == 201)
        #expect(try service.request("PUT", paths[2], headers: [("Content-Encoding", "gzip")],
                                    body: try #require(Gzip.compress(Array("zipped".utf8), level: 6))).status == 201)
        #expect(try service.request("PUT", paths[3], body: [0, 1, 2, 255]).status == 201)
        #expect(try service.request("PUT", paths[4], headers: [("Cache-Tag", "x, y"),
                                                               ("Cache-Control", "stale-while-revalidate=30")],
                                    body: Array("tagged".utf8)).status == 201)
        let descriptor = "\"model\":\"m\",\"prompt\":\"dump me\""
        #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", json: "{\(descriptor),\"response\":\"r\","
            + "\"metadata\":{\"input_tokens\":7,\"finish_reason\":\"stop\"}}").status == 201)
        let before = try paths.map { try Self.answer(service, $0) }
        let lookup = try object(try service.request("POST", "/v1/caches/\(namespace)/lookup", json: "{\(descriptor)}"))
        #expect(before.allSatisfy { $0.status == 200 })

        let dump = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID().uuidString).ndjson.gz")
        defer { try? FileManager.default.removeItem(at: dump) }
        let (exported, exportLog) = try Self.cli("export --namespace \(namespace) --gzip", url: url, stdout: dump)
        #expect(exported == 0 && exportLog.contains("exported 6 entries"), "\(exportLog)")
        #expect(try service.request("POST", "/v1/caches/\(namespace)/evict", json: "{\"all\":true}").status == 200)
        #expect(try service.request("GET", paths[0]).status == 404)

        let (imported, importLog) = try Self.cli("import", url: url, stdin: dump)
        #expect(imported == 0 && importLog.contains("imported 6, unchanged 0"), "\(importLog)")
        #expect(try paths.map { try Self.answer(service, $0) } == before)
        let again = try object(try service.request("POST", "/v1/caches/\(namespace)/lookup", json: "{\(descriptor)}"))
        #expect(again["hit"] as? Bool == true && again["response"] as? String == "r")
        #expect((again["metadata"] as? [String: Any])?["finish_reason"] as? String == "stop")
        #expect(again["key"] as? String == lookup["key"] as? String)

        let (twice, twiceLog) = try Self.cli("import", url: url, stdin: dump)
        #expect(twice == 0 && twiceLog.contains("imported 0, unchanged 6"), "\(twiceLog)")
    }

    /// A malformed line is reported by number and skipped whole; the rest of the input is
    /// stored; a line past a namespace's byte cap is reported as store_full, and the import
    /// still completes; another tool's minimal lines (text body, no ETag) are accepted.
    @Test func badLinesAreReportedAndSkippedWhole() throws {
        let (service, url) = try Self.service(prefix: "dumpbad")
        defer { service.stop() }
        #expect(try service.request("PUT", "/v1/caches/tiny/settings", json: "{\"max_bytes\":100}").status == 200)
        let lines = [
            "{\"namespace\":\"bad\",\"key\":\"ok\",\"body\":\"fine\"}",
            "{\"namespace\":\"bad\",\"key\":\"k\",\"body\":\"x\",\"etag\":\"\\\"wrong\\\"\"}",
            "not json at all",
            "",
            "{\"namespace\":\"Bad Namespace\",\"key\":\"k\",\"body\":\"x\"}",
            "{\"namespace\":\"bad\",\"key\":\"k2\",\"body_base64\":\"!!!\"}",
            "{\"namespace\":\"bad\",\"key\":\"k3\",\"body\":\"x\",\"expires_at\":\"tomorrow\"}",
            "{\"namespace\":\"tiny\",\"key\":\"big\",\"body\":\"\(String(repeating: "z", count: 500))\"}",
            "{\"namespace\":\"bad\",\"key\":\"also ok\",\"body\":\"fine too\",\"tags\":[\"t\"]}",
            "{\"namespace\":\"bad\",\"key\":\"split\",\"body\":\"x\",\"content_type\":\"text/html\\r\\nX-Evil: 1\"}",
            "{\"namespace\":\"bad\",\"key\":\"gone\",\"body\":\"x\",\"expires_at\":\"2020-01-01T00:00:00Z\"}",
        ]
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID().uuidString).ndjson")
        defer { try? FileManager.default.removeItem(at: input) }
        try lines.joined(separator: "\n").write(to: input, atomically: true, encoding: .utf8)
        let (status, log) = try Self.cli("import", url: url, stdin: input)
        #expect(status == 0, "\(log)")
        #expect(log.contains("imported 2") && log.contains("expired 1") && log.contains("store_full 1")
                    && log.contains("rejected 6"), "\(log)")
        for (line, reason) in [(2, "etag does not match"), (3, "not a JSON object"), (5, "invalid namespace"),
                               (6, "body_base64 is not base64"), (7, "expires_at must be an RFC 3339"), (8, "store_full"),
                               (10, "content_type must be a media type")] {
            #expect(log.contains("line \(line): \(reason)"), "line \(line) in \(log)")
        }
        #expect(try service.request("GET", entryPath("bad", "ok")).text == "fine")
        #expect(try service.request("GET", entryPath("bad", "also%20ok")).text == "fine too")
        #expect(try service.request("GET", entryPath("bad", "k")).status == 404)
        #expect(try service.request("GET", entryPath("tiny", "big")).status == 404)
        #expect(try service.request("GET", entryPath("bad", "gone")).status == 404)
    }

    /// What a writer stores imports back: a descriptor's prompt digest is its first 200
    /// characters (more than the 128 bytes imports once allowed: every such entry was
    /// refused, and the import still exited 0), and a `version` may be "".
    @Test func everyEntryAWriterStoredImportsBack() throws {
        let (service, url) = try Self.service(prefix: "dumpwriters")
        defer { service.stop() }
        let namespace = "written"
        let long = String(repeating: "Explain the refund policy in detail, please. ", count: 8) + "ünïcødé ✓"
        for (index, descriptor) in ["\"model\":\"m\",\"prompt\":\"\(long)\"", "\"model\":\"m\",\"prompt\":\"\"",
                                    "\"model\":\"m\",\"prompt\":\"v\",\"version\":\"\""].enumerated() {
            #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert",
                                        json: "{\(descriptor),\"response\":\"r\(index)\"}").status == 201)
        }
        let dump = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID().uuidString).ndjson")
        defer { try? FileManager.default.removeItem(at: dump) }
        let (exported, exportLog) = try Self.cli("export --namespace \(namespace)", url: url, stdout: dump)
        #expect(exported == 0 && exportLog.contains("exported 3 entries"), "\(exportLog)")
        let elsewhere = try Self.databaseURL(prefix: "dumpwriters2")
        let (imported, importLog) = try Self.cli("import", url: elsewhere, stdin: dump)
        #expect(imported == 0 && importLog.contains("imported 3") && importLog.contains("rejected 0"), "\(importLog)")
        let connection = try PostgresConnection(url: elsewhere)
        let digest = try connection.query("SELECT prompt_digest FROM entries WHERE namespace = $1 AND prompt_digest LIKE 'Explain%'",
                                          [.text(namespace)]).first?.string("prompt_digest")
        #expect(digest == String(long.prefix(200)))
    }

    /// A hit count past what a store reaches (bigint's end: the access flush that adds to it
    /// once failed every namespace's counts) is imported at the bound (2^53), not as given;
    /// a prompt digest is cut as a writer cuts it (200 characters, at most 800 bytes), however
    /// long the dump's.
    @Test func anImportedHitCountIsBounded() throws {
        let url = try Self.databaseURL(prefix: "dumphits")
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID().uuidString).ndjson")
        defer { try? FileManager.default.removeItem(at: input) }
        let marks = "a" + String(repeating: "\u{301}", count: 5000)  // one character, 10,001 bytes
        try ("{\"namespace\":\"hits\",\"key\":\"huge\",\"body\":\"x\",\"hit_count\":9223372036854775807}\n"
             + "{\"namespace\":\"hits\",\"key\":\"fine\",\"body\":\"x\",\"hit_count\":12,"
             + "\"prompt_digest\":\"\(marks)\"}\n")
            .write(to: input, atomically: true, encoding: .utf8)
        let (status, log) = try Self.cli("import", url: url, stdin: input)
        #expect(status == 0 && log.contains("imported 2"), "\(log)")
        let connection = try PostgresConnection(url: url)
        let rows = try connection.query("""
            SELECT e.key, a.hit_count, octet_length(e.prompt_digest) AS digest FROM entries e
            JOIN entry_access a ON a.entry_id = e.id WHERE e.namespace = 'hits' ORDER BY e.key
            """).rows
        #expect(try rows.map { try $0.int("hit_count") } == [12, 1 << 53])
        #expect(try (rows.first?.int("digest") ?? .max) <= 800, "the digest was kept whole")
    }

    /// A plain dump cut in the middle of a line: what came whole is stored, and the import
    /// says where it stopped and exits 1 (it once reported the half line as a bad line, exit 0).
    @Test func aPlainDumpCutShortStopsCleanly() throws {
        let url = try Self.databaseURL(prefix: "dumpcutplain")
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID().uuidString).ndjson")
        defer { try? FileManager.default.removeItem(at: input) }
        try ("{\"namespace\":\"cut\",\"key\":\"whole\",\"body\":\"x\"}\n{\"namespace\":\"cut\",\"key\":\"ha")
            .write(to: input, atomically: true, encoding: .utf8)
        let (status, log) = try Self.cli("import", url: url, stdin: input)
        #expect(status == 1 && log.contains("in the middle of line 2"), "\(log)")
        // A hand-written dump whose last line is whole but has no newline is complete.
        try "{\"namespace\":\"cut\",\"key\":\"last\",\"body\":\"x\"}".write(to: input, atomically: true, encoding: .utf8)
        let (whole, wholeLog) = try Self.cli("import", url: url, stdin: input)
        #expect(whole == 0 && wholeLog.contains("imported 1"), "\(wholeLog)")
        let connection = try PostgresConnection(url: url)
        #expect(try connection.query("SELECT count(*)::int8 AS n FROM entries WHERE namespace = 'cut'").first?.int("n") == 2)
    }

    /// A gzip dump cut short: what was read whole is stored, the import says where it
    /// stopped and exits 1; running it again on the whole dump completes it.
    @Test func aTruncatedGzipDumpStopsCleanly() throws {
        let url = try Self.databaseURL(prefix: "dumpcut")
        var lines = ""
        for index in 0..<3000 {
            lines += "{\"namespace\":\"cut\",\"key\":\"k\(index)\",\"body\":\"\(UUID().uuidString) \(index)\"}\n"
        }
        let writer = try GzipWriter()
        let whole = writer.write(Array(lines.utf8)) + writer.finish()
        let folder = FileManager.default.temporaryDirectory
        let full = folder.appendingPathComponent("dump-\(UUID().uuidString).gz")
        let cut = folder.appendingPathComponent("dump-\(UUID().uuidString).gz")
        defer { [full, cut].forEach { try? FileManager.default.removeItem(at: $0) } }
        try Data(whole).write(to: full)
        try Data(whole.prefix(whole.count / 2)).write(to: cut)
        let (status, log) = try Self.cli("import", url: url, stdin: cut)
        #expect(status == 1 && log.contains("truncated"), "\(log)")
        let (again, againLog) = try Self.cli("import", url: url, stdin: full)
        #expect(again == 0 && againLog.contains("rejected 0"), "\(againLog)")
        let connection = try PostgresConnection(url: url)
        #expect(try connection.query("SELECT count(*)::int8 AS n FROM entries WHERE namespace = 'cut'").first?.int("n") == 3000)
    }

    /// The HTTP routes: pages of at most `limit` entries chained by `TeamCache-Next-Cursor`
    /// (gzip when asked), then `POST …/import` of those lines into a wiped namespace gives
    /// the same answers; admin scope only; a bad cursor or policy is a 400.
    @Test func httpExportPagesAndImportRoundTrip() throws {
        let (service, _) = try Self.service(prefix: "dumphttp", auth: true)
        defer { service.stop() }
        let admin = try service.token([.read, .write, .admin], namespaces: "*")
        let writer = try service.token([.read, .write], namespaces: "*")
        let namespace = "paged"
        for index in 0..<20 {
            #expect(try service.request("PUT", entryPath(namespace, "k\(index)"), token: admin,
                                        body: Array("value \(index)".utf8)).status == 201)
        }
        let before = try (0..<20).map { try Self.answer(service, entryPath(namespace, "k\($0)"), token: admin) }
        var lines: [UInt8] = [], cursor: String?, pages = 0
        repeat {
            let query = "?limit=7" + (cursor.map { "&after=\($0)" } ?? "")
            let page = try service.request("GET", "/v1/caches/\(namespace)/export" + query, token: admin,
                                           headers: [("Accept-Encoding", "gzip")])
            #expect(page.status == 200 && page.header("Content-Type") == "application/x-ndjson")
            lines += page.header("Content-Encoding") == "gzip" ? try gunzip(page.body) : page.body
            cursor = page.header("TeamCache-Next-Cursor")
            pages += 1
        } while cursor != nil && pages < 10
        #expect(pages == 3)
        #expect(lines.split(separator: UInt8(ascii: "\n")).count == 20)
        #expect(try service.request("GET", "/v1/caches/\(namespace)/export", token: writer).status == 403)
        #expect(try service.request("GET", "/v1/caches/\(namespace)/export?after=%%%", token: admin).status == 400)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/evict", token: admin, json: "{\"all\":true}").status == 200)
        let imported = try service.request("POST", "/v1/caches/\(namespace)/import", token: admin,
                                           headers: [("Content-Encoding", "gzip"), ("Content-Type", "application/x-ndjson")],
                                           body: try #require(Gzip.compress(lines, level: 6)))
        #expect(imported.status == 200, "\(imported.text)")
        let summary = try object(imported)
        #expect(summary["imported"] as? Int == 20 && summary["rejected"] as? Int == 0, "\(summary)")
        #expect(try (0..<20).map { try Self.answer(service, entryPath(namespace, "k\($0)"), token: admin) } == before)
        let again = try object(try service.request("POST", "/v1/caches/\(namespace)/import", token: admin, body: lines))
        #expect(again["unchanged"] as? Int == 20 && again["imported"] as? Int == 0)
        let bad = try object(try service.request("POST", "/v1/caches/\(namespace)/import", token: admin,
                                                 body: Array("{\"key\":\"x\",\"body\":\"ok\"}\nnope\n".utf8)))
        #expect(bad["imported"] as? Int == 1 && bad["rejected"] as? Int == 1)
        #expect(((bad["errors"] as? [[String: Any]])?.first?["line"] as? Int) == 2)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/import?on_conflict=always", token: admin,
                                    body: lines).status == 400)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/import", token: writer, body: lines).status == 403)
    }
}

