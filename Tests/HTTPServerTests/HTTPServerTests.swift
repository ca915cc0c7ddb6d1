import Foundation
@testable import HTTPServer
import Locking
import Observability
import Testing
import TestSupport

/// A server on a free port with a few test routes.
final class TestServer {
    let server: HTTPServer
    var port: Int { server.port }

    init(_ tune: (inout HTTPServerConfiguration) -> Void = { _ in }) throws {
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        configuration.workerThreads = 4
        tune(&configuration)
        server = HTTPServer(configuration: configuration, routes: [
            Route("GET", "/healthz", .inline) { _ in .text(200, "ok\n") },
            Route("PUT", "/echo/{name}") { request in
                var response = HTTPResponse(status: 200, body: request.body)
                response.headers.add("X-Name", String(decoding: request.pathParameters["name"] ?? [], as: UTF8.self))
                return response
            },
            Route("PUT", "/inline-echo/{name}", .inline) { request in
                var response = HTTPResponse(status: 200, body: request.body)
                response.headers.add("X-Name", String(decoding: request.pathParameters["name"] ?? [], as: UTF8.self))
                return response
            },
            Route("GET", "/slow") { _ in
                Thread.sleep(forTimeInterval: 1)
                return .text(200, "slow\n")
            },
            Route("GET", "/fail") { _ in throw CocoaError(.fileNoSuchFile) },
        ])
        try server.start()
    }

    deinit { server.shutdown() }
}

