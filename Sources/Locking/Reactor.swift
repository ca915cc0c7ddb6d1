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
}
