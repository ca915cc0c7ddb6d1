import CSSL

/// An OpenSSL client context: TLS 1.2 or later, peer verification on, trusting the system's
/// CA store or one CA file. Owns its `SSL_CTX`; sessions made from it share its trust store.
public final class TLSContext: @unchecked Sendable {
    // @unchecked: an SSL_CTX is safe to share between threads once configured (OpenSSL
    // locks its internal state); it is configured in init and never changed after.
    let context: OpaquePointer
    /// The CA file trusted instead of the system store, if any.
    public let caFile: String?

    /// Builds a verifying context; throws `HTTPClientError(.tls, …)` when the CA file (or
    /// the system store) cannot be loaded.
    public init(caFile: String? = nil) throws(HTTPClientError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw HTTPClientError(.tls, "could not create a TLS context: \(TLSContext.takeErrors())")
        }
        self.context = context
        self.caFile = caFile
        guard cssl_set_min_tls12(context) == 1 else {
            throw HTTPClientError(.tls, "could not require TLS 1.2: \(TLSContext.takeErrors())")
        }
        _ = cssl_set_modes(context)
        _ = cssl_ignore_unexpected_eof(context)
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        let loaded = caFile.map { SSL_CTX_load_verify_locations(context, $0, nil) } ?? SSL_CTX_set_default_verify_paths(context)
        guard loaded == 1 else {
            throw HTTPClientError(.tls, "could not load \(caFile ?? "the system CA store"): \(TLSContext.takeErrors())")
        }
        // HTTP/1.1 only: say so, so a server that speaks both does not pick h2.
        let alpn: [UInt8] = [8] + Array("http/1.1".utf8)
        _ = SSL_CTX_set_alpn_protos(context, alpn, UInt32(alpn.count))
    }

    deinit { SSL_CTX_free(context) }

    /// The calling thread's OpenSSL error queue as text, emptied.
    static func takeErrors() -> String {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return messages.isEmpty ? "no detail" : messages.joined(separator: "; ")
    }
}
