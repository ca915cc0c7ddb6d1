import CZlib

/// gzip for streams of unknown length (dumps): compresses or inflates piece by piece, so
/// memory stays at zlib's window and one piece whatever the stream's size.
public final class GzipWriter {
    private let stream = ZStream()
    private var finished = false

    /// Throws when zlib cannot start (no memory, a level outside 1-9).
    public init(level: Int32 = 6) throws(Gzip.Failure) {
        // windowBits 15 + 16: the gzip wrapper.
        guard czlib_deflate_init2(stream.pointer, level, 15 + 16, 8) == Z_OK else { throw .malformed }
    }

    deinit { deflateEnd(stream.pointer) }

    /// The compressed bytes for `bytes` (possibly none yet: zlib buffers); after `finish`,
    /// nothing (the stream is closed).
    public func write(_ bytes: [UInt8]) -> [UInt8] {
        guard !finished else { return [] }
        return run(bytes, flush: Z_NO_FLUSH)
    }

    /// The rest of the stream, trailer included; nothing more may be written.
    public func finish() -> [UInt8] {
        guard !finished else { return [] }
        finished = true
        return run([], flush: Z_FINISH)
    }

    private func run(_ bytes: [UInt8], flush: Int32) -> [UInt8] {
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        bytes.withUnsafeBufferPointer { input in
            stream.pointer.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
            stream.pointer.pointee.avail_in = uInt(input.count)
            while true {
                let produced = chunk.withUnsafeMutableBufferPointer { out -> Int in
                    stream.pointer.pointee.next_out = out.baseAddress
                    stream.pointer.pointee.avail_out = uInt(out.count)
                    _ = deflate(stream.pointer, flush)
                    return out.count - Int(stream.pointer.pointee.avail_out)
                }
                output.append(contentsOf: chunk[..<produced])
                // Done when zlib neither took all input nor filled the chunk.
                if stream.pointer.pointee.avail_out != 0 && stream.pointer.pointee.avail_in == 0 { break }
            }
        }
        return output
    }
}

/// Inflates a gzip stream piece by piece (several members in a row are one stream, as
/// `gzip -c a b` writes them). `maxPiece` bounds what one call returns.
public final class GzipReader {
    private let stream = ZStream()
    private var pending: [UInt8] = []
    private var pendingOffset = 0
    public private(set) var ended = false
    private let maxPiece: Int

    public init(maxPiece: Int = 1 << 20) throws(Gzip.Failure) {
        self.maxPiece = max(1024, maxPiece)
        guard czlib_inflate_init2(stream.pointer, 15 + 16) == Z_OK else { throw .malformed }
    }

    deinit { inflateEnd(stream.pointer) }

    /// zlib may hold inflated bytes it could not hand out (the last call filled its piece).
    private var holdsOutput = false

    /// Whether fed bytes (or bytes zlib holds) are still waiting to be read out.
    public var hasOutput: Bool { pendingOffset < pending.count || holdsOutput }

    /// Hands in compressed bytes; read them out with `read` until it returns empty.
    public func feed(_ bytes: [UInt8]) {
        if pendingOffset >= pending.count {
            pending = bytes
            pendingOffset = 0
        } else {
            pending = Array(pending[pendingOffset...]) + bytes
            pendingOffset = 0
        }
    }

    /// Up to `maxPiece` inflated bytes from what was fed; empty when it needs more input.
    public func read() throws(Gzip.Failure) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: maxPiece)
        var failed = false
        let produced = pending.withUnsafeBufferPointer { input -> Int in
            output.withUnsafeMutableBufferPointer { out -> Int in
                var written = 0
                while written < out.count && (pendingOffset < input.count || holdsOutput) {
                    let left = input.count - pendingOffset
                    stream.pointer.pointee.next_in = left > 0 ? UnsafeMutablePointer(mutating: input.baseAddress! + pendingOffset) : nil
                    stream.pointer.pointee.avail_in = uInt(left)
                    stream.pointer.pointee.next_out = out.baseAddress! + written
                    stream.pointer.pointee.avail_out = uInt(out.count - written)
                    let status = inflate(stream.pointer, Z_NO_FLUSH)
                    let taken = left - Int(stream.pointer.pointee.avail_in)
                    let before = written
                    pendingOffset += taken
                    written = out.count - Int(stream.pointer.pointee.avail_out)
                    // A full piece: zlib may hold more output than it could hand out.
                    holdsOutput = stream.pointer.pointee.avail_out == 0
                    if status == Z_STREAM_END {
                        // Another member may follow: start over on what is left.
                        holdsOutput = false
                        ended = pendingOffset >= input.count
                        if inflateReset(stream.pointer) != Z_OK { failed = true }
                        if failed { break }
                        continue
                    }
                    ended = false
                    if status == Z_BUF_ERROR {
                        // No progress possible without more input.
                        holdsOutput = false
                        break
                    }
                    if status != Z_OK { failed = true }
                    if failed || (taken == 0 && written == before) { break }
                }
                return written
            }
        }
        if failed { throw .malformed }
        output.removeSubrange(produced...)
        return output
    }
}
