import CZlib

/// gzip (RFC 1952) through zlib.
public enum Gzip {
    public enum Failure: Error, Equatable {
        /// Not a valid gzip stream (or truncated).
        case malformed
        /// Inflating passed the caller's limit (a gzip bomb or an oversized body).
        case tooLarge
    }

    /// Compresses `bytes` at `level` (1–9).
    public static func compress(_ bytes: [UInt8], level: Int32) -> [UInt8] {
        let stream = ZStream()
        // windowBits 15 + 16 selects the gzip wrapper.
        precondition(czlib_deflate_init2(stream.pointer, level, 15 + 16, 8) == Z_OK, "deflateInit2 failed")
        defer { deflateEnd(stream.pointer) }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(stream.pointer, uLong(bytes.count))) + 32)
        let produced = bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out in
                stream.pointer.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
                stream.pointer.pointee.avail_in = uInt(input.count)
                stream.pointer.pointee.next_out = out.baseAddress
                stream.pointer.pointee.avail_out = uInt(out.count)
                let status = deflate(stream.pointer, Z_FINISH)
                precondition(status == Z_STREAM_END, "deflate did not finish within deflateBound")
                return out.count - Int(stream.pointer.pointee.avail_out)
            }
        }
        output.removeSubrange(produced...)
        return output
    }

    /// Inflates a gzip stream, failing with `.tooLarge` as soon as the output passes `limit`,
    /// so a small bomb never allocates more than the limit.
    public static func decompress(_ bytes: [UInt8], limit: Int) throws -> [UInt8] {
        let stream = ZStream()
        guard czlib_inflate_init2(stream.pointer, 15 + 16) == Z_OK else { throw Failure.malformed }
        defer { inflateEnd(stream.pointer) }
        var output: [UInt8] = []
        // No larger than the limit needs: a 2 KB answer should not zero 64 KiB on every hit.
        var chunk = [UInt8](repeating: 0, count: min(64 * 1024, max(limit, 0)) + 1)
        var status: Int32 = Z_OK
        try bytes.withUnsafeBufferPointer { input in
            stream.pointer.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
            stream.pointer.pointee.avail_in = uInt(input.count)
            while status != Z_STREAM_END {
                let produced = chunk.withUnsafeMutableBufferPointer { out -> Int in
                    stream.pointer.pointee.next_out = out.baseAddress
                    stream.pointer.pointee.avail_out = uInt(out.count)
                    status = inflate(stream.pointer, Z_NO_FLUSH)
                    return out.count - Int(stream.pointer.pointee.avail_out)
                }
                guard status == Z_OK || status == Z_STREAM_END else { throw Failure.malformed }
                if output.count + produced > limit { throw Failure.tooLarge }
                output.append(contentsOf: chunk[..<produced])
                if status == Z_OK && produced == 0 && stream.pointer.pointee.avail_in == 0 { throw Failure.malformed }
            }
            // Trailing bytes after the gzip member are not accepted: the body must be one stream.
            if stream.pointer.pointee.avail_in != 0 { throw Failure.malformed }
        }
        return output
    }
}

/// Owns a `z_stream` in memory allocated once, so its address stays stable (zlib keeps
/// pointers into it between calls).
final class ZStream {
    let pointer: UnsafeMutablePointer<z_stream>

    init() {
        pointer = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        pointer.initialize(to: z_stream())
    }

    deinit {
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }
}
