import Foundation

/// A value shared by the threads of one test (counters, collected statuses, flags).
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `stored` is only read or written under `lock`.
    private let lock = NSLock()
    private var stored: Value

    public init(_ value: Value) { stored = value }

    public var value: Value { lock.withLock { stored } }

    public func update<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.withLock { body(&stored) }
    }
}
