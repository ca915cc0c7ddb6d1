import Foundation
import Locking
import Testing
import TestSupport

/// The gateway across two real `teamcache serve` replicas on one database: a burst of
/// identical calls spread over both makes one upstream call, and every caller gets the
/// same answer (the filler's replica follows the live stream, the other waits on the lease
/// and is answered from the stored entry); a failed call hands the lease on.
@Suite(.serialized) struct GatewayReplicaTests {
    static let harness = Result { try GatewayHarness() }

    func replicas() throws -> (ServeProcess, ServeProcess) {
        let environment = ["TEAMCACHE_UPSTREAMS_FILE": try Self.harness.get().file]
        let first = try ServeProcess(prefix: "gateway", environment: environment)
        let second = try ServeProcess(database: first.database, environment: environment)
        #expect(first.waitUntilListening() && second.waitUntilListening())
        return (first, second)
    }

    @Test(arguments: [true, false]) func aBurstAcrossTwoReplicasMakesOneUpstreamCall(stream: Bool) throws {
        let harness = try Self.harness.get()
        let (first, second) = try replicas()
        defer { first.kill(); second.kill() }
        let prompt = ModelBodies.unique(stream ? "drip burst" : "slow burst")
        let body = ModelBodies.chat(prompt, stream: stream)
        let all = Self.burst(20, ports: [first.port, second.port], body: body)
        #expect(all.count == 20)
        #expect(try harness.count(prompt) == 1, "one upstream call for the burst")
        #expect(all.allSatisfy { $0.head.status == 200 })
        #expect(Set(all.map(\.body)).count == 1, "every caller got the same answer")
        let marks = all.compactMap { $0.head.header("X-TeamCache") }
        #expect(marks.filter { $0 == "miss" }.count == 1, "\(marks)")
        #expect(marks.filter { $0.hasPrefix("hit") }.count == 19, "\(marks)")
    }

    /// The call fails (the upstream answers 500 to it): nothing is stored, and the callers
    /// waiting on it are not left hanging: each gets an answer of its own.
    @Test func aFailedCallLeavesNoCallerHanging() throws {
        let harness = try Self.harness.get()
        let (first, second) = try replicas()
        defer { first.kill(); second.kill() }
        let prompt = ModelBodies.unique("slow fail")
        let statuses = Self.burst(6, ports: [first.port, second.port], body: ModelBodies.chat(prompt)).map(\.head.status)
        #expect(statuses.count == 6 && statuses.allSatisfy { $0 == 500 }, "\(statuses)")
        #expect(try harness.count(prompt) >= 1)
    }
    /// `count` identical calls at once, spread over `ports`; the answers that came (a call
    /// that failed outright is missing), within a minute.
    static func burst(_ count: Int, ports: [Int], body: String) -> [StreamedAnswer] {
        let answers = Locked<[StreamedAnswer]>([])
        let group = DispatchGroup()
        for index in 0..<count {
            let port = ports[index % ports.count]
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                if let answer = try? StreamedAnswer.read(port: port, "/v1/caches/burst/gateway/local/chat/completions",
                                                         headers: [], body: body) {
                    answers.withLock { $0.append(answer) }
                }
            }
        }
        _ = group.wait(timeout: .now() + 60)
        return answers.value
    }
}
