import Dispatch
import Foundation
import Glibc
import HTTPClient
import Locking
import Testing
import TestSupport

/// The outgoing client against a real upstream over plain HTTP: framing by length, chunks
/// and close, reuse of kept-alive connections, HEAD, headers written, bounds, every deadline,
/// failures to resolve and connect, cancel, pause and resume, many calls at once.
@Suite(.serialized) struct HTTPClientTests {
    static let upstream = Result { try FakeUpstream() }
    var base: String { get throws { "http://127.0.0.1:\(try Self.upstream.get().port)" } }

    func get(_ path: String, _ tune: (inout ClientRequest) -> Void = { _ in }) -> ClientRequest {
        var request = ClientRequest(method: "GET", path: path)
        tune(&request)
        return request
    }

    @Test func aLengthFramedBodyArrivesWholeAndTheConnectionIsReused() throws {
        let harness = try ClientHarness()
        for _ in 0..<3 {
            let recorder = try harness.start(get("/_test/length?size=100000"), to: try base)
            #expect(recorder.wait())
            #expect(recorder.status == 200 && recorder.finished)
            #expect(recorder.body == (0..<100_000).map { UInt8(ascii: "a") + UInt8($0 % 26) })
        }
        #expect(harness.client.socketsOpened == 1, "three calls, one kept-alive connection")
        #expect(harness.client.openSockets == 1)
    }

    @Test func chunksArriveAsTheUpstreamSendsThem() throws {
        let harness = try ClientHarness()
        let recorder = try harness.start(get("/_test/chunks?n=3&gap_ms=400&size=4"), to: try base)
        #expect(recorder.wait())
        #expect(recorder.body == Array("000000010002".utf8))
        let times = recorder.heard.withLock { $0.parts.map(\.at) }
        #expect(times.count == 3)
        if times.count == 3 {
            #expect(times[2].timeIntervalSince(times[0]) > 0.6, "each part was handed over as it came")
        }
        #expect(harness.client.openSockets == 1, "a chunked response leaves the connection reusable")
    }

    @Test func aBodyEndedByTheCloseIsCompleteAndTheConnectionIsNotKept() throws {
        let harness = try ClientHarness()
        let recorder = try harness.start(get("/_test/close?size=5000"), to: try base)
        #expect(recorder.wait())
        #expect(recorder.finished && recorder.body.count == 5000)
        harness.onLoop {}
        #expect(harness.client.openSockets == 0)
    }

    @Test func headHasNoBodyWhateverItsLengthSays() throws {
        let harness = try ClientHarness()
        let recorder = try harness.start(get("/_test/length?size=500") { $0.method = "HEAD" }, to: try base)
        #expect(recorder.wait())
        #expect(recorder.finished && recorder.body.isEmpty)
        #expect(recorder.heard.withLock { $0.head?["Content-Length"] } == "500")
        let next = try harness.start(get("/_test/length?size=3"), to: try base)
        #expect(next.wait() && next.body == Array("abc".utf8), "the connection was left at the right place")
    }

    @Test func theRequestIsWrittenWithItsOwnHostAndFramingAndTheCallersHeaders() throws {
        let harness = try ClientHarness()
        let request = ClientRequest(method: "POST", path: "/_test/echo?x=1", headers: [
            ("Authorization", "Bearer sk-test"), ("Host", "evil.example"), ("Connection", "close"),
            ("Content-Length", "999"), ("X-Trace", "abc"),
        ], body: Array("{\"a\":1}".utf8))
        let recorder = try harness.start(request, to: try base + "/")
        #expect(recorder.wait())
        let echo = try JSONSerialization.jsonObject(with: Data(recorder.body)) as? [String: Any]
        let headers = (echo?["headers"] as? [[String]] ?? []).map { ($0[0].lowercased(), $0[1]) }
        #expect(echo?["path"] as? String == "/_test/echo?x=1")
        #expect(echo?["body"] as? String == "{\"a\":1}")
        #expect(headers.filter { $0.0 == "host" }.map(\.1) == ["127.0.0.1:\(try Self.upstream.get().port)"])
        #expect(headers.filter { $0.0 == "content-length" }.map(\.1) == ["7"])
        #expect(!headers.contains { $0.0 == "connection" })
        #expect(headers.contains { $0 == ("authorization", "Bearer sk-test") } && headers.contains { $0 == ("x-trace", "abc") })
    }

    /// Two base URLs on one host and port share the kept-alive connection (the pool is the
    /// origin's), yet each call's request line carries its own base path.
    @Test func originsOnOneHostKeepTheirOwnBasePaths() throws {
        let harness = try ClientHarness()
        for (base, expected) in [("/_test", "/_test/echo"), ("", "/_test/echo"), ("/_test", "/_test/echo")] {
            let path = base.isEmpty ? "/_test/echo" : "/echo"
            let recorder = try harness.start(ClientRequest(method: "POST", path: path), to: try self.base + base)
            #expect(recorder.wait())
            let echo = try JSONSerialization.jsonObject(with: Data(recorder.body)) as? [String: Any]
            #expect(echo?["path"] as? String == expected)
        }
        #expect(harness.client.socketsOpened == 1)
    }

    @Test func aTargetOrHeaderWithAControlByteIsNotWritten() throws {
        let harness = try ClientHarness()
        for request in [get("/a b"), get("/a\r\nX: y"), get("/ok") { $0.headers = [("X", "a\r\nInjected: 1")] },
                        get("/ok") { $0.headers = [("Bad Name", "v")] }, get("no-slash")] {
            let recorder = try harness.start(request, to: try base)
            #expect(recorder.wait())
            #expect(recorder.error?.code == .invalidRequest)
        }
    }

