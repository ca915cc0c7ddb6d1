import HTTPClient
import Locking

/// One upstream answer on its way, and every caller on this replica who reads it: the one
/// whose call it is, and those who asked the same while it ran (they follow the live stream
/// rather than wait for it to be stored). It keeps what it relayed so far (bounded) so a
/// late follower starts from the first byte.
///
/// Followers are told on their own loops, in order: `head`, parts, then the end.
final class Broadcast: Sendable {
    /// What every follower is told first: the upstream's status and headers worth passing on.
    struct Head: Sendable {
        let status: Int
        let headers: [(name: String, value: String)]
        let contentType: String
    }

    enum Ending: Sendable {
        /// The answer is complete; `stored`: it is (being) stored; `usage`: what it reported
        /// (what a follower saved), when known.
        case complete(stored: Bool, usage: AnswerUsage?)
        /// The call failed, or the upstream answered an error followers should not take as theirs.
        case failed(HTTPClientError?)
    }

    /// One reader: closures that hop to its loop.
    struct Follower: Sendable {
        let head: @Sendable (Head) -> Void
        let part: @Sendable ([UInt8]) -> Void
        let end: @Sendable (Ending) -> Void
    }

    private struct State {
        var head: Head?
        var transcript: [UInt8] = []
        /// The transcript passed its bound: no one new can start from the first byte.
        var overflowed = false
        var ending: Ending?
        var followers: [Follower] = []
    }

    let streamed: Bool
    private let maxTranscript: Int
    private let state = Locked(State())

    init(streamed: Bool, maxTranscript: Int) {
        self.streamed = streamed
        self.maxTranscript = maxTranscript
    }

    /// Adds a follower and tells it at once what has happened so far; false (and nothing
    /// told) when it cannot follow from the start: the answer overflowed or already ended
    /// other than complete.
    func join(_ follower: Follower) -> Bool {
        let snapshot = state.withLock { state -> (Head?, [UInt8], Ending?)? in
            if state.overflowed { return nil }
            if case .failed? = state.ending { return nil }
            if state.ending == nil { state.followers.append(follower) }
            return (state.head, state.transcript, state.ending)
        }
        guard let (head, transcript, ending) = snapshot else { return false }
        if let head { follower.head(head) }
        if !transcript.isEmpty { follower.part(transcript) }
        if let ending { follower.end(ending) }
        return true
    }

    func begin(_ head: Head) {
        let followers = state.withLock { state -> [Follower] in
            state.head = head
            return state.followers
        }
        for follower in followers { follower.head(head) }
    }

    func send(_ part: [UInt8]) {
        guard !part.isEmpty else { return }
        let followers = state.withLock { state -> [Follower] in
            if !state.overflowed {
                if state.transcript.count + part.count > maxTranscript {
                    state.overflowed = true
                    state.transcript = []
                } else {
                    state.transcript += part
                }
            }
            return state.followers
        }
        for follower in followers { follower.part(part) }
    }

    func end(_ ending: Ending) {
        let followers = state.withLock { state -> [Follower] in
            guard state.ending == nil else { return [] }
            state.ending = ending
            defer { state.followers = [] }
            return state.followers
        }
        for follower in followers { follower.end(ending) }
    }

    /// Everything relayed so far, when within the bound (nil once past it). The exchange
    /// reads it when the call has finished, before telling followers the end.
    var transcript: [UInt8]? {
        state.withLock { state in state.overflowed ? nil : state.transcript }
    }
}

/// The broadcasts in progress on this replica, by namespace and key: a caller whose answer
/// is already on its way here follows it instead of waiting for another replica's notice.
final class LiveFills: Sendable {
    private let fills = Locked<[String: Broadcast]>([:])

    static func name(_ namespace: String, _ key: String) -> String { namespace + "\u{0}" + key }

    func find(_ name: String) -> Broadcast? { fills.withLock { $0[name] } }

    /// Registers `broadcast` unless one is there already (which is returned instead).
    func register(_ name: String, _ broadcast: Broadcast) -> Broadcast? {
        fills.withLock { fills in
            if let existing = fills[name] { return existing }
            fills[name] = broadcast
            return nil
        }
    }

    func remove(_ name: String, _ broadcast: Broadcast) {
        fills.withLock { fills in
            if fills[name] === broadcast { fills[name] = nil }
        }
    }
}
