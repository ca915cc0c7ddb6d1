import Glibc

/// Byte searches through `memchr`: the parser looks for line ends and colons in every
/// request head, and a generic index walk over an array costs several times as much.
enum ByteSearch {
    /// The first index at or after `from` holding `byte`; nil if none, or if `from` is not
    /// an index of `bytes`.
    static func firstIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from: Int) -> Int? {
        guard from >= 0, from < bytes.count, let base = bytes.baseAddress,
              let hit = memchr(base + from, Int32(byte), bytes.count - from) else { return nil }
        return UnsafeRawPointer(base).distance(to: UnsafeRawPointer(hit))
    }

    /// The same in a slice, by the slice's own indices.
    static func firstIndex(of byte: UInt8, in slice: ArraySlice<UInt8>, from: Int) -> Int? {
        slice.withUnsafeBufferPointer { buffer in
            firstIndex(of: byte, in: buffer, from: from - slice.startIndex).map { $0 + slice.startIndex }
        }
    }
}
