import CacheCore
import Foundation
import Locking
import Testing
import TestSupport

/// Callers who ask the gateway for a call already under way: they follow it (one upstream
/// call), live when it streams, with what they need to read its bytes; and the caller whose
/// call it is may leave without cancelling it for them.
extension GatewayTests {
    /// Sends one call of `prompt` (a "stall" prompt: the upstream answers after 3 s), then,
    /// once the upstream has it, `followers` more of the same: they join that call however
    /// loaded the machine is (a fixed 0.15 s head start against a 0.3 s answer did not hold
    /// under CI's load). Every answer, in no order.
    func askWhileTheFirstIsUnderWay(_ target: String, headers: [(String, String)], prompt: String, followers: Int)
        throws -> [RawClient.Response] {
        let body = ModelBodies.chat(prompt)
        let service = try self.service
        let answers = Locked<[RawClient.Response]>([])
        let calls = DispatchGroup()
        func ask() {
            calls.enter()
            Thread.detachNewThread {
                if let answer = try? service.request("POST", target, headers: headers, json: body) {
                    answers.withLock { $0.append(answer) }
                }
                calls.leave()
            }
        }
        ask()
        let deadline = Date().addingTimeInterval(10)
        while try harness.count(prompt) == 0 && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        for _ in 0..<followers { ask() }
        #expect(calls.wait(timeout: .now() + 30) == .success)
        return answers.value
    }

    /// An answer the upstream compressed (although asked for identity) is not stored, and a
    /// caller following it here is told its encoding, as the caller who made the call is.
    @Test func aFollowerOfAnEncodedAnswerIsToldItsEncoding() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let prompt = ModelBodies.unique("gzipped stall")
        let all = try askWhileTheFirstIsUnderWay(path("local", "chat/completions"), headers: headers,
                                                 prompt: prompt, followers: 2)
        #expect(all.count == 3)
        #expect(all.contains { $0.header("X-TeamCache") == "hit; collapsed" }, "a caller followed")
        for answer in all {
            #expect(answer.header("Content-Encoding") == "gzip")
            let text = (try? Gzip.decompress(answer.body, limit: 1 << 20)).map { String(decoding: $0, as: UTF8.self) }
            #expect(text?.contains("Hello there") == true)
        }
        #expect(try harness.count(prompt) < 3)
    }

    /// A second caller here while the first call streams follows it live: its events come
    /// as the upstream sends them (not after the end), and the upstream is called once.
    @Test func aCallerHereFollowsTheLiveStream() throws {
        let prompt = ModelBodies.unique("drip follow")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let port = try service.port, target = path("local", "chat/completions")
        let started = Date()
        let first = Locked<StreamedAnswer?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            first.withLock { $0 = try? StreamedAnswer.read(port: port, target, headers: headers,
                                                          body: ModelBodies.chat(prompt, stream: true)) }
            done.signal()
        }
        // The second caller asks once the upstream has the first call (a fixed head start
        // could be outrun on a loaded machine, and the first would then follow the second).
        let deadline = Date().addingTimeInterval(10)
        while try harness.count(prompt) == 0 && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        let second = try StreamedAnswer.read(port: port, target, headers: headers,
                                             body: ModelBodies.chat(prompt, stream: true))
        #expect(done.wait(timeout: .now() + 10) == .success)
        let owner = try #require(first.value)
        #expect(second.head.header("X-TeamCache") == "hit; collapsed")
        #expect(second.body == owner.body)
        // The first caller's account fields are its own: a follower is not shown them.
        #expect(owner.head.header("X-Upstream-Account") != nil && second.head.header("X-Upstream-Account") == nil)
        // The follower had its first event within the stream's life, well before its end,
        // and each later event close behind the caller whose call it is (well within the
        // 250 ms between the upstream's events; a loaded machine schedules two readers late).
        let firstPart = try #require(second.parts.first).at.timeIntervalSince(started)
        let lastPart = try #require(second.parts.last).at.timeIntervalSince(started)
        #expect(lastPart - firstPart > 0.3, "the follower's events came at \(firstPart) and \(lastPart) s")
        for marker in ["\" there\"", "[DONE]"] {
            let lag = try #require(second.arrival(of: marker)).timeIntervalSince(try #require(owner.arrival(of: marker)))
            #expect(abs(lag) < 0.2, "the follower read \(marker) \(lag) s after the caller")
        }
        #expect(try harness.count(prompt) == 1)
    }

    /// The caller that made the call hangs up mid-stream: the gateway reads on and stores it.
    @Test func aCallerWhoLeavesDoesNotCancelTheCall() throws {
        let prompt = ModelBodies.unique("drip leave")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let client = try RawClient(port: try service.port, timeout: 10)
        let body = ModelBodies.chat(prompt, stream: true)
        try client.send("POST \(path("local", "chat/completions")) HTTP/1.1\r\nHost: t\r\n"
                        + "TeamCache-Authorization: \(headers[0].1)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
        #expect(try client.readHead().status == 200)
        client.hangUp()
        // Asked again until stored (a repeat while the stream still runs follows it, calling
        // nothing): a call cancelled with its caller would be called a second time.
        var again = try post("local", "chat/completions", body, headers: headers)
        for _ in 0..<100 where again.header("X-TeamCache") != "hit" {
            #expect(again.header("X-TeamCache") == "hit; collapsed", "\(again.header("X-TeamCache") ?? "")")
            Thread.sleep(forTimeInterval: 0.1)
            again = try post("local", "chat/completions", body, headers: headers)
        }
        #expect(again.header("X-TeamCache") == "hit")
        #expect(try harness.count(prompt) == 1)
    }
}
