import Glibc

/// What a connection has queued for its client: whole buffers in order (a head, a body),
/// how far the first has been written, and when each was queued (a response must be read
/// whole within the write timeout of its queueing, however slowly it trickles out).
struct OutputQueue {
    private var buffers: [[UInt8]] = []
    private var queuedAt: [UInt64] = []
    /// Bytes of the first buffer already written.
    private var offset = 0
    /// Bytes queued and not yet written.
    private(set) var bytes = 0

    var isEmpty: Bool { buffers.isEmpty }
    /// When the oldest unwritten buffer was queued.
    var oldestQueuedAt: UInt64? { queuedAt.first }

    mutating func append(_ buffer: [UInt8], at now: UInt64) {
        buffers.append(buffer)
        queuedAt.append(now)
        bytes += buffer.count
    }

    mutating func removeAll() {
        buffers = []
        queuedAt = []
        offset = 0
        bytes = 0
    }

    /// One `write` (or `writev` of up to 16 buffers) to `fd`; what it wrote is dropped from
    /// the queue. Returns the system call's result (negative: see errno).
    mutating func write(to fd: Int32) -> Int {
        let written = writeSome(fd)
        if written > 0 { advance(by: written) }
        return written
    }

    private func writeSome(_ fd: Int32) -> Int {
        if buffers.count == 1 {
            // The common case, one buffer (a head with a small body): no iovec array to build.
            return buffers[0].withUnsafeBytes { raw in
                guard let base = raw.baseAddress else { return 0 }
                return Glibc.write(fd, base + offset, raw.count - offset)
            }
        }
        var vectors: [iovec] = []
        vectors.reserveCapacity(min(buffers.count, 16))
        // The arrays stay alive (and unmoved) in `buffers` for the duration of writev.
        return withExtendedLifetime(buffers) {
            for (position, chunk) in buffers.prefix(16).enumerated() {
                chunk.withUnsafeBytes { raw in
                    guard let base = raw.baseAddress else { return }
                    let skip = position == 0 ? offset : 0
                    vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: base + skip),
                                         iov_len: raw.count - skip))
                }
            }
            return writev(fd, vectors, Int32(vectors.count))
        }
    }

    private mutating func advance(by written: Int) {
        var remaining = written
        bytes -= written
        while remaining > 0, let first = buffers.first {
            let left = first.count - offset
            if remaining >= left {
                remaining -= left
                buffers.removeFirst()
                queuedAt.removeFirst()
                offset = 0
            } else {
                offset += remaining
                remaining = 0
            }
        }
    }
}
