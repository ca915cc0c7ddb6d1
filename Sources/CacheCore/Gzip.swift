import CZlib
import Locking

/// gzip (RFC 1952) through zlib.
public enum Gzip {
    public enum Failure: Error, Equatable {
        /// Not a valid gzip stream (or truncated).
        case malformed
        /// Inflating passed the caller's limit (a gzip bomb or an oversized body).
        case tooLarge
    }

    /// Compresses `bytes` at `level` (1–9); nil when zlib cannot (no memory for its state, a
    /// level it refuses): callers then keep or send the bytes as they are.
    public static func compress(_ bytes: [UInt8], level: Int32) -> [UInt8]? {
        // zlib's default memory level (8) clears a 64 KiB hash table for every body, more work
        // than deflating a 2 KB answer; level 5's 8 KiB table compresses such bodies as well
        // (the same sizes, or a little smaller, for 2-64 KB of JSON and text).
        let kind = Deflaters.Kind(level: level, memoryLevel: bytes.count <= 64 * 1024 ? 5 : 8)
        guard let stream = Deflaters.take(kind) else { return nil }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(stream.pointer, uLong(bytes.count))) + 32)
        let produced = bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out -> Int? in
                stream.pointer.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
                stream.pointer.pointee.avail_in = uInt(input.count)
                stream.pointer.pointee.next_out = out.baseAddress
                stream.pointer.pointee.avail_out = uInt(out.count)
                // deflateBound guarantees room to finish in one call; anything else is zlib's failure.
                guard deflate(stream.pointer, Z_FINISH) == Z_STREAM_END else { return nil }
                return out.count - Int(stream.pointer.pointee.avail_out)
            }
        }
        guard let produced else {
            deflateEnd(stream.pointer)  // not kept: its state is not known to be sound
            return nil
        }
        Deflaters.give(stream, kind)
        output.removeSubrange(produced...)
        return output
    }

    /// Inflates a gzip stream, failing with `.tooLarge` as soon as the output passes `limit`,
    /// so a small bomb never allocates more than the limit.
    ///
    /// The output is inflated straight into memory sized by the stream's own trailer (ISIZE,
    /// the length mod 2^32), left uninitialized: zeroing a 64 KiB chunk and appending from
    /// it was a fifth of an import's parsing (bench/dump.sh). The trailer is only a hint (a
    /// lie costs a larger or a growing buffer, never more than the limit allows).
    public static func decompress(_ bytes: [UInt8], limit: Int) throws -> [UInt8] {
        let limit = min(max(limit, 0), Int.max / 4)
        let stream = ZStream()
        guard czlib_inflate_init2(stream.pointer, 15 + 16) == Z_OK else { throw Failure.malformed }
        defer { inflateEnd(stream.pointer) }
        // One byte past the limit: output that fills it has passed the limit.
        var output = OutputBuffer(capacity: min(declaredSize(bytes), limit) + 1)
        defer { output.release() }
        var status: Int32 = Z_OK
        try bytes.withUnsafeBufferPointer { input in
            stream.pointer.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
            stream.pointer.pointee.avail_in = uInt(input.count)
            while status != Z_STREAM_END {
                if output.isFull { output.grow(upTo: limit + 1) }
                let (before, offered) = (output.count, min(output.room, Int(UInt32.max)))
                stream.pointer.pointee.next_out = output.end
                stream.pointer.pointee.avail_out = uInt(offered)
                status = inflate(stream.pointer, Z_NO_FLUSH)
                output.count += offered - Int(stream.pointer.pointee.avail_out)
                guard status == Z_OK || status == Z_STREAM_END else { throw Failure.malformed }
                if output.count > limit { throw Failure.tooLarge }
                if status == Z_OK && output.count == before && stream.pointer.pointee.avail_in == 0 {
                    throw Failure.malformed
                }
            }
            // Trailing bytes after the gzip member are not accepted: the body must be one stream.
            if stream.pointer.pointee.avail_in != 0 { throw Failure.malformed }
        }
        return output.bytes
    }

    /// The length a gzip stream's trailer gives (mod 2^32), at most what deflate's largest
    /// ratio (1032:1) allows from its size and at most 4 MiB: a hint for the output's first
    /// allocation (the client writes it; a larger body grows there by doubling).
    static func declaredSize(_ bytes: [UInt8]) -> Int {
        guard bytes.count >= 18 else { return 0 }
        let end = bytes.count
        let size = Int(bytes[end - 4]) | Int(bytes[end - 3]) << 8 | Int(bytes[end - 2]) << 16
            | Int(bytes[end - 1]) << 24
        return min(size, bytes.count * 1032, 4 << 20)
    }

    /// Uninitialized output memory that grows by doubling (up to a cap).
    private struct OutputBuffer {
        private(set) var capacity: Int
        private var start: UnsafeMutablePointer<UInt8>
        var count = 0

        init(capacity: Int) {
            self.capacity = capacity
            start = .allocate(capacity: capacity)
        }

        var isFull: Bool { count == capacity }
        var room: Int { capacity - count }
        /// Where the next output goes.
        var end: UnsafeMutablePointer<UInt8> { start + count }
        var bytes: [UInt8] { Array(UnsafeBufferPointer(start: start, count: count)) }

        mutating func grow(upTo cap: Int) {
            let grown = max(min(capacity * 2, cap), capacity + 1)
            let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
            larger.initialize(from: start, count: count)
            start.deallocate()
            (start, capacity) = (larger, grown)
        }

        func release() { start.deallocate() }
    }
}

/// Deflate streams kept for reuse, a few per level and memory level: making one allocates
/// ~256 KiB of zlib state (`deflateInit2`, then `deflateEnd`) for every write's body;
/// `deflateReset` readies a kept one for the next body, whose output is the same as a new
/// stream's.
enum Deflaters {
    struct Kind: Hashable {
        let level: Int32
        let memoryLevel: Int32
    }

    static let kept = Locked<[Kind: [ZStream]]>([:])
    /// Per kind: as many as writes compress at once (workers), with room to spare.
    static let keptPerKind = 16

    /// A ready stream, or nil when zlib cannot make one (no memory, a level it refuses).
    static func take(_ kind: Kind) -> ZStream? {
        if let stream = kept.withLock({ $0[kind]?.popLast() }) {
            if deflateReset(stream.pointer) == Z_OK { return stream }
            deflateEnd(stream.pointer)  // unusable: a new one instead
        }
        let stream = ZStream()
        // windowBits 15 + 16 selects the gzip wrapper.
        guard czlib_deflate_init2(stream.pointer, kind.level, 15 + 16, kind.memoryLevel) == Z_OK else {
            deflateEnd(stream.pointer)  // frees whatever a failed init allocated (a no-op otherwise)
            return nil
        }
        return stream
    }

    static func give(_ stream: ZStream, _ kind: Kind) {
        let keptIt = kept.withLock { kept in
            guard kept[kind, default: []].count < keptPerKind else { return false }
            kept[kind, default: []].append(stream)
            return true
        }
        if !keptIt { deflateEnd(stream.pointer) }
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
