/// Size limits the parser enforces while bytes arrive.
public struct HTTPParserLimits: Sendable {
    /// The request line, without its CRLF (past it: 414).
    public var maxRequestLineBytes = 8 * 1024
    /// The whole header section including the request line (past it: 431).
    public var maxHeaderBytes = 32 * 1024
    public var maxHeaderCount = 100
    /// The body, declared or received (past it: 413).
    public var maxBodyBytes = 8 * 1024 * 1024

    public init() {}
}

/// Why a request could not be parsed; every case ends the connection after its response.
public enum HTTPParseError: Error, Equatable, Sendable {
    case badRequest(String)
    case requestLineTooLong
    case headersTooLarge
    case bodyTooLarge
    case unsupportedVersion
    case unsupportedTransferCoding
    case expectationFailed

    public var status: Int {
        switch self {
        case .badRequest: 400
        case .requestLineTooLong: 414
        case .headersTooLarge: 431
        case .bodyTooLarge: 413
        case .unsupportedVersion: 505
        case .unsupportedTransferCoding: 501
        case .expectationFailed: 417
        }
    }

    public var detail: String {
        switch self {
        case .badRequest(let why): why
        case .requestLineTooLong: "The request line is longer than the server accepts."
        case .headersTooLarge: "The header section is larger than the server accepts."
        case .bodyTooLarge: "The request body is larger than the server accepts."
        case .unsupportedVersion: "Only HTTP/1.0 and HTTP/1.1 are supported."
        case .unsupportedTransferCoding: "Only the chunked transfer coding is supported."
        case .expectationFailed: "Only the 100-continue expectation is supported."
        }
    }
}
