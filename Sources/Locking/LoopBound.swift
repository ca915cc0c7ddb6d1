/// A thread a value can be confined to: an event loop, which can tell whether the calling
/// thread is its own.
public protocol ConfiningLoop: AnyObject, Sendable {
    /// Whether the calling thread is this loop's.
    var inLoop: Bool { get }
}

/// A value that belongs to one event loop's thread, carried through code that runs elsewhere
/// (a worker's closure, a task handed to `execute`) only to be used back on that loop.
///
/// Loop-confined types (a connection, a responder, a loop's database connection) are not
/// `Sendable`: the compiler keeps them on their loop, and where one must ride a closure to
/// another thread and back, it rides in a `LoopBound`, whose `value` checks in debug builds
/// that it is read on its loop (as swift-nio's `NIOLoopBound` does). So the proof that a
/// confined value is used on its loop is a check that runs under every test, not a comment.
public struct LoopBound<Value>: @unchecked Sendable {
    // @unchecked: `stored` is reachable only through `value`, which is read on `loop`'s thread
    // (asserted); the value was made on that thread too (asserted in `init`).
    @usableFromInline let stored: Value
    /// The loop the value belongs to.
    public let loop: any ConfiningLoop

    /// Binds `value`, which must be made on `loop`'s thread, to `loop`.
    @inlinable
    public init(_ value: Value, on loop: any ConfiningLoop) {
        assert(loop.inLoop, "a loop-bound value made off its loop")
        stored = value
        self.loop = loop
    }

    /// The value; only on its loop's thread.
    @inlinable
    public var value: Value {
        assert(loop.inLoop, "a loop-bound value read off its loop")
        return stored
    }
}
