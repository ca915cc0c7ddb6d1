/// What drives loop-confined clients (a database connection, an outgoing HTTP call): an
/// event loop that watches descriptors, runs hooks at the end of each iteration and accepts
/// tasks from other threads. The HTTP server's loops are one; the clients know nothing of them.
/// Only the loop's thread calls `watch`, `unwatch` and `onEachIteration`.
public protocol Reactor: ConfiningLoop {
    func watch(_ fd: Int32, writable: Bool, _ callback: @escaping () -> Void)
    func unwatch(_ fd: Int32)
    func onEachIteration(_ hook: @escaping () -> Void)
    func execute(_ task: @escaping @Sendable () -> Void)
    /// Monotonic nanoseconds at the start of the current iteration.
    var nanoseconds: UInt64 { get }
    /// What a client holds weakly in place of the reactor itself (see `ReactorHandle`); nil
    /// once the reactor has stopped running.
    var handle: ReactorHandle? { get }
}

/// A reactor's stand-in for clients that must not keep it alive: they hold this weakly; the
/// reactor holds it while it runs and lets it go when it stops (the two hold each other
/// until then). Weakly held, the reactor itself would get a side table, and every retain and
/// release of an object with one takes the runtime's slow path: the HTTP server's event loop
/// is retained several times a request (~300 instructions of a near-cache hit went there).
/// A client that reaches the handle holds the reactor strongly for as long as it uses it.
public final class ReactorHandle: Sendable {
    public let reactor: any Reactor

    public init(_ reactor: any Reactor) { self.reactor = reactor }
}
