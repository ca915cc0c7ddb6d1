import Glibc

/// Byte searches through `memchr`: the parser looks for line ends and colons in every
/// request head, and a generic index walk over an array costs several times as much.
public enum ByteSearch {
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

    /// The first index of `byte` in `text`'s UTF-8: `memchr` over its storage (a generic walk
    /// of the UTF-8 view costs ~250 instructions before it reads a byte); a string that lends
    /// no UTF-8 storage (a bridged one) is walked.
    public static func firstIndex(of byte: UInt8, in text: String) -> String.Index? {
        let utf8 = text.utf8
        if let offset = utf8.withContiguousStorageIfAvailable({ firstIndex(of: byte, in: $0, from: 0) }) {
            return offset.map { utf8.index(utf8.startIndex, offsetBy: $0) }
        }
        return utf8.firstIndex(of: byte)
    }

    /// How many bytes of `bytes` are `byte`.
    static func count(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>) -> Int {
        // A plain loop the compiler vectorizes: a `memchr` per hit cost ~40 instructions each.
        var count = 0
        for candidate in bytes where candidate == byte { count &+= 1 }
        return count
    }

    /// Whether `array` holds exactly the bytes of `bytes`: one `memcmp` (the generic
    /// `elementsEqual` walked both a byte at a time, ~400 instructions a near-cache hit).
    static func equal(_ array: [UInt8], _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard array.count == bytes.count else { return false }
        guard !bytes.isEmpty, let base = bytes.baseAddress else { return true }  // both empty
        return array.withUnsafeBufferPointer { memcmp($0.baseAddress!, base, bytes.count) == 0 }
    }
}
