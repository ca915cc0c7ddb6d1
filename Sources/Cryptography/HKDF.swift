import CCrypto
import Foundation

/// HKDF-SHA256 (RFC 5869) through OpenSSL's EVP_KDF: keys derived from one secret, each bound
/// to its salt and context.
public enum HKDF {
    /// nil when this OpenSSL offers no HKDF (then nothing can be derived, and `sha256` throws).
    private nonisolated(unsafe) static let kdf: OpaquePointer? = EVP_KDF_fetch(nil, "HKDF", nil)

    /// The parameter names (OpenSSL's OSSL_KDF_PARAM_DIGEST, _KEY, _SALT, _INFO) as C strings
    /// that live as long as the process: an `OSSL_PARAM` keeps the pointer to its name, and a
    /// Swift string passed in would dangle after the call.
    private static let digestName: StaticString = "digest"
    private static let keyName: StaticString = "key"
    private static let saltName: StaticString = "salt"
    private static let infoName: StaticString = "info"

    private static func cName(_ name: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// `count` bytes derived from `secret` with `salt` and `info`.
    public static func sha256(secret: [UInt8], salt: [UInt8], info: [UInt8], count: Int) throws(CryptoFailure) -> [UInt8] {
        guard let kdf, let context = EVP_KDF_CTX_new(kdf) else {
            throw CryptoFailure(description: "OpenSSL offers no HKDF")
        }
        defer { EVP_KDF_CTX_free(context) }
        var secret = secret, salt = salt, info = info
        var digest = Array("SHA256".utf8CString)
        var out = [UInt8](repeating: 0, count: count)
        let ok: Int32 = digest.withUnsafeMutableBufferPointer { digestValue in
            secret.withUnsafeMutableBytes { secretBytes in
                salt.withUnsafeMutableBytes { saltBytes in
                    info.withUnsafeMutableBytes { infoBytes in
                        var parameters = [
                            OSSL_PARAM_construct_utf8_string(cName(digestName), digestValue.baseAddress, 0),
                            OSSL_PARAM_construct_octet_string(cName(keyName), secretBytes.baseAddress, secretBytes.count),
                            OSSL_PARAM_construct_octet_string(cName(saltName), saltBytes.baseAddress, saltBytes.count),
                            OSSL_PARAM_construct_octet_string(cName(infoName), infoBytes.baseAddress, infoBytes.count),
                            OSSL_PARAM_construct_end(),
                        ]
                        return out.withUnsafeMutableBufferPointer { output in
                            EVP_KDF_derive(context, output.baseAddress, count, &parameters)
                        }
                    }
                }
            }
        }
        guard ok == 1 else { throw CryptoFailure(description: "HKDF-SHA256 failed") }
        return out
    }
}