    @Test func aBodyPastTheBoundFailsTheCall() throws {
        let harness = try ClientHarness()
        for path in ["/_test/length?size=5000", "/_test/chunks?n=10&size=600", "/_test/close?size=5000"] {
            let recorder = try harness.start(get(path) { $0.maxResponseBytes = 1000 }, to: try base)
            #expect(recorder.wait())
            #expect(recorder.error?.code == .tooLarge, "\(path)")
            #expect(recorder.body.count <= 1000)
        }
    }

    @Test func aSlowHeadIsAFirstByteTimeout() throws {
        let harness = try ClientHarness()
        let started = Date()
        let recorder = try harness.start(get("/_test/slow_head?ms=3000") { $0.deadlines.firstByte = 0.5 }, to: try base)
        #expect(recorder.wait())
        #expect(recorder.error?.code == .firstByteTimeout)
        #expect(Date().timeIntervalSince(started) < 2)
    }

    @Test func silenceMidBodyIsAnIdleTimeout() throws {
        let harness = try ClientHarness()
        let recorder = try harness.start(get("/_test/stall?n=2&ms=3000") { $0.deadlines.idle = 0.5 }, to: try base)
        #expect(recorder.wait())
        #expect(recorder.error?.code == .idleTimeout)
        #expect(recorder.partCount == 1)
    }

    /// An upstream that keeps a call alive with a little just inside the idle deadline each
    /// time is stopped by the total one.
    @Test func aCallKeptAliveByTricklesEndsAtItsTotalDeadline() throws {
        let harness = try ClientHarness()
        let started = Date()
        let recorder = try harness.start(get("/_test/chunks?n=40&gap_ms=200&size=4") {
            $0.deadlines.idle = 1
            $0.deadlines.total = 1.5
        }, to: try base)
        #expect(recorder.wait())
        #expect(recorder.error?.code == .totalTimeout && recorder.error?.isTimeout == true)
        let took = Date().timeIntervalSince(started)
        #expect(took > 1.4 && took < 4, "\(took)")
        #expect(recorder.partCount > 3, "the parts before the deadline were handed over")
        harness.onLoop {}
        #expect(harness.client.openSockets == 0)
    }

    @Test func aHandshakeThatNeverComesIsAConnectTimeout() throws {
        // A listener that never accepts: the kernel completes TCP, nobody answers TLS.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        listen(fd, 16)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let harness = try ClientHarness()
        let started = Date()
        let recorder = try harness.start(get("/") { $0.deadlines.connect = 0.5 }, to: "https://localhost:\(port)",
                                         tls: try harness.client.tlsContext(caFile: nil))
        #expect(recorder.wait())
        #expect(recorder.error?.code == .connectTimeout)
        #expect(Date().timeIntervalSince(started) < 2)
        harness.onLoop {}
        #expect(harness.client.openSockets == 0)
    }

    @Test func aRefusedConnectionAndAnUnknownHostFailAtOnce() throws {
        let harness = try ClientHarness()
        let refused = try harness.start(get("/"), to: "http://127.0.0.1:\(try ServeProcess.freePort())")
        #expect(refused.wait())
        #expect(refused.error?.code == .connect)
        let unknown = try harness.start(get("/"), to: "http://no-such-host.invalid")
        #expect(unknown.wait())
        #expect(unknown.error?.code == .dns)
    }

    @Test func cancellingMidBodyClosesTheConnectionAndSaysNothingMore() throws {
        let harness = try ClientHarness()
        let recorder = try harness.start(get("/_test/chunks?n=5&gap_ms=300"), to: try base) { call, recorder in
            recorder.onPart.withLock { $0 = { count in if count == 1 { call.value.cancel() } } }
        }
        #expect(!recorder.wait(1.5), "a cancelled call hears no end")
        #expect(recorder.partCount == 1)
        harness.onLoop {}
        #expect(harness.client.openSockets == 0)
    }

    @Test func aPausedCallReadsNothingUntilResumed() throws {
        let harness = try ClientHarness()
        let held = Locked<LoopBound<HTTPCall>?>(nil)
        let recorder = try harness.start(get("/_test/chunks?n=4&size=8"), to: try base) { call, recorder in
            recorder.onPart.withLock { $0 = { count in if count == 1 { call.value.pause() } } }
            held.withLock { $0 = call }
        }
        Thread.sleep(forTimeInterval: 0.8)
        #expect(recorder.partCount == 1, "paused after its first part: the rest waits in the socket")
        #expect(!recorder.finished)
        harness.onLoop { held.withLock { $0 }?.value.resume() }
        #expect(recorder.wait())
        #expect(recorder.finished && recorder.body == Array("00000000000000010000000200000003".utf8))
    }

    @Test func manyCallsAtOnceAllComplete() throws {
        let harness = try ClientHarness()
        let recorders = try (0..<200).map { index in
            try harness.start(get("/_test/length?size=\(index + 1)"), to: try base)
        }
        for (index, recorder) in recorders.enumerated() {
            #expect(recorder.wait(20))
            #expect(recorder.body.count == index + 1, "\(String(describing: recorder.error))")
        }
        #expect(harness.client.socketsOpened <= 200)
    }

    @Test func pastTheConnectionCapCallsWaitTheirTurn() throws {
        var configuration = HTTPClient.Configuration()
        configuration.maxConnectionsPerOrigin = 2
        configuration.maxWaitingPerOrigin = 3
        let harness = try ClientHarness(configuration)
        let recorders = try (0..<6).map { _ in try harness.start(get("/_test/slow_head?ms=300"), to: try base) }
        for recorder in recorders { #expect(recorder.wait()) }
        #expect(recorders.filter(\.finished).count == 5, "two at once, three in line")
        #expect(recorders.compactMap(\.error).map(\.code) == [.overloaded])
        #expect(harness.client.socketsOpened == 2)
    }
}
