import Dispatch
import Foundation
import HTTPClient
import HTTPServer
import Locking

/// An event loop to run calls on (a one-loop `HTTPServer`'s, as the service's loops are),
/// and a delegate that records what a call hears, when.
final class ClientHarness: @unchecked Sendable {
    // @unchecked: `loop` is set once on the loop's thread before `init` returns (the
    // semaphore orders it) and only read after.
    let server: HTTPServer
    private(set) var loop: EventLoop!
    let client: HTTPClient

    init(_ configuration: HTTPClient.Configuration = HTTPClient.Configuration()) throws {
        client = HTTPClient(configuration: configuration)
        var http = HTTPServerConfiguration()
        http.port = 0
        http.eventLoops = 1
        let ready = DispatchSemaphore(value: 0)
        let captured = Locked<EventLoop?>(nil)
        server = HTTPServer(configuration: http, routes: [], onLoopStart: { loop in
            captured.withLock { $0 = loop }
            ready.signal()
        })
        try server.start()
        _ = ready.wait(timeout: .now() + 10)
        loop = captured.withLock { $0 }
    }

    deinit { server.shutdown() }

    /// Starts `request` on the loop; the recorder hears it out.
    @discardableResult
    func start(_ request: ClientRequest, to url: String, tls: TLSContext? = nil,
               _ setUp: @escaping @Sendable (LoopBound<HTTPCall>, Recorder) -> Void = { _, _ in }) throws -> Recorder {
        let origin = try Origin(parsing: url)
        let recorder = Recorder()
        let client = self.client, loop = self.loop!
        loop.execute {
            let call = client.call(request, to: origin, tls: tls, on: loop, delegate: recorder.delegate(on: loop))
            setUp(LoopBound(call, on: loop), recorder)
        }
        return recorder
    }

    /// Runs `body` on the loop and waits for it.
    func onLoop(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            body()
            done.signal()
        }
        done.wait()
    }
}

/// What one call heard: its head, its parts with the time each came, and how it ended.
final class Recorder: Sendable {
    struct Heard {
        var head: ClientResponseHead?
        var parts: [(bytes: [UInt8], at: Date)] = []
        var finished = false
        var error: HTTPClientError?
        var endedAt: Date?
    }

    let heard = Locked(Heard())
    private let ended = DispatchSemaphore(value: 0)
    /// Runs (on the loop) after each part, with the call: tests pause or cancel from here.
    let onPart = Locked<(@Sendable (Int) -> Void)?>(nil)

    /// Waits for the end of the call; false if it did not end within `seconds`.
    func wait(_ seconds: Double = 10) -> Bool { ended.wait(timeout: .now() + seconds) == .success }

    var body: [UInt8] { heard.withLock { $0.parts.flatMap(\.bytes) } }
    var error: HTTPClientError? { heard.withLock { $0.error } }
    var status: Int? { heard.withLock { $0.head?.status } }
    var finished: Bool { heard.withLock { $0.finished } }
    var partCount: Int { heard.withLock { $0.parts.count } }

    func delegate(on loop: EventLoop) -> Delegate { Delegate(self) }

    final class Delegate: HTTPCallDelegate {
        let recorder: Recorder
        init(_ recorder: Recorder) { self.recorder = recorder }

        func callReceivedHead(_ head: ClientResponseHead) { recorder.heard.withLock { $0.head = head } }

        func callReceived(_ part: [UInt8]) {
            let count = recorder.heard.withLock { heard -> Int in
                heard.parts.append((part, Date()))
                return heard.parts.count
            }
            recorder.onPart.withLock { $0 }?(count)
        }

        func callFinished() {
            recorder.heard.withLock {
                $0.finished = true
                $0.endedAt = Date()
            }
            recorder.ended.signal()
        }

        func callFailed(_ error: HTTPClientError) {
            recorder.heard.withLock {
                $0.error = error
                $0.endedAt = Date()
            }
            recorder.ended.signal()
        }
    }
}
