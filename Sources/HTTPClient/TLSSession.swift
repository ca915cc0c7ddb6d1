import CSSL
import Glibc

/// One TLS client session over a connected non-blocking socket: the handshake, reads and
/// writes, each of which may want the socket readable or writable before it can go on.
/// Owns its `SSL` (freed in deinit); the socket stays its connection's to close.
final class TLSSession {
    enum Step {
        case done(Int)
        /// Try again once the socket is readable (or writable, with `writable`).
        case wouldBlock(writable: Bool)
        /// The peer closed the TLS stream.
        case closed
        case failed(HTTPClientError)
    }

    private let ssl: OpaquePointer
    private let origin: Origin

    init(fd: Int32, origin: Origin, context: TLSContext) throws(HTTPClientError) {
        guard let ssl = SSL_new(context.context) else {
            throw HTTPClientError(.tls, "could not start a TLS session: \(TLSContext.takeErrors())")
        }
        self.ssl = ssl
        self.origin = origin
        SSL_set_fd(ssl, fd)
        SSL_set_connect_state(ssl)
        // The certificate must name the host we meant, by DNS name or by IP address.
        let named: Int32
        if origin.hostIsAddress {
            named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), origin.host)
        } else {
            _ = cssl_set_server_name(ssl, origin.host)  // SNI: only for names (RFC 6066 §3)
            named = SSL_set1_host(ssl, origin.host)
        }
        guard named == 1 else { throw HTTPClientError(.tls, "could not set the expected host name") }
    }

    deinit { SSL_free(ssl) }

    /// Bytes decrypted and not yet read (epoll will not report them).
    var hasBuffered: Bool { SSL_pending(ssl) > 0 }

    func handshake() -> Step {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done(0) }
        return step(after: result, handshaking: true)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Step {
        ERR_clear_error()
        var count = 0
        let result = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count)
        if result == 1 { return .done(count) }
        return step(after: result, handshaking: false)
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> Step {
        ERR_clear_error()
        var count = 0
        let result = SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &count)
        if result == 1 { return .done(count) }
        return step(after: result, handshaking: false)
    }

    private func step(after result: Int32, handshaking: Bool) -> Step {
        let code = SSL_get_error(ssl, result)
        switch code {
        case SSL_ERROR_WANT_READ: return .wouldBlock(writable: false)
        case SSL_ERROR_WANT_WRITE: return .wouldBlock(writable: true)
        case SSL_ERROR_ZERO_RETURN: return handshaking ? .failed(failure(code)) : .closed
        case SSL_ERROR_SYSCALL where !handshaking && errno == 0: return .closed
        default: return .failed(failure(code))
        }
    }

    /// Says why: a certificate that failed verification by its reason, else OpenSSL's errors.
    private func failure(_ code: Int32) -> HTTPClientError {
        let verification = SSL_get_verify_result(ssl)
        if verification != X509_V_OK {
            let reason = String(cString: X509_verify_cert_error_string(verification))
            return HTTPClientError(.tls, "the certificate of \(origin.host) was not trusted: \(reason)")
        }
        if code == SSL_ERROR_SYSCALL {
            let number = errno
            return HTTPClientError(.closed, number == 0 ? "the connection closed during TLS"
                                                         : "TLS I/O failed (errno \(number))")
        }
        return HTTPClientError(.tls, "TLS with \(origin.host) failed: \(TLSContext.takeErrors())")
    }
}
