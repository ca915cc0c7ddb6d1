import Foundation
import Glibc
import Testing
import TeamCache
import TestSupport

/// Bodies are judged on the head: authenticated and routed before a byte of the body is
/// read, `100 Continue` only for a request that passed, a server-wide budget for bodies in
/// flight, and memory given back after large ones.
@Suite(.serialized) struct BodyBudgetTests {
    static func residentBytes(_ pid: pid_t = getpid()) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return 0 }
        return kilobytes * 1024
    }

    @Test func twoThousandTricklingUploadsWithoutATokenGet401AtOnce() throws {
        let service = TestService.shared
        let before = Self.residentBytes()
        var clients: [RawClient] = []
        let started = Date()
        for index in 0..<2000 {
            // From eight addresses: one client may hold 1,000 connections (TEAMCACHE_MAX_CONNECTIONS_PER_CLIENT).
            let client = try RawClient(port: service.port, timeout: 10, from: "127.0.3.\(index % 8 + 1)")
            let head = "PUT /v1/caches/trickle/entries/k\(index) HTTP/1.1\r\nHost: t\r\n"
                + "Content-Length: \(8 << 20)\r\n\r\n"
            try client.send(Array(head.utf8) + [UInt8](repeating: 1, count: 1024))
            clients.append(client)
        }
        var unauthorized = 0
        var others: [String] = []
        for client in clients {
            do {
                let status = try client.readResponse().status
                if status == 401 { unauthorized += 1 } else { others.append("\(status)") }
            } catch {
                others.append("\(error)")
            }
        }
        let seconds = Date().timeIntervalSince(started)
        // Every one is refused; at most one in a thousand may find its connection closed before
        // the 401 arrives under a fully loaded parallel suite (the open issue of unanswered
        // closes, also tolerated by the frozen-database test); anything else fails.
        #expect(unauthorized + others.filter { $0 == "closed" }.count == 2000 && unauthorized >= 1998,
                "other answers: \(others.prefix(5))")
        #expect(seconds < 15, "2,000 refusals took \(seconds) s")
        let grown = Self.residentBytes() - before
        #expect(grown < 200 << 20, "resident memory grew by \(grown >> 20) MiB for 2,000 refused uploads")
        clients.removeAll()
    }

    @Test func expectContinueIsWithheldFromARefusedRequest() throws {
        let service = TestService.shared
        let client = try RawClient(port: service.port, timeout: 5)
        try client.send("PUT /v1/caches/cont/entries/k HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer tc_nope\r\n"
            + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        // Unknown tokens are read from the database on a worker, after the body; a missing
        // one is refused on the head.
        let missing = try RawClient(port: service.port, timeout: 5)
        try missing.send("PUT /v1/caches/cont/entries/k HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
            + "Content-Length: 5\r\n\r\n")
        #expect(try missing.readResponse().status == 401)
        let token = try writer("cont")
        let allowed = try RawClient(port: service.port, timeout: 5)
        try allowed.send("PUT /v1/caches/cont/entries/k HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(token)\r\n"
            + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        #expect(try allowed.readResponse().status == 100)
        try allowed.send("hello")
        #expect(try allowed.readResponse().status == 201)
        _ = client
    }

    @Test func bodiesPastTheServerBudgetAre503AndTheBudgetComesBack() throws {
        let service = try TestService { $0.http.bodyBudgetBytes = 4 << 20 }
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "budget")
        // Two uploads of 3 MiB, each 2.5 MiB in: the second passes the 4 MiB budget.
        var clients: [RawClient] = []
        var statuses: [Int] = []
        for index in 0..<2 {
            let client = try RawClient(port: service.port, timeout: 5)
            let head = "PUT /v1/caches/budget/entries/k\(index) HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(token)\r\n"
                + "Content-Length: \(3 << 20)\r\n\r\n"
            try client.send(Array(head.utf8) + [UInt8](repeating: 2, count: 5 << 19))
            clients.append(client)
            Thread.sleep(forTimeInterval: 0.3)
        }
        let second = try clients[1].readResponse()
        statuses.append(second.status)
        #expect(second.status == 503 && second.header("Retry-After") == "1")
        // The first finishes; then the budget is free again.
        try clients[0].send([UInt8](repeating: 2, count: 1 << 19))
        #expect(try clients[0].readResponse().status == 201)
        clients.removeAll()
        let put = try service.request("PUT", entryPath("budget", "after"), token: token,
                                      body: [UInt8](repeating: 3, count: 3 << 20))
        #expect(put.status == 201, "\(statuses)")
    }

    @Test func memoryOfLargeBodiesIsGivenBack() throws {
        let server = try ServeProcess(prefix: "rss")
        try #require(server.waitUntilListening())
        let (pid, port) = (server.process.processIdentifier, server.port)
        let idle = Self.residentBytes(pid)
        let body = [UInt8]((0..<(8 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
        for round in 0..<3 {
            let group = DispatchGroup()
            for index in 0..<8 {
                DispatchQueue.global().async(group: group) {
                    let path = "/v1/caches/rss/entries/r\(round)-\(index)"
                    guard let client = try? RawClient(port: port, timeout: 30) else { return }
                    let head = "PUT \(path) HTTP/1.1\r\nHost: t\r\nContent-Length: \(body.count)\r\n\r\n"
                    _ = try? client.send(Array(head.utf8) + body)
                    _ = try? client.readResponse()
                    _ = try? client.send("GET \(path) HTTP/1.1\r\nHost: t\r\n\r\n")
                    _ = try? client.readResponse()
                }
            }
            group.wait()
        }
        let busy = Self.residentBytes(pid)
        // The trim runs from the loops' sweep, within a second of the last large request.
        Thread.sleep(forTimeInterval: 2)
        let after = Self.residentBytes(pid)
        // Measured here: 30 MB idle, 38 MB during the rounds, 34 MB after (780 MB before).
        #expect(after < idle + 64 << 20,
                "resident \(idle >> 20) MiB idle, \(busy >> 20) MiB after the rounds, \(after >> 20) MiB two seconds later")
    }
}
