import Foundation
import Locking
import Synchronization

/// The process-wide destination of log lines.
///
/// Callers (event loops among them) only append to a bounded buffer under a lock; a
/// background writer thread does every write, every 100 ms or at once for warnings and
/// errors. If the output stops draining (a stuck pipe, a full disk behind a terminal), the
/// writer waits, the buffer fills to `maxBufferedBytes`, and further lines are dropped and
/// counted (`droppedLines`, published as `teamcache_log_lines_dropped_total`): requests go
/// on, and memory stays bounded.
public final class LogSink: Sendable {
    public static let shared = LogSink()

    /// Past this many buffered bytes new lines are dropped.
    public static let maxBufferedBytes = 4 * 1024 * 1024
    /// A write of at most PIPE_BUF bytes to a pipe with that much room never blocks.
    private static let chunk = 4096

    /// The buffer and who writes it out, only inside the monitor's lock.
    struct State {
        var buffer: [UInt8] = []
        var target = Target(2)
        var writerStarted = false
        var wakeUp = false
        /// True while a thread writes a batch it took: only one writes at a time (lines from two
        /// writers would interleave), and `flush` waits for a batch already taken.
        var writing = false

        /// Takes the buffered bytes to write out (the caller writes them, then `finished`).
        mutating func take() -> ([UInt8], Target) {
            writing = true
            defer { buffer.removeAll(keepingCapacity: true) }
            return (buffer, target)
        }
    }

    private let state = Monitor(State())
    /// Read on every log call (and every request, for the access log): atomic, not locked.
    private let minimum = Atomic<Int>(LogLevel.info.rawValue)
    private let dropped = Atomic<Int>(0)

    public var level: LogLevel { LogLevel(rawValue: minimum.load(ordering: .relaxed)) ?? .info }

    /// Lines dropped because the output did not drain.
    public var droppedLines: Int { dropped.load(ordering: .relaxed) }

    /// Sets the minimum level and the output descriptor (2 = standard error).
    public func configure(level: LogLevel, fd: Int32 = 2) {
        minimum.store(level.rawValue, ordering: .relaxed)
        let target = Target(fd)
        state.withLock { $0.target = target }
    }

    /// Appends complete lines (one or many, each ending in a newline); never blocks on I/O.
    public func write(_ lines: [UInt8], urgent: Bool = false) {
        let (kept, wake, startWriter) = state.withLock { state -> (Bool, Bool, Bool) in
            guard state.buffer.count + lines.count <= Self.maxBufferedBytes else { return (false, false, false) }
            state.buffer.append(contentsOf: lines)
            let wake = urgent || state.buffer.count > 64 * 1024
            if wake { state.wakeUp = true }
            let startWriter = !state.writerStarted
            state.writerStarted = true
            return (true, wake, startWriter)
        }
        if wake { state.change { _ in } }
        if startWriter { startWriting() }
        if !kept {
            let count = lines.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
            dropped.add(max(count, 1), ordering: .relaxed)
        }
    }

    /// Writes out everything buffered, waiting at most `timeout` for the output to drain
    /// (at shutdown: a stuck output must not hold the process).
    public func flush(timeout: TimeInterval = 2) {
        let deadline = Date().addingTimeInterval(timeout)
        let taken = state.wait(until: deadline, while: { $0.writing }) { state, _ -> ([UInt8], Target)? in
            state.writing ? nil : state.take()
        }
        guard let (bytes, target) = taken else { return }
        output(bytes, to: target, deadline: deadline)
        state.change { $0.writing = false }
    }

    /// The writer thread: every 100 ms, or at once when woken, it writes out the buffer.
    private func startWriting() {
        let thread = Thread { [self] in
            while true {
                state.wait(until: Date().addingTimeInterval(0.1), while: { !$0.wakeUp || $0.writing }) { _, _ in }
                let (bytes, target) = state.wait(while: { $0.writing }) { state, _ in
                    state.wakeUp = false
                    return state.take()
                }
                // No deadline here: this thread may wait; callers do not wait for it.
                output(bytes, to: target, deadline: nil)
                state.change { $0.writing = false }
            }
        }
        thread.name = "log-writer"
        thread.start()
    }

    /// Writes `bytes`: to a regular file at once, to anything else (a pipe, a terminal) in
    /// pipe-sized pieces, each after the descriptor says it has room; with a deadline, what
    /// could not be written by then is dropped (and counted), as is what a write refuses.
    private func output(_ bytes: [UInt8], to target: Target, deadline: Date?) {
        guard !bytes.isEmpty else { return }  // the idle writer's every-100-ms batch
        var offset = 0
        // A regular file takes the batch in one write: it never reports "no room", so the
        // poll and the pipe-sized pieces were only syscalls (two per 4 KiB: ~8,000 a second
        // under a busy access log, on the loop's core when the service is pinned to one).
        let (fd, piece) = (target.fd, target.isRegularFile ? Int.max : Self.chunk)
        bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                if piece == Self.chunk {
                    var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    let wait = deadline.map { Int32(max(0, min($0.timeIntervalSinceNow * 1000, 1000))) } ?? 1000
                    let ready = poll(&descriptor, 1, wait)
                    if ready == 0 {
                        if let deadline, Date() >= deadline { break }
                        continue
                    }
                    if ready < 0 && errno == EINTR { continue }
                }
                let base = raw.baseAddress.map { $0 + offset }
                let written = Foundation.write(fd, base, min(piece, raw.count - offset))
                if written < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                if written <= 0 { break }
                offset += written
            }
        }
        if offset < bytes.count {
            let lost = bytes[offset...].reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
            dropped.add(max(lost, 1), ordering: .relaxed)
        }
    }

    /// Where lines go: the descriptor, and whether it is a regular file (asked once, when
    /// configured, not for every batch).
    struct Target {
        let fd: Int32
        let isRegularFile: Bool

        init(_ fd: Int32) {
            var status = stat()
            self.fd = fd
            isRegularFile = fstat(fd, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG
        }
    }
}
