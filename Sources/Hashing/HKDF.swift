import CCrypto
import Foundation

/// HKDF-SHA256 (RFC 5869) through OpenSSL's EVP_KDF: keys derived from one secret, each bound
/// to its salt and context.
public enum HKDF {
    private nonisolated(unsafe) static let kdf: OpaquePointer = {
        guard let fetched = EVP_KDF_fetch(nil, "HKDF", nil) else { fatalError("OpenSSL has no HKDF") }
        return fetched
    }()

    /// The parameter names, as C strings that live as long as the process: an `OSSL_PARAM`
    /// keeps the pointer to its name (a Swift string passed in would dangle after the call).
    private nonisolated(unsafe) static let names: [UnsafeMutablePointer<CChar>] = [
        OSSL_KDF_PARAM_DIGEST, OSSL_KDF_PARAM_KEY, OSSL_KDF_PARAM_SALT, OSSL_KDF_PARAM_INFO,
    ].map { name in
        guard let copy = strdup(name) else { fatalError("strdup failed") }
        return copy
    }

    /// `count` bytes derived from `secret` with `salt` and `info`.
    public static func sha256(secret: [UInt8], salt: [UInt8], info: [UInt8], count: Int) -> [UInt8] {
        guard let context = EVP_KDF_CTX_new(kdf) else { fatalError("EVP_KDF_CTX_new failed") }
        defer { EVP_KDF_CTX_free(context) }
        var secret = secret, salt = salt, info = info
        var digest = Array("SHA256".utf8CString)
        var out = [UInt8](repeating: 0, count: count)
        let ok: Int32 = digest.withUnsafeMutableBufferPointer { digestName in
            secret.withUnsafeMutableBytes { secretBytes in
                salt.withUnsafeMutableBytes { saltBytes in
                    info.withUnsafeMutableBytes { infoBytes in
                        var parameters = [
                            OSSL_PARAM_construct_utf8_string(Self.names[0], digestName.baseAddress, 0),
                            OSSL_PARAM_construct_octet_string(Self.names[1], secretBytes.baseAddress, secretBytes.count),
                            OSSL_PARAM_construct_octet_string(Self.names[2], saltBytes.baseAddress, saltBytes.count),
                            OSSL_PARAM_construct_octet_string(Self.names[3], infoBytes.baseAddress, infoBytes.count),
                            OSSL_PARAM_construct_end(),
                        ]
                        return out.withUnsafeMutableBufferPointer { output in
                            EVP_KDF_derive(context, output.baseAddress, count, &parameters)
                        }
                    }
                }
            }
        }
        // Derivation with valid parameters fails only by allocation inside OpenSSL.
        precondition(ok == 1, "HKDF-SHA256 failed")
        return out
    }
}
