import CLinux
import Glibc

/// A failed system call: its name and errno.
public struct SystemError: Error, CustomStringConvertible, Sendable {
    public let call: String
    public let code: Int32

    public var description: String { "\(call) failed: \(String(cString: strerror(code))) (errno \(code))" }
}

/// Runs a system call, retrying on EINTR; throws `SystemError` on any other failure.
@discardableResult
func systemCall(_ name: String, _ body: () -> Int32) throws -> Int32 {
    while true {
        let result = body()
        if result >= 0 { return result }
        if errno == EINTR { continue }
        throw SystemError(call: name, code: errno)
    }
}

/// Like `systemCall` for calls returning ssize_t; EAGAIN comes back as nil.
func nonBlockingCall(_ name: String, _ body: () -> Int) throws -> Int? {
    while true {
        let result = body()
        if result >= 0 { return result }
        switch errno {
        case EINTR: continue
        case EAGAIN, EWOULDBLOCK: return nil
        default: throw SystemError(call: name, code: errno)
        }
    }
}

/// Monotonic time in nanoseconds, for deadlines.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
