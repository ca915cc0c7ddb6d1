import CCrypto
import Foundation

/// SHA-256 through OpenSSL's one-shot EVP digest.
public enum SHA256 {
    public static let byteCount = 32

    /// The implementation, fetched once. Passing `EVP_sha256()` instead makes OpenSSL 3
    /// look the provider's implementation up again on every digest, which costs more than
    /// hashing a token. An `EVP_MD` is immutable and safe to share between threads.
    private nonisolated(unsafe) static let algorithm: OpaquePointer = {
        guard let fetched = EVP_MD_fetch(nil, "SHA256", nil) else { fatalError("OpenSSL has no SHA256") }
        return fetched
    }()

    /// The digest of `bytes`.
    public static func hash<Input: ContiguousBytes>(_ bytes: Input) -> [UInt8] {
        bytes.withUnsafeBytes { hash(raw: $0) }
    }

    /// The digest of the UTF-8 bytes of `text`, without copying them out first.
    public static func hash<Text: StringProtocol>(_ text: Text) -> [UInt8] {
        if let digest = text.utf8.withContiguousStorageIfAvailable({ hash(raw: UnsafeRawBufferPointer($0)) }) {
            return digest
        }
        return hash(Array(text.utf8))
    }

    private static func hash(raw input: UnsafeRawBufferPointer) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: byteCount) { out, initialized in
            var length: UInt32 = 0
            // EVP_Digest only fails on allocation failure inside OpenSSL; that is not recoverable.
            let ok = EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, algorithm, nil)
            precondition(ok == 1 && length == UInt32(byteCount), "EVP_Digest(sha256) failed")
            initialized = byteCount
        }
    }
}
