import Foundation

/// How long a database session may wait, on the server and on the client.
///
/// Server side, PostgreSQL itself ends what runs too long (`statement_timeout`), waits
/// too long for a lock (`lock_timeout`) or sits idle inside a transaction
/// (`idle_in_transaction_session_timeout`): the backend cancels its own work and drops its
/// locks, whatever happened to the client. Client side, no call waits past `clientDeadline`
/// for an answer (a server frozen or partitioned away never answers at all); the
/// connection is then abandoned, and a cancel request is sent in the background.
public struct SessionLimits: Sendable, Equatable {
    /// 0 disables each limit (migrations: an index build may take long).
    public var statementTimeout: TimeInterval = 4
    public var lockTimeout: TimeInterval = 2
    public var idleInTransactionTimeout: TimeInterval = 10
    /// libpq's minimum is 2 s.
    public var connectTimeout: TimeInterval = 2
    /// TCP only: unacknowledged data or silent peers end the connection after this long.
    public var tcpUserTimeout: TimeInterval = 10
    public var keepalivesIdle: Int = 5
    public var keepalivesInterval: Int = 2
    public var keepalivesCount: Int = 3
    /// The session reaches PostgreSQL through a transaction-pooling PgBouncer: each
    /// transaction (each autocommit statement) may meet another server connection. So no
    /// named prepared statements (a name prepared on one server connection is unknown on
    /// the next; every statement goes as an unnamed Parse/Bind/Execute), and no `options`
    /// startup parameter (PgBouncer refuses it): the server-side limits above must then be
    /// set on the role or database (`ALTER ROLE … SET statement_timeout`), which the
    /// service checks at start. The client-side deadline holds either way.
    public var transactionPooler = false
    /// The name each session shows in `pg_stat_activity` (`application_name`; empty: none).
    /// Not a limit, but carried with them: every session is opened with both.
    public var applicationName = ""

    public init() {}

    /// No statement or lock limit; the connect and TCP limits stay.
    public static var unbounded: SessionLimits { SessionLimits().withoutStatementLimits }

    /// These limits without a statement, lock or idle-transaction limit (a migration may build
    /// an index for minutes); the connect and TCP limits and the name stay.
    public var withoutStatementLimits: SessionLimits {
        var limits = self
        limits.statementTimeout = 0
        limits.lockTimeout = 0
        limits.idleInTransactionTimeout = 0
        return limits
    }

    /// How long a client call waits for an answer: past the server's own statement limit,
    /// so a live server always answers first (with its own error). nil: no limit.
    public var clientDeadline: TimeInterval? {
        statementTimeout > 0 ? statementTimeout + 1 : nil
    }

    /// libpq keywords, given those the URL sets already (`url`): a setting the operator
    /// put in the URL wins, and `options` of the URL are kept, with the server settings
    /// appended. `options` carries them to the backend at start-up, so they hold from the
    /// first statement without a round trip of their own.
    func keywords(besides url: [String: String]) -> [(String, String)] {
        let settings = [
            ("statement_timeout", statementTimeout), ("lock_timeout", lockTimeout),
            ("idle_in_transaction_session_timeout", idleInTransactionTimeout),
        ].map { "-c \($0.0)=\(Self.milliseconds($0.1))" }.joined(separator: " ")
            // The server's side of the TCP session too: a client that vanished (or stopped
            // reading) is noticed by the backend, so a LISTEN session left behind does not
            // hold PostgreSQL's notification queue back for every writer (ignored on a socket).
            + " -c tcp_keepalives_idle=\(keepalivesIdle) -c tcp_keepalives_interval=\(keepalivesInterval)"
            + " -c tcp_keepalives_count=\(keepalivesCount) -c tcp_user_timeout=\(Self.milliseconds(tcpUserTimeout))"
            // Every statement here is a short index walk: JIT compiling one (hundreds of
            // milliseconds, set off by a misestimated plan) never pays back.
            + " -c jit=off"
        let ours = [
            ("connect_timeout", String(max(2, Int(connectTimeout.rounded(.up))))),
            ("keepalives", "1"),
            ("keepalives_idle", String(keepalivesIdle)),
            ("keepalives_interval", String(keepalivesInterval)),
            ("keepalives_count", String(keepalivesCount)),
            ("tcp_user_timeout", String(Self.milliseconds(tcpUserTimeout))),
        ].filter { url[$0.0] == nil }
        if transactionPooler { return ours }
        let options = url["options"].map { $0.isEmpty ? settings : $0 + " " + settings } ?? settings
        return ours + [("options", options)]
    }

    private static func milliseconds(_ seconds: TimeInterval) -> Int {
        // Configuration bounds these to hours; clamp anyway so no value can trap here.
        Int(min(max(seconds, 0), 86_400 * 7) * 1000)
    }
}
