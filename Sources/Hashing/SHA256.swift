import CCrypto
import Foundation

/// SHA-256 through OpenSSL's one-shot EVP digest.
public enum SHA256 {
    public static let byteCount = 32

    /// The digest of `bytes`.
    public static func hash<Input: ContiguousBytes>(_ bytes: Input) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        bytes.withUnsafeBytes { input in
            digest.withUnsafeMutableBytes { out in
                // EVP_Digest only fails on allocation failure inside OpenSSL; that is not recoverable.
                let ok = EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, EVP_sha256(), nil)
                precondition(ok == 1, "EVP_Digest(sha256) failed")
            }
        }
        return digest
    }

    /// The digest of the UTF-8 bytes of `text`.
    public static func hash(_ text: String) -> [UInt8] {
        hash(Array(text.utf8))
    }
}

/// An incremental SHA-256, for hashing a sequence of pieces without concatenating them.
public final class SHA256Hasher {
    private let context: OpaquePointer

    public init() {
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        self.context = context
        precondition(EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1, "EVP_DigestInit_ex failed")
    }

    deinit { EVP_MD_CTX_free(context) }

    public func update<Input: ContiguousBytes>(_ bytes: Input) {
        bytes.withUnsafeBytes { input in
            precondition(EVP_DigestUpdate(context, input.baseAddress, input.count) == 1, "EVP_DigestUpdate failed")
        }
    }

    public func finish() -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: SHA256.byteCount)
        var length: UInt32 = 0
        digest.withUnsafeMutableBytes { out in
            let base = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
            precondition(EVP_DigestFinal_ex(context, base, &length) == 1, "EVP_DigestFinal_ex failed")
        }
        return digest
    }
}
