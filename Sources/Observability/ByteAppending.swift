extension Array where Element == UInt8 {
    /// Appends a string's UTF-8 bytes as one copy; the generic append walks the view.
    public mutating func appendUTF8(_ text: String) {
        var text = text
        text.withUTF8 { append(contentsOf: $0) }
    }

    /// Appends a literal's bytes as one copy, with no lazily initialised global to check.
    public mutating func appendASCII(_ text: StaticString) {
        append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }
}
