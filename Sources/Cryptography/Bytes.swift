import CCrypto

/// Byte helpers shared by the layers above: hex, secure randomness and constant-time equality.
public enum Bytes {
    @usableFromInline static let hexDigits = Array("0123456789abcdef".utf8)

    /// Lowercase hex of `bytes`. `@inlinable`, so callers in other modules get it specialized
    /// for their sequence: unspecialized, a PUT's 16-byte ETag cost ~12,000 instructions
    /// (every byte through the generic `Sequence` witnesses; callgrind, bench/put-instructions.sh).
    @inlinable
    public static func hex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        var out = [UInt8]()
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(hexDigits[Int(byte >> 4)])
            out.append(hexDigits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of hex text (either case); nil for anything else, an odd length included.
    public static func fromHex(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x61...0x66: digit - 0x61 + 10
            case 0x41...0x46: digit - 0x41 + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    /// `count` bytes from OpenSSL's CSPRNG.
    public static func random(count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        precondition(ok == 1, "RAND_bytes failed")
        return out
    }

    /// Equality whose running time does not depend on where the inputs differ (for secrets).
    public static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return lhs.withUnsafeBytes { l in
            rhs.withUnsafeBytes { r in CRYPTO_memcmp(l.baseAddress, r.baseAddress, lhs.count) == 0 }
        }
    }
}
