// Both are `@inlinable`: called from other modules unspecialized, each call looked up the
// metadata of `Optional<Result>` at run time (a locked map probe, ~600 instructions), 39
// times a near-cache hit: 28% of a hit's instructions (callgrind, bench/hit-instructions.sh).
extension Array where Element == UInt8 {
    /// Appends a string's UTF-8 bytes as one copy; the generic append walks the view.
    @inlinable
    public mutating func appendUTF8(_ text: String) {
        text.withUTF8Bytes { append(contentsOf: $0) }
    }
}

extension String {
    /// Runs `body` on the string's UTF-8 bytes: in place when the string has contiguous
    /// storage (native strings do), else on a copy. The byte writers of responses and log
    /// lines copy strings through this.
    @inlinable
    public func withUTF8Bytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        if let done = try utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        return try Array(utf8).withUnsafeBytes(body)
    }
}
