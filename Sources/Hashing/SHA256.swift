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