@Suite struct HTTPServerTests {
    @Test func keepAliveServesSeveralRequests() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        for _ in 0..<3 {
            try client.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            let response = try client.readResponse()
            #expect(response.status == 200)
            #expect(response.text == "ok\n")
            #expect(response.header("Date") != nil)
            #expect(response.header("Server") == "http-server")  // the library's own default
            #expect(response.header("X-Request-Id")?.isEmpty == false)
        }
    }

    @Test func threePipelinedRequestsAnswerInOrder() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("PUT /echo/a HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n1"
            + "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"
            + "PUT /echo/c HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n3")
        let first = try client.readResponse()
        let second = try client.readResponse()
        let third = try client.readResponse()
        #expect([first.text, second.text, third.text] == ["1", "slow\n", "3"])
        #expect(third.header("X-Name") == "c")
    }

    /// Answers written at once (nothing queued, nothing pipelined) to a client that does not
    /// read: once its socket is full the rest of an answer is queued, later answers queue
    /// behind it, and the client reads every answer whole and in order when it starts.
    @Test func answersToAClientThatDoesNotReadQueueInOrder() throws {
        // Small socket buffers on both ends: a few answers fill them.
        let server = try TestServer { $0.socketSendBuffer = 1 }  // the kernel's least
        let client = try RawClient(port: server.port, timeout: 20, receiveBuffer: 1)
        let count = 80
        func body(_ index: Int) -> String { String(repeating: String(index % 10), count: 3_000 + index % 7) }
        for index in 0..<count {
            let path = index % 25 == 7 ? "/echo" : "/inline-echo"  // a few answered on a worker
            try client.send("PUT \(path)/n\(index) HTTP/1.1\r\nHost: t\r\nContent-Length: \(body(index).utf8.count)\r\n\r\n"
                + body(index))
            // Apart, so most arrive alone (their answers written at once, not after a batch).
            Thread.sleep(forTimeInterval: 0.01)
        }
        for index in 0..<count {
            let response = try client.readResponse()
            #expect(response.status == 200 && response.header("X-Name") == "n\(index)", "answer \(index)")
            let whole = response.text == body(index)  // (a Bool: a failure's message stays short)
            #expect(whole, "answer \(index): \(response.body.count) bytes")
        }
    }

    /// A loop's handle (what its clients hold weakly) holds the loop while it runs and is let
    /// go when it stops: a client then finds nil, and the loop itself is freed (no cycle left).
    @Test func aStoppedLoopLetsItsHandleAndItselfGo() throws {
        final class Seen: @unchecked Sendable {
            weak var handle: ReactorHandle?
            weak var loop: EventLoop?
            let attached = DispatchSemaphore(value: 0)
        }
        let seen = Seen()
        do {
            var configuration = HTTPServerConfiguration()
            configuration.port = 0
            configuration.eventLoops = 1
            let server = HTTPServer(configuration: configuration, routes: [], onLoopStart: { loop in
                seen.handle = loop.handle
                seen.loop = loop
                seen.attached.signal()
            })
            try server.start()
            #expect(seen.attached.wait(timeout: .now() + 10) == .success)
            #expect(seen.handle != nil && seen.handle?.reactor === seen.loop)
            server.shutdown()
        }
        // The loop's thread lets go of it just after signalling that it finished.
        for _ in 0..<200 where seen.loop != nil { Thread.sleep(forTimeInterval: 0.01) }
        #expect(seen.handle == nil && seen.loop == nil)
    }

    @Test func chunkedUploadAndEncodedSlashInPathSegment() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("PUT /echo/a%2Fb HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.text == "abcde")
        #expect(response.header("X-Name") == "a/b")
    }

    @Test func expectContinueGetsInterimResponse() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("PUT /echo/x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        #expect(try client.readResponse().status == 100)
        try client.send("body")
        let response = try client.readResponse()
        #expect(response.status == 200 && response.text == "body")
    }

    @Test func http10ClosesUnlessKeepAlive() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("GET /healthz HTTP/1.0\r\n\r\n")
        #expect(try client.readResponse().header("Connection") == "close")
        #expect(client.isClosedByPeer())
        let persistent = try RawClient(port: server.port)
        try persistent.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        #expect(try persistent.readResponse().header("Connection") == "keep-alive")
        try persistent.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        #expect(try persistent.readResponse().status == 200)
    }

    @Test func headHasHeadersWithoutBody() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        let response = try client.readResponse(head: true)
        #expect(response.status == 200 && response.header("Content-Length") == "3")
        try client.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try client.readResponse().text == "ok\n")
    }

    @Test func unknownPathAndWrongMethodAreProblems() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("GET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
        let missing = try client.readResponse()
        #expect(missing.status == 404 && missing.header("Content-Type") == "application/problem+json")
        try client.send("DELETE /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        let wrong = try client.readResponse()
        #expect(wrong.status == 405)
        #expect(wrong.header("Allow") == "GET, HEAD")
        #expect(wrong.text.contains("\"status\":405"))
    }

    @Test func unexpectedHandlerErrorIsGeneric500WithRequestID() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("GET /fail HTTP/1.1\r\nHost: t\r\nX-Request-Id: abc-123\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 500)
        #expect(response.header("X-Request-Id") == "abc-123")
        #expect(response.text.contains("\"request_id\":\"abc-123\""))
        #expect(!response.text.contains("fileNoSuchFile"))
    }

    @Test func malformedRequestGets400AndClose() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        try client.send("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 400 && response.header("Connection") == "close")
        #expect(client.isClosedByPeer())
    }

    @Test func oversizedBodyIsRefusedAtOnce() throws {
        let server = try TestServer { $0.limits.maxBodyBytes = 1024 }
        let client = try RawClient(port: server.port)
        try client.send("PUT /echo/x HTTP/1.1\r\nHost: t\r\nContent-Length: 2048\r\n\r\n")
        #expect(try client.readResponse().status == 413)
    }

    @Test func stalledClientDoesNotDelayOthersAndIsClosedAfterHeaderTimeout() throws {
        // A header deadline long enough that twenty round trips end well before it on a
        // loaded machine: served while the stalled client still holds its connection.
        let server = try TestServer { $0.headerTimeout = 5 }
        let stalled = try RawClient(port: server.port)
        try stalled.send("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Partial: ")
        let started = Date()
        for _ in 0..<20 {
            let client = try RawClient(port: server.port)
            try client.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(try client.readResponse().status == 200)
        }
        #expect(Date().timeIntervalSince(started) < 4.5)
        stalled.setTimeout(10)
        let timeout = try stalled.readResponse()
        #expect(timeout.status == 408)
        #expect(stalled.isClosedByPeer())
        let elapsed = Date().timeIntervalSince(started)
        #expect(elapsed >= 4.9 && elapsed < 8)
    }

    @Test func slowHandlerDoesNotDelayAFastRoute() throws {
        let server = try TestServer()
        let slow = try RawClient(port: server.port)
        try slow.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        Thread.sleep(forTimeInterval: 0.05)
        let started = Date()
        let fast = try RawClient(port: server.port)
        try fast.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try fast.readResponse().status == 200)
        // Before the slow handler's second could end (a held server answers after it).
        #expect(Date().timeIntervalSince(started) < 0.9)
        #expect(try slow.readResponse().text == "slow\n")
    }

    @Test func shutdownLetsInFlightRequestComplete() throws {
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        let entered = DispatchSemaphore(value: 0)
        let server = HTTPServer(configuration: configuration, routes: [
            Route("PUT", "/inline-echo/{name}", .inline) { request in
                var response = HTTPResponse(status: 200, body: request.body)
                response.headers.add("X-Name", String(decoding: request.pathParameters["name"] ?? [], as: UTF8.self))
                return response
            },
            Route("GET", "/slow") { _ in
                entered.signal()
                Thread.sleep(forTimeInterval: 0.5)
                return .text(200, "done")
            },
        ])
        try server.start()
        let client = try RawClient(port: server.port)
        try client.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        // The request is in flight (its handler running), not merely sent, when the stop comes.
        #expect(entered.wait(timeout: .now() + 5) == .success)
        let idle = try RawClient(port: server.port)
        let stopped = DispatchSemaphore(value: 0)
        Thread { server.shutdown(); stopped.signal() }.start()
        let response = try client.readResponse()
        #expect(response.status == 200 && response.text == "done")
        #expect(response.header("Connection") == "close")
        #expect(idle.isClosedByPeer())
        #expect(stopped.wait(timeout: .now() + 5) == .success)
        #expect(throws: RawClient.Failure.self) { try RawClient(port: server.port) }
    }

    /// Found by schemathesis: /metrics after an unparsable request indexed route names with -2.
    @Test func metricsRenderAfterUnparsedAndUnmatchedRequests() throws {
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        configuration.metricPrefix = "test_"
        let registry = MetricsRegistry()
        let server = HTTPServer(configuration: configuration, routes: [
            Route("GET", "/metrics") { _ in .text(200, registry.render()) },
        ], metrics: registry)
        try server.start()
        defer { server.shutdown() }
        let bad = try RawClient(port: server.port)
        try bad.send("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        #expect(try bad.readResponse().status == 400)
        let client = try RawClient(port: server.port)
        try client.send("GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try client.readResponse().status == 404)
        try client.send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        let metrics = try client.readResponse()
        #expect(metrics.status == 200)
        // The names carry the prefix the configuration gave, nothing of the application's own.
        #expect(metrics.text.contains("test_http_requests_total{route=\"unparsed\",method=\"OTHER\",status_class=\"4xx\"} 1"))
        #expect(metrics.text.contains("test_http_requests_total{route=\"unmatched\",method=\"GET\",status_class=\"4xx\"} 1"))
        #expect(!metrics.text.contains("teamcache"))
    }

    @Test func aTakenPortIsRefusedNotShared() throws {
        let first = try TestServer()
        var configuration = HTTPServerConfiguration()
        configuration.port = first.port
        let second = HTTPServer(configuration: configuration, routes: [])
        let error = try #require(throws: SystemError.self) { try second.start() }
        #expect(error.code == EADDRINUSE)
    }

    @Test func connectionsPastTheLimitAreRefusedCleanly() throws {
        let server = try TestServer {
            $0.maxConnections = 2
            $0.eventLoops = 1
        }
        let first = try RawClient(port: server.port)
        let second = try RawClient(port: server.port)
        try first.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try first.readResponse()
        try second.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try second.readResponse()
        let third = try RawClient(port: server.port)
        let refused = try third.readResponse()
        #expect(refused.status == 503 && refused.header("Retry-After") == "1")
        // The admitted clients are still served.
        try first.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try first.readResponse().status == 200)
    }
}
