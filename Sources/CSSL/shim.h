#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

// Macros Swift cannot import, as functions.
static inline int cssl_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}
static inline long cssl_set_modes(SSL_CTX *ctx) {
    // Partial writes and a moving buffer suit a non-blocking socket fed from a queue;
    // released buffers keep an idle or slow connection from holding 32 KiB of them.
    return SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                                 | SSL_MODE_RELEASE_BUFFERS);
}
static inline unsigned long cssl_ignore_unexpected_eof(SSL_CTX *ctx) {
    // A peer that closes without close_notify ends the stream (as curl and browsers read it):
    // only close-delimited bodies depend on it, and those are rare for APIs.
    return (unsigned long)SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
}
static inline int cssl_set_server_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
