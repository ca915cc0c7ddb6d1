import Locking
import Foundation
import Glibc
import HTTPServer
import Testing
import TestSupport

/// Every buffer has a budget and every phase a total deadline, on a real listening server.
@Suite(.serialized) struct BudgetTests {
    /// /healthz round trips on one keep-alive connection to each port, taken in turns (one
    /// to each, again and again), so both see the same moments of the machine's load: each
    /// port's median and 99th percentile.
    private func latencies(_ ports: [Int], seconds: Double) throws -> [(median: Double, p99: Double)] {
        let clients = try ports.map { try RawClient(port: $0, timeout: 5) }
        var samples = [[Double]](repeating: [], count: ports.count)
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            for (index, client) in clients.enumerated() {
                let started = DispatchTime.now().uptimeNanoseconds
                try client.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                _ = try client.readResponse()
                samples[index].append(Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
            }
        }
        return samples.map { taken in
            let sorted = taken.sorted()
            return (sorted[sorted.count / 2], sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))])
        }
    }

    @Test func aClientPipeliningWithoutReadingCannotStarveOthers() throws {
        // One loop: the flooding client and the measured one share it. A second server with
        // no flood is measured in the same turns: the suite runs others in parallel on two
        // cores, and a baseline taken before the flood could meet a quieter machine.
        let server = try TestServer { $0.eventLoops = 1 }
        let control = try TestServer { $0.eventLoops = 1 }
        let flooder = try RawClient(port: server.port, timeout: 30)
        let request = Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8)
        let sent = Locked(0)
        let fd = flooder.fd
        let sender = Thread {
            // 200,000 requests in 1,000-request writes; blocks once the server stops reading.
            let chunk = Array([[UInt8]](repeating: request, count: 1000).joined())
            for _ in 0..<200 {
                var offset = 0
                while offset < chunk.count {
                    let written = chunk[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    guard written > 0 else { return }
                    offset += written
                }
                sent.withLock { $0 += 1000 }
            }
        }
        sender.start()
        // The kernel's socket buffers take megabytes of answers before the client's window
        // closes; once they are full the server holds the flood (stops reading it) and
        // answers nothing more until the client reads. Wait for that: no progress for a
        // whole second (a loaded machine can pause the sender for half of one).
        var last = -1
        var still = 0
        let deadline = Date().addingTimeInterval(60)
        while still < 2 && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.5)
            let now = sent.value
            still = now == last ? still + 1 : 0
            last = now
        }
        // The flood is held: the server stopped reading long before all 200,000 went in.
        #expect(sent.value < 200_000, "the server read \(sent.value) requests from a client that reads nothing")
        let measured = try latencies([server.port, control.port], seconds: 1.5)
        let (during, quiet) = (measured[0], measured[1])
        // The median, not the p99: the parallel suites' bursts decide a p99 measured here
        // (bench/ measures tails on a quiet machine). Sub-millisecond medians jitter; 0.5 ms
        // of slack keeps the 2x rule meaningful.
        let report = "median \(during.median * 1000) ms (p99 \(during.p99 * 1000)) beside the held flood vs "
            + "\(quiet.median * 1000) ms (p99 \(quiet.p99 * 1000)) on a server without one, in the same turns"
        #expect(during.median <= max(2 * quiet.median, quiet.median + 0.0005), "\(report)")
        shutdown(flooder.fd, Int32(SHUT_RDWR))
    }

    @Test func aSlowReaderIsCutOffByATotalWriteDeadline() throws {
        let server = try TestServer {
            $0.writeTimeout = 1
            $0.limits.maxBodyBytes = 64 << 20
        }
        let client = try RawClient(port: server.port, timeout: 5)
        // A 32 MiB response: more than the kernel's socket buffers hold.
        let body = [UInt8](repeating: 7, count: 32 << 20)
        let head = "PUT /echo/x HTTP/1.1\r\nHost: t\r\nContent-Length: \(body.count)\r\n\r\n"
        try client.send(Array(head.utf8) + body)
        // Two seconds (twice the write timeout) of 16 KiB every 50 ms: progress all the time,
        // so a deadline that restarted with each write would never fire...
        let started = Date()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var received = 0
        while Date().timeIntervalSince(started) < 2 {
            let count = recv(client.fd, &chunk, 16 * 1024, 0)
            if count <= 0 { break }
            received += count
            Thread.sleep(forTimeInterval: 0.05)
        }
        // ...but a total one has: what the kernel still held arrives, then the reset, long
        // before the 32 MiB.
        while true {
            let count = recv(client.fd, &chunk, chunk.count, 0)
            if count <= 0 { break }
            received += count
        }
        #expect(received < body.count / 2, "\(received) bytes reached a client reading 320 KB a second")
    }

    @Test func aSilentConnectionIsClosedAtTheHeaderTimeoutNotTheIdleOne() throws {
        let server = try TestServer {
            $0.headerTimeout = 0.5
            $0.idleTimeout = 30
        }
        let client = try RawClient(port: server.port, timeout: 5)
        let started = Date()
        #expect(client.isClosedByPeer())
        #expect(Date().timeIntervalSince(started) < 2)
    }

    @Test func tlsAndHTTP2PrefacesAreRefusedAtOnce() throws {
        let server = try TestServer { $0.headerTimeout = 30 }
        for preface in [[0x16, 0x03, 0x01, 0x02, 0x00, 0x01], Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)] {
            let client = try RawClient(port: server.port, timeout: 5)
            let started = Date()
            try client.send(preface)
            #expect(try client.readResponse().status == 400)
            #expect(Date().timeIntervalSince(started) < 1)
        }
    }
}
