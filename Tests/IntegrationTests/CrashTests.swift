import Locking
import Foundation
import Glibc
import Postgres
import Testing
import TestSupport

/// A `2xx` on a write means the row is committed, also across a crash of everything: the
/// server and its PostgreSQL are killed with SIGKILL in the middle of grouped writes, the
/// cluster recovers from its WAL at the next start, and every acknowledged write is there,
/// byte for byte.
@Suite(.serialized) struct CrashTests {
    @Test func everyAcknowledgedWriteSurvivesKillingServerAndDatabase() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tc-crash-\(getpid())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        chmod(folder.path, 0o755)
        let data = folder.appendingPathComponent("data")
        defer {
            Self.killCluster(data)
            try? FileManager.default.removeItem(at: folder)
        }
        let port = try ServeProcess.freePort()
        let first = try ServeProcess(dataDirectory: data, port: port)
        try #require(first.waitUntilListening(seconds: 60))
        // Writers of distinct keys with bodies that name their key: what is acknowledged is recorded.
        let acknowledged = Locked<[String: [UInt8]]>([:])
        let stop = Locked(false)
        let group = DispatchGroup()
        for writer in 0..<16 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                guard let client = try? RawClient(port: port, timeout: 10) else { return }
                var sequence = 0
                while !stop.value {
                    sequence += 1
                    let key = "w\(writer)-\(sequence)"
                    let body = Array("{\"key\":\"\(key)\",\"pad\":\"\(String(repeating: "x", count: 200 + sequence % 700))\"}".utf8)
                    guard let response = try? client.request("PUT", "/v1/caches/crash/entries/\(key)",
                                                             headers: [("Content-Type", "application/json")], body: body)
                    else { return }
                    if (200..<300).contains(response.status) { acknowledged.withLock { $0[key] = body } }
                }
            }
        }
        // At least two seconds of writes, and at least 200 acknowledged (a loaded machine
        // may take longer to get there), before everything dies.
        let writing = Date()
        while Date().timeIntervalSince(writing) < 2 || (acknowledged.value.count < 200 && Date().timeIntervalSince(writing) < 30) {
            Thread.sleep(forTimeInterval: 0.1)
        }
        // Everything dies at once, mid-commit: the database first (no clean shutdown, no
        // checkpoint), then the server.
        Self.killCluster(data)
        first.stop(SIGKILL)
        stop.withLock { $0 = true }
        #expect(group.wait(timeout: .now() + 20) == .success)
        let written = acknowledged.value
        #expect(written.count > 100, "too few writes before the crash to mean anything: \(written.count)")
        let second = try ServeProcess(dataDirectory: data, port: port)
        defer { second.stop(SIGTERM) }
        try #require(second.waitUntilListening(seconds: 60), "serve did not start on the crashed data folder")
        let client = try RawClient(port: port, timeout: 10)
        var missing: [String] = [], different: [String] = []
        for (key, body) in written {
            let response = try client.request("GET", "/v1/caches/crash/entries/\(key)")
            if response.status != 200 { missing.append(key) } else if response.body != body { different.append(key) }
        }
        #expect(missing.isEmpty, "\(missing.count) of \(written.count) acknowledged writes lost: \(missing.prefix(5))")
        #expect(different.isEmpty, "\(different.count) acknowledged writes changed: \(different.prefix(5))")
    }

    /// SIGKILL to the cluster's postmaster and every process it started (backends, WAL
    /// writer, checkpointer): a machine losing power, as far as the data folder can tell.
    static func killCluster(_ data: URL) {
        let pidFile = data.appendingPathComponent("postgres/postmaster.pid")
        guard let text = try? String(contentsOf: pidFile, encoding: .utf8),
              let line = text.split(separator: "\n").first, let postmaster = pid_t(line) else { return }
        for child in children(of: postmaster) { kill(child, SIGKILL) }
        kill(postmaster, SIGKILL)
        // Until every one of them is gone: a new postmaster refuses to start beside a survivor.
        for _ in 0..<100 where kill(postmaster, 0) == 0 || !children(of: postmaster).isEmpty {
            usleep(50_000)
        }
    }

    static func children(of parent: pid_t) -> [pid_t] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return entries.compactMap { entry -> pid_t? in
            guard let pid = pid_t(entry),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            // Fields after the command: state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == parent ? pid : nil
        }
    }
}
