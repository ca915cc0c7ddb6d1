/// SQLSTATE codes the layers above react to.
public struct SQLState: Hashable, Sendable, CustomStringConvertible {
    public let code: String
    public init(_ code: String) { self.code = code }
    public var description: String { code }

    public static let uniqueViolation = SQLState("23505")
    public static let foreignKeyViolation = SQLState("23503")
    public static let checkViolation = SQLState("23514")
    public static let syntaxError = SQLState("42601")
    public static let undefinedTable = SQLState("42P01")
    public static let serializationFailure = SQLState("40001")
    public static let deadlockDetected = SQLState("40P01")
    public static let queryCanceled = SQLState("57014")
    /// `lock_timeout` passed.
    public static let lockNotAvailable = SQLState("55P03")
    /// `idle_in_transaction_session_timeout` passed.
    public static let idleInTransactionTimeout = SQLState("25P03")
    public static let adminShutdown = SQLState("57P01")
    public static let cannotConnectNow = SQLState("57P03")
    /// A write sent to a standby (hot standby sessions are read-only).
    public static let readOnlyTransaction = SQLState("25006")
    public static let insufficientResources = SQLState("53000")
    public static let diskFull = SQLState("53100")
    public static let raiseException = SQLState("P0001")
    /// TeamCache's own (migration 0013): a plain body written to an encrypted namespace.
    public static let plainInEncryptedNamespace = SQLState("TCE01")
}

/// A failure talking to PostgreSQL.
///
/// `description` is generic and safe to show; `serverMessage` is PostgreSQL's own text,
/// which can quote row data, so it belongs in debug logs only.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Could not open a connection (server down, refused, auth failed).
        case connectionFailed = "connection_failed"
        /// The connection broke while in use.
        case connectionLost = "connection_lost"
        /// No pooled connection became free before the acquire deadline.
        case poolBusy = "pool_busy"
        /// The server rejected a statement (see `sqlState`).
        case query = "query"
        /// A result did not have the shape the caller expected.
        case decoding = "decoding"
    }

    public let kind: Kind
    public let sqlState: SQLState?
    public let serverMessage: String

    public init(_ kind: Kind, sqlState: SQLState? = nil, serverMessage: String = "") {
        self.kind = kind
        self.sqlState = sqlState
        self.serverMessage = serverMessage
    }

    /// True when retrying later can succeed and the caller should answer "unavailable".
    public var isUnavailable: Bool {
        switch kind {
        case .connectionFailed, .connectionLost, .poolBusy: return true
        case .decoding: return false
        case .query:
            guard let state = sqlState else { return false }
            // A statement or lock limit passed: the database is too slow or too contended
            // right now, and the same request can succeed later.
            // A standby refusing a write: the primary is moving (failover); the session is
            // dropped and the next one finds the new primary.
            return [.adminShutdown, .cannotConnectNow, .queryCanceled, .lockNotAvailable,
                    .idleInTransactionTimeout, .readOnlyTransaction].contains(state)
                || state.code.hasPrefix("08")
        }
    }

    /// A deadlock or serialization failure: the transaction was rolled back whole and
    /// running it again can succeed.
    public var isRetryableConflict: Bool {
        kind == .query && (sqlState == .deadlockDetected || sqlState == .serializationFailure)
    }

    public var description: String {
        if let state = sqlState { return "PostgreSQL \(kind.rawValue) error, SQLSTATE \(state.code)" }
        return "PostgreSQL \(kind.rawValue) error"
    }
}
