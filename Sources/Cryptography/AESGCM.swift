import CCrypto
import Foundation

/// AES-256-GCM through OpenSSL's EVP interface: authenticated encryption with a random 96-bit
/// nonce per message. A sealed message is `nonce ‖ ciphertext ‖ tag`; opening checks the tag
/// over the ciphertext and the associated data, so a flipped byte, a truncation or a message
/// moved to another context (other associated data) does not open.
public enum AESGCM {
    public static let keyByteCount = 32
    public static let nonceByteCount = 12
    public static let tagByteCount = 16
    /// What sealing adds to a message.
    public static let overhead = nonceByteCount + tagByteCount

    /// The cipher, fetched once (as SHA256's digest is: OpenSSL 3 looks an implementation up
    /// again on every use otherwise); nil when this OpenSSL offers none. An `EVP_CIPHER` is
    /// immutable and shared between threads.
    private nonisolated(unsafe) static let cipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)

    /// `plaintext` sealed under `key` (32 bytes) with a fresh random nonce, bound to `aad`.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], aad: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        guard key.count == keyByteCount else { throw CryptoFailure(description: "AES-256 needs a 32-byte key") }
        guard let cipher else { throw CryptoFailure(description: "OpenSSL offers no AES-256-GCM") }
        guard plaintext.count < Int(Int32.max) - tagByteCount, aad.count < Int(Int32.max) else {
            throw CryptoFailure(description: "message too long")
        }
        let nonce = Bytes.random(count: nonceByteCount)
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoFailure(description: "EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }
        var sealed = nonce + [UInt8](repeating: 0, count: plaintext.count + tagByteCount)
        var ok = EVP_EncryptInit_ex2(context, cipher, key, nonce, nil) == 1
        var written: Int32 = 0
        ok = ok && (aad.isEmpty || EVP_EncryptUpdate(context, nil, &written, aad, Int32(aad.count)) == 1)
        sealed.withUnsafeMutableBufferPointer { out in
            guard let start = out.baseAddress else { return ok = false }  // never: it holds the nonce
            let body = start + nonceByteCount
            var length: Int32 = 0
            ok = ok && (plaintext.isEmpty || EVP_EncryptUpdate(context, body, &length, plaintext, Int32(plaintext.count)) == 1)
            var final: Int32 = 0
            ok = ok && EVP_EncryptFinal_ex(context, body + Int(length), &final) == 1
            ok = ok && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagByteCount),
                                           body + plaintext.count) == 1
        }
        guard ok else { throw CryptoFailure(description: "AES-256-GCM encryption failed") }
        return sealed
    }

    /// The plaintext of `sealed`, or nil when it does not open: wrong key, other associated
    /// data, or any byte changed. Total: any input, of any length, is answered.
    public static func open(_ sealed: ArraySlice<UInt8>, key: [UInt8], aad: [UInt8]) -> [UInt8]? {
        guard let cipher, key.count == keyByteCount, sealed.count >= overhead, sealed.count - overhead < Int(Int32.max),
              aad.count < Int(Int32.max) else {
            return nil
        }
        guard let context = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(context) }
        let bodyCount = sealed.count - overhead
        var plaintext = [UInt8](repeating: 0, count: bodyCount)
        let opened: Bool = sealed.withUnsafeBufferPointer { input in
            guard let base = input.baseAddress else { return false }
            var written: Int32 = 0
            guard EVP_DecryptInit_ex2(context, cipher, key, base, nil) == 1,
                  aad.isEmpty || EVP_DecryptUpdate(context, nil, &written, aad, Int32(aad.count)) == 1 else { return false }
            return plaintext.withUnsafeMutableBufferPointer { out in
                var length: Int32 = 0
                if bodyCount > 0 {
                    guard EVP_DecryptUpdate(context, out.baseAddress, &length, base + nonceByteCount,
                                            Int32(bodyCount)) == 1 else { return false }
                }
                // The expected tag, read in place (EVP_CTRL_GCM_SET_TAG takes a mutable pointer
                // but only reads it).
                let tag = UnsafeMutableRawPointer(mutating: base + nonceByteCount + bodyCount)
                guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagByteCount), tag) == 1 else {
                    return false
                }
                var final: Int32 = 0
                // GCM writes nothing at the end; an empty plaintext still needs somewhere to point.
                var scratch: UInt8 = 0
                if let start = out.baseAddress, bodyCount > 0 {
                    return EVP_DecryptFinal_ex(context, start + Int(length), &final) == 1
                }
                return EVP_DecryptFinal_ex(context, &scratch, &final) == 1
            }
        }
        return opened ? plaintext : nil
    }

    public static func open(_ sealed: [UInt8], key: [UInt8], aad: [UInt8]) -> [UInt8]? {
        open(sealed[...], key: key, aad: aad)
    }
}
