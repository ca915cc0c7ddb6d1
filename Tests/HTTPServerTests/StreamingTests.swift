import Dispatch
import Foundation
import HTTPServer
import Locking
import Testing
import TestSupport

/// Streamed answers (`Responder.stream`): parts go out as they are sent, a slow reader pauses
/// the producer instead of growing the server's memory, a client that leaves is noticed, and
/// the framing follows the request (chunked, close-delimited for HTTP/1.0, none for HEAD).
@Suite struct StreamingTests {
    /// A server whose `GET /s` (and HEAD) streams through `produce`, on a thread of its own
    /// (a producer is any thread: the stream hops to the loop), and `GET /healthz`.
    final class StreamServer {
        let server: HTTPServer
        var port: Int { server.port }

        init(_ tune: (inout HTTPServerConfiguration) -> Void = { _ in },
             produce: @escaping @Sendable (ResponseStream) -> Void) throws {
            var configuration = HTTPServerConfiguration()
            configuration.port = 0
            tune(&configuration)
            let handler: AsyncHTTPHandler = { _, responder in
                var head = HTTPResponse(status: 200)
                head.headers.add("Content-Type", "text/plain")
                head.headers.add("Content-Length", "999")  // a handler's own framing field is not sent
                guard let stream = responder.stream(head) else { return }
                Thread.detachNewThread { produce(stream) }
            }
            server = HTTPServer(configuration: configuration, routes: [
                Route("GET", "/s", responder: handler),
                Route("HEAD", "/s", responder: handler),
                Route("GET", "/healthz", .inline) { _ in .text(200, "ok\n") },
            ])
            try server.start()
        }

        deinit { server.shutdown() }
    }

    @Test func partsArriveAsTheyAreSentThenTheConnectionServesTheNextRequest() throws {
        let gates = (0..<3).map { _ in DispatchSemaphore(value: 0) }
        let server = try StreamServer { stream in
            for index in 0..<3 {
                stream.send(Array("part \(index)\n".utf8))
                // The next part only once the client has read this one: it arrived on its own.
                guard gates[index].wait(timeout: .now() + 10) == .success else { return stream.abort() }
            }
            stream.finish()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        let head = try client.readHead()
        #expect(head.status == 200 && head.header("Transfer-Encoding") == "chunked")
        #expect(head.header("Content-Length") == nil && head.header("Content-Type") == "text/plain")
        for index in 0..<3 {
            #expect(try client.readChunk() == Array("part \(index)\n".utf8))
            gates[index].signal()
        }
        #expect(try client.readChunk() == nil, "the terminal chunk")
        try client.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try client.readResponse().text == "ok\n")
    }

    @Test func curlReadsEachPartAsItIsSent() throws {
        let curl = ["/usr/bin/curl", "/usr/local/bin/curl"].first(where: FileManager.default.isExecutableFile(atPath:))
        try #require(curl != nil, "curl is installed by .ci/run")
        let gate = DispatchSemaphore(value: 0)
        let server = try StreamServer { stream in
            stream.send(Array("first\n".utf8))
            _ = gate.wait(timeout: .now() + 10)
            stream.send(Array("second\n".utf8))
            stream.finish()
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: curl!)
        process.arguments = ["-sN", "http://127.0.0.1:\(server.port)/s"]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        // The first part reaches curl's output while the producer still holds the second.
        let first = pipe.fileHandleForReading.availableData
        #expect(String(decoding: first, as: UTF8.self) == "first\n")
        gate.signal()
        let rest = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(String(decoding: rest, as: UTF8.self) == "second\n" && process.terminationStatus == 0)
    }

