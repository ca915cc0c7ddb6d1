/// A cryptographic operation could not be done: a key of the wrong size, or OpenSSL without
/// the algorithm (a provider configuration) or out of memory. Nothing is sealed or derived
/// then, so nothing is stored.
public struct CryptoFailure: Error, CustomStringConvertible {
    public let description: String
}
