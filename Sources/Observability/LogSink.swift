import Foundation
import Synchronization

/// The process-wide destination of log lines.
///
/// Lines are buffered and written by a background flusher every 100 ms (or at once past
/// 64 KiB, or for warnings and errors), so an access log line does not cost a syscall
/// per request on the event loops.
public final class LogSink: @unchecked Sendable {
    // @unchecked: `buffer`, `fd` and `flusherStarted` are guarded by `lock`; `minimum` is atomic.
    public static let shared = LogSink()

    private let lock = NSLock()
    private var buffer: [UInt8] = []
    private var fd: Int32 = 2
    /// Read on every log call (and every request, for the access log): atomic, not locked.
    private let minimum = Atomic<Int>(LogLevel.info.rawValue)
    private var flusherStarted = false

    public var level: LogLevel { LogLevel(rawValue: minimum.load(ordering: .relaxed)) ?? .info }

    /// Sets the minimum level and the output descriptor (2 = standard error).
    public func configure(level: LogLevel, fd: Int32 = 2) {
        minimum.store(level.rawValue, ordering: .relaxed)
        lock.withLock { self.fd = fd }
    }

    /// Appends complete lines (one or many, each ending in a newline).
    public func write(_ lines: [UInt8], urgent: Bool = false) {
        lock.withLock {
            buffer.append(contentsOf: lines)
            if urgent || buffer.count > 64 * 1024 { flushLocked() }
            startFlusherLocked()
        }
    }

    /// Writes out everything buffered (call at shutdown).
    public func flush() {
        lock.withLock { flushLocked() }
    }

    private func flushLocked() {
        var offset = 0
        buffer.withUnsafeBytes { raw in
            while offset < raw.count {
                let written = Foundation.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { break }
                offset += written
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }

    private func startFlusherLocked() {
        guard !flusherStarted else { return }
        flusherStarted = true
        let thread = Thread { [self] in
            while true {
                usleep(100_000)
                flush()
            }
        }
        thread.name = "log-flusher"
        thread.start()
    }
}
