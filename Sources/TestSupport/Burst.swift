import Foundation
import Locking

/// `count` clients, each on a thread and a connection of its own, released at once: the
/// bursts the collapsing, waiting and counting tests send.
public enum Burst {
    /// Connects `count` clients to `ports` (round robin), then lets them all run `send` at
    /// the same moment; the group is left when every client is done, and the answers hold
    /// what each `send` returned (nil: nothing, e.g. a failed request).
    public static func start<Answer>(_ count: Int, ports: [Int],
                                     _ send: @escaping @Sendable (RawClient) -> Answer?)
        -> (DispatchGroup, Locked<[Answer]>) {
        let answers = Locked<[Answer]>([])
        let group = DispatchGroup()
        let start = DispatchSemaphore(value: 0)
        for index in 0..<count {
            group.enter()
            let port = ports[index % ports.count]
            Thread.detachNewThread {
                defer { group.leave() }
                guard let client = try? RawClient(port: port, timeout: 30) else { return }
                start.wait()
                if let answer = send(client) { answers.withLock { $0.append(answer) } }
            }
        }
        // Every client connected (or given up) before any is let go, so they ask together.
        Thread.sleep(forTimeInterval: 0.3)
        for _ in 0..<count { start.signal() }
        return (group, answers)
    }
}
