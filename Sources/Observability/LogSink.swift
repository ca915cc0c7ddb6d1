import Foundation

/// The process-wide destination of log lines.
///
/// Lines are buffered and written by a background flusher every 100 ms (or at once past
/// 64 KiB, or for warnings and errors), so an access log line does not cost a syscall
/// per request on the event loops.
public final class LogSink: @unchecked Sendable {
    // @unchecked: every mutable field below is guarded by `lock`.
    public static let shared = LogSink()

    private let lock = NSLock()
    private var buffer: [UInt8] = []
    private var fd: Int32 = 2
    private var minimum: LogLevel = .info
    private var flusherStarted = false
    /// `{"ts":"YYYY-MM-DDTHH:MM:SS` of the current second, rebuilt when the second changes.
    private var stampSecond = 0
    private var stampPrefix: [UInt8] = []

    public var level: LogLevel { lock.withLock { minimum } }

    /// Sets the minimum level and the output descriptor (2 = standard error).
    public func configure(level: LogLevel, fd: Int32 = 2) {
        lock.withLock {
            minimum = level
            self.fd = fd
        }
    }

    /// Appends `{"ts":"…",` and the rest of a line (which starts after that comma).
    func write(_ line: String, urgent: Bool) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let millis = Int(now.tv_nsec / 1_000_000)
        lock.withLock {
            if now.tv_sec != stampSecond {
                stampSecond = now.tv_sec
                stampPrefix = Array(("{\"ts\":\"" + Self.secondText(now.tv_sec) + ".").utf8)
            }
            buffer.append(contentsOf: stampPrefix)
            buffer.append(UInt8(ascii: "0") + UInt8(millis / 100))
            buffer.append(UInt8(ascii: "0") + UInt8(millis / 10 % 10))
            buffer.append(UInt8(ascii: "0") + UInt8(millis % 10))
            buffer.append(contentsOf: "Z\",".utf8)
            buffer.append(contentsOf: line.utf8)
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

    /// `YYYY-MM-DDTHH:MM:SS` in UTC, through strftime (much cheaper than a formatter).
    static func secondText(_ seconds: Int) -> String {
        var time = seconds
        var parts = tm()
        gmtime_r(&time, &parts)
        var text = [CChar](repeating: 0, count: 32)
        let length = strftime(&text, text.count, "%Y-%m-%dT%H:%M:%S", &parts)
        return String(decoding: text[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