    @Test func aReaderThatStopsReadingPausesTheProducer() throws {
        let part = 16 * 1024, parts = 640  // 10 MiB: past every socket buffer on the way
        let observed = Locked((paused: false, heldWhilePaused: 0, sent: 0))
        let server = try StreamServer({ $0.streamBufferBytes = 64 * 1024 }) { stream in
            @Sendable func pump() {
                while observed.value.sent < parts {
                    guard stream.isWritable else {
                        observed.withLock { $0.paused = true; $0.heldWhilePaused = max($0.heldWhilePaused, stream.unreadBytes) }
                        stream.whenWritable { Thread.detachNewThread { pump() } }
                        return
                    }
                    let index = observed.withLock { state -> Int in
                        defer { state.sent += 1 }
                        return state.sent
                    }
                    stream.send([UInt8](repeating: UInt8(index % 251), count: part))
                }
                stream.finish()
            }
            pump()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try client.readHead()
        Thread.sleep(forTimeInterval: 0.5)
        let stalled = observed.value
        #expect(stalled.paused, "the producer was never paused")
        #expect(stalled.sent < parts, "everything was sent to a client that read nothing")
        // What the server holds for the client stays within the stream's buffer and a part
        // (with its chunk framing: 8 bytes).
        #expect(stalled.heldWhilePaused <= 64 * 1024 + part + 8, "held \(stalled.heldWhilePaused) bytes")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(observed.value.sent == stalled.sent, "the producer went on while paused")
        var index = 0
        while let chunk = try client.readChunk() {
            #expect(chunk.count == part && chunk.allSatisfy { $0 == UInt8(index % 251) }, "part \(index)")
            index += 1
        }
        #expect(index == parts)
        // Every later pause, while the client read and the producer raced the loop, too.
        #expect(observed.value.heldWhilePaused <= 64 * 1024 + part + 8, "held \(observed.value.heldWhilePaused) bytes")
    }

    @Test func aClientThatLeavesMidStreamIsNoticedAndItsPartsDropped() throws {
        let gone = DispatchSemaphore(value: 0)
        let server = try StreamServer { stream in
            stream.whenClosed { gone.signal() }
            while !stream.isClosed {
                stream.send(Array("tick\n".utf8))
                Thread.sleep(forTimeInterval: 0.02)
            }
            stream.send(Array("after\n".utf8))  // dropped: no trap, no write
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try client.readHead()
        #expect(try client.readChunk() == Array("tick\n".utf8))
        client.hangUp()
        #expect(gone.wait(timeout: .now() + 5) == .success, "the producer never learned its client left")
    }

    @Test func http10IsDelimitedByTheClose() throws {
        let server = try StreamServer { stream in
            for word in ["one ", "two ", "three"] { stream.send(Array(word.utf8)) }
            stream.finish()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.0\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.header("Transfer-Encoding") == nil && response.header("Content-Length") == nil)
        #expect(response.header("Connection") == "close" && response.text == "one two three")
        #expect(client.isClosedByPeer())
    }

    @Test func headSendsTheHeadAloneAndKeepsTheConnection() throws {
        let server = try StreamServer { stream in
            stream.send(Array("not sent".utf8))
            stream.finish()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("HEAD /s HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        let head = try client.readHead()
        #expect(head.status == 200 && head.header("Transfer-Encoding") == nil)
        let next = try client.readResponse()
        #expect(next.status == 200 && next.text == "ok\n", "the HEAD's parts were not sent")
    }

    @Test func aPipelinedRequestWaitsForTheStreamToEnd() throws {
        let server = try StreamServer { stream in
            for index in 0..<5 {
                stream.send(Array("\(index)".utf8))
                Thread.sleep(forTimeInterval: 0.02)
            }
            stream.finish()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try client.readHead()
        var body: [UInt8] = []
        while let chunk = try client.readChunk() { body += chunk }
        #expect(String(decoding: body, as: UTF8.self) == "01234")
        #expect(try client.readResponse().text == "ok\n")
    }

    @Test func aStreamIdlePastItsDeadlineIsClosed() throws {
        let gone = DispatchSemaphore(value: 0)
        let server = try StreamServer({ $0.streamIdleTimeout = 0.3 }) { stream in
            stream.whenClosed { gone.signal() }
            stream.send(Array("only\n".utf8))
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try client.readHead()
        #expect(try client.readChunk() == Array("only\n".utf8))
        #expect(gone.wait(timeout: .now() + 5) == .success, "an idle stream was kept open")
        #expect(client.isClosedByPeer())
    }

    /// A HEAD sends no body, so its producer's parts count as read at once: one that waits
    /// for room after a large part is resumed, and the connection goes on.
    @Test func aHeadProducerWaitingForRoomIsResumed() throws {
        let server = try StreamServer({ $0.streamBufferBytes = 64 * 1024 }) { stream in
            stream.send([UInt8](repeating: 1, count: 300 * 1024))
            stream.whenWritable { stream.finish() }
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("HEAD /s HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try client.readHead().status == 200)
        #expect(try client.readResponse().text == "ok\n", "the HEAD's stream never finished")
    }

    /// HTTP/1.0 marks a body's end by the close: a stream cut short must not end that way.
    @Test func anAbortedCloseDelimitedStreamEndsWithAReset() throws {
        let server = try StreamServer { stream in
            stream.send(Array("partial".utf8))
            Thread.sleep(forTimeInterval: 0.1)
            stream.abort()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.0\r\n\r\n")
        #expect(try client.readHead().status == 200)
        let end = try client.readUntilEnd()
        #expect(end.reset, "the connection ended in order after \(end.bytes.count) bytes: a truncated body reads as whole")
    }

    /// A server asked to stop while a stream runs lets it finish, then closes the connection
    /// at once rather than keeping it idle until the grace period ends.
    @Test func aStreamFinishedWhileDrainingClosesItsConnection() throws {
        let gate = DispatchSemaphore(value: 0)
        let server = try StreamServer { stream in
            stream.send(Array("before\n".utf8))
            _ = gate.wait(timeout: .now() + 10)
            stream.send(Array("after\n".utf8))
            stream.finish()
        }
        let client = try RawClient(port: server.port, timeout: 10)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        _ = try client.readHead()
        #expect(try client.readChunk() == Array("before\n".utf8))
        let stopped = DispatchSemaphore(value: 0)
        let started = Date()
        let http = server.server
        Thread.detachNewThread {
            http.shutdown()
            stopped.signal()
        }
        Thread.sleep(forTimeInterval: 0.2)
        gate.signal()
        #expect(try client.readChunk() == Array("after\n".utf8))
        #expect(try client.readChunk() == nil)
        #expect(client.isClosedByPeer())
        #expect(stopped.wait(timeout: .now() + 5) == .success && Date().timeIntervalSince(started) < 5)
    }
}
