import Foundation
import Glibc
import Testing
import TestSupport

/// The access line is written from parts rendered once per route and method (each loop's
/// cache of them): every request's line still names its own method, route and status, for
/// a route asked by GET and by HEAD in turn, for several routes, and unmatched (any token
/// as a method, written field by field).
@Suite struct AccessLineTests {
    @Test func everyRequestsLineNamesItsOwnMethodRouteAndStatus() throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("access-\(UUID().uuidString).log")
        try #require(FileManager.default.createFile(atPath: log.path, contents: nil))
        defer { try? FileManager.default.removeItem(at: log) }
        let output = try FileHandle(forWritingTo: log)
        let server = try ServeProcess(prefix: "accessline",
                                      environment: ["TEAMCACHE_LOG_LEVEL": "info", "TEAMCACHE_EVENT_LOOPS": "1"],
                                      stderr: output)
        try #require(server.waitUntilListening())
        let client = try RawClient(port: server.port, timeout: 10)
        let entry = "/v1/caches/{ns}/entries/{key}"
        let asked: [(method: String, path: String, route: String)] = [
            ("GET", "/healthz", "/healthz"), ("HEAD", "/healthz", "/healthz"), ("GET", "/healthz", "/healthz"),
            ("GET", "/v1/caches/ns/entries/k", entry), ("PUT", "/v1/caches/ns/entries/k", "/v1/caches/{ns}/entries/{key}"),
            ("HEAD", "/v1/caches/ns/entries/k", entry), ("GET", "/v1/caches/ns/entries/k", entry),
            ("DELETE", "/v1/caches/ns/entries/k", entry), ("HEAD", "/healthz", "/healthz"),
            ("BREW", "/no/such/route", "unmatched"), ("GET", "/no/such/route", "unmatched"),
            ("POST", "/healthz", "unmatched"), ("BREW", "/no/such/route", "unmatched"), ("GET", "/readyz", "/readyz"),
        ]
        var statuses: [Int] = [], ids: [String?] = [], problemIDs: [String?] = []
        for (index, request) in asked.enumerated() {
            let body: [UInt8] = request.method == "PUT" ? Array("{}".utf8) : []
            // One request names its own id; the others get numbered ones.
            let headers = index == 2 ? [("X-Request-Id", "client:id-7")] : []
            let response = try client.request(request.method, request.path, headers: headers, body: body)
            statuses.append(response.status)
            ids.append(response.header("X-Request-Id"))
            let problem = response.status >= 400 && request.method != "HEAD"
                ? try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] : nil
            problemIDs.append(problem?["request_id"] as? String)
        }
        server.stop(SIGTERM)
        try output.close()
        let lines = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").compactMap { line in
            try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        }.filter { $0["msg"] as? String == "request" && $0["component"] as? String == "http" }
        try #require(lines.count == asked.count, "\(lines.count) access lines for \(asked.count) requests")
        for (index, line) in lines.enumerated() {
            #expect(line["method"] as? String == asked[index].method, "line \(index): \(line)")
            #expect(line["route"] as? String == asked[index].route, "line \(index): \(line)")
            #expect(line["status"] as? Int == statuses[index], "line \(index): \(line)")
            #expect(line["level"] as? String == "info" && line["bytes"] is Int
                    && line["duration_us"] is Int, "line \(index): \(line)")
            // The id written into the response's head, into a problem's body and into the line
            // is one (a numbered id is written from its number in each place).
            let id = try #require(line["request_id"] as? String, "line \(index): \(line)")
            #expect(ids[index] == id, "line \(index): \(line)")
            if let problemID = problemIDs[index] { #expect(problemID == id, "line \(index): \(line)") }
        }
        #expect(ids[2] == "client:id-7")
        #expect(Set(ids).count == asked.count, "\(ids)")
        #expect(problemIDs.compactMap { $0 }.count >= 3, "\(problemIDs)")
    }
}
