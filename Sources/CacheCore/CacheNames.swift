/// A validated namespace: `^[a-z0-9][a-z0-9._-]{0,63}$`.
public struct Namespace: Hashable, Sendable, CustomStringConvertible {
    public let name: String

    public init?(_ bytes: [UInt8]) {
        guard (1...64).contains(bytes.count), Self.isLeading(bytes[0]), bytes.dropFirst().allSatisfy(Self.isInner)
        else { return nil }
        name = String(decoding: bytes, as: UTF8.self)
    }

    public init?(_ text: String) { self.init(Array(text.utf8)) }

    public var description: String { name }

    private static func isLeading(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    private static func isInner(_ byte: UInt8) -> Bool {
        isLeading(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }
}

/// A validated entry key: 1 to 512 bytes, any byte but NUL. Opaque to the server.
public struct EntryKey: Hashable, Sendable {
    public static let maxBytes = 512
    public let bytes: [UInt8]

    public init?(_ bytes: [UInt8]) {
        guard (1...Self.maxBytes).contains(bytes.count), !bytes.contains(0) else { return nil }
        self.bytes = bytes
    }

    /// The key as text: itself when valid UTF-8, otherwise percent-encoded.
    public var display: String {
        if let text = String(validating: bytes, as: UTF8.self) { return text }
        return KeyText.percentEncoded(bytes) { $0 >= 0x21 && $0 < 0x7f && $0 != UInt8(ascii: "%") }
    }

    /// The key as one path segment of a URL (`…/entries/{key}`): every byte but RFC 3986's
    /// unreserved ones percent-encoded, so any key, UTF-8 or not, round-trips.
    public var pathSegment: String {
        KeyText.percentEncoded(bytes) { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"): true
            default: false
            }
        }
    }
}

enum KeyText {
    /// `bytes` with every byte `keep` refuses as `%XX`.
    static func percentEncoded(_ bytes: [UInt8], keeping keep: (UInt8) -> Bool) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            if keep(byte) {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0xf)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
