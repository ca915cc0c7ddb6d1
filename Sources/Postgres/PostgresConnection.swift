import CLibPQ
import Foundation
import Locking

/// One libpq connection, owning its `PGconn` (finished in `deinit`, nowhere else).
///
/// Not thread-safe: a connection is used by one thread at a time, which the pool guarantees.
public final class PostgresConnection: @unchecked Sendable {
    // @unchecked: the pool hands a connection to exactly one caller at a time; nothing
    // else touches `handle` or `prepared` concurrently.
    let handle: OpaquePointer
    /// Prepared statements by SQL, then by the parameter types they were prepared with. A
    /// parameter given as NULL is prepared untyped (PostgreSQL infers its type from the SQL),
    /// so a later call that sends a typed value there gets a statement of its own: sent in
    /// binary to the inferred type, a text value for a `$1::jsonb` was refused ("unsupported
    /// jsonb version number").
    private var prepared: [String: [[Oid]: String]] = [:]
    private var preparedCount = 0
    /// Behind a transaction pooler: statements go unnamed (see `SessionLimits.transactionPooler`).
    let unnamedStatements: Bool
    /// Longest wait for any answer; nil: none (see `SessionLimits.clientDeadline`).
    private let deadline: TimeInterval?
    /// Set when a call gave up waiting: the session's state is unknown, so it is never reused.
    private var abandoned = false
    /// True once a message of `largeMessage` bytes or more went either way. libpq grows its
    /// buffers to the largest message and never shrinks them, so a pool closes such a
    /// connection rather than keep megabytes per idle session.
    public private(set) var carriedLargeMessage = false
    public static let largeMessage = 1 << 20

    /// Connects with a `postgres://` URL or a key/value conninfo string.
    ///
    /// The string goes to `PQconnectdbParams` as `dbname` with `expand_dbname`, so libpq
    /// itself parses it (sslmode and every other option honoured); `overrides` are passed
    /// as separate keywords, never spliced into the string. `limits` come after the URL, so
    /// they hold whatever it says; `overrides` come last.
    public init(url: String, overrides: [String: String] = [:], limits: SessionLimits = SessionLimits()) throws {
        var pairs: [(String, String)] = limits.applicationName.isEmpty ? [] : [("application_name", limits.applicationName)]
        pairs.append(("dbname", url))
        pairs += limits.keywords(besides: Self.keywords(in: url))
        pairs += overrides.sorted(by: { $0.key < $1.key })
        let keys = pairs.map { strdup($0.0) } + [nil]
        let values = pairs.map { strdup($0.1) } + [nil]
        defer { (keys + values).forEach { free($0) } }
        LoopThreads.noteWait("a database connection")
        // The arrays above stay alive until PQconnectdbParams returns.
        let connection = keys.map { UnsafePointer($0) }.withUnsafeBufferPointer { keyBuffer in
            values.map { UnsafePointer($0) }.withUnsafeBufferPointer { valueBuffer in
                PQconnectdbParams(keyBuffer.baseAddress, valueBuffer.baseAddress, 1)
            }
        }
        guard let connection else { throw PostgresError(.connectionFailed, serverMessage: "out of memory") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection))
            PQfinish(connection)
            throw PostgresError(.connectionFailed, serverMessage: message)
        }
        handle = connection
        deadline = limits.clientDeadline
        unnamedStatements = limits.transactionPooler
        // Every call sends without blocking and waits with a deadline (see `awaitResult`).
        PQsetnonblocking(connection, 1)
        // libpq prints NOTICEs to stderr by default; they can quote data, so drop them.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit { PQfinish(handle) }

    /// Throws unless the server accepts writes: a session meant for the primary that reached
    /// a standby (a URL without `target_session_attrs=read-write`, or a pooler whose server
    /// was demoted) would serve stale reads for as long as it lived.
    public func requirePrimary() throws {
        if try query("SELECT pg_is_in_recovery() AS standby").first?.bool("standby") != false {
            abandoned = true
            throw PostgresError(.connectionFailed, serverMessage: "the server is a standby (in recovery)")
        }
    }

    /// The keywords a URL or conninfo string sets, as libpq itself reads them (empty when
    /// it cannot be parsed; connecting then reports why).
    public static func keywords(in url: String) -> [String: String] {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &error) else {
            if let error { PQfreemem(error) }
            return [:]
        }
        defer { PQconninfoFree(options) }
        var found: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { found[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        return found
    }

    /// True once libpq has seen the connection fail; such a connection is discarded.
    public var isBroken: Bool { abandoned || PQstatus(handle) != CONNECTION_OK }

    /// Idle and outside any transaction (libpq's own record, no round trip): the only state
    /// a pooled connection may be handed to the next caller in. One left inside a
    /// transaction would run the next caller's autocommit statements in it, uncommitted.
    public var isOutsideTransaction: Bool { PQtransactionStatus(handle) == PQTRANS_IDLE }

    /// Checks an idle connection without a round trip: PostgreSQL sends a FATAL message
    /// and closes the socket when it shuts down, so a readable idle socket means trouble.
    func looksHealthy() -> Bool {
        if isBroken { return false }
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, 0)
        if ready == 0 { return true }
        PQconsumeInput(handle)
        return false
    }

    /// Runs one statement with bind parameters, as a prepared statement cached per connection.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = []) throws -> PostgresResult {
        let name = unnamedStatements ? nil : try preparedName(for: sql, parameters)
        let sent = send(sql, named: name, parameters)
        let result = try check(awaitResult(sent: sent))
        if !carriedLargeMessage && result.holdsLargeValues(Self.largeMessage) { carriedLargeMessage = true }
        return result
    }

    /// Sends `sql` (as the prepared statement `name`, or unnamed when nil) with binary
    /// parameters and results, without waiting; libpq's status (1: sent).
    func send(_ sql: String, named name: String?, _ parameters: [PostgresValue]) -> Int32 {
        Self.withBinaryParameters(parameters) { count, values, lengths, formats in
            if lengths.reduce(0, { $0 + Int($1) }) >= Self.largeMessage { carriedLargeMessage = true }
            guard let name else {
                let types = parameters.map { Oid($0.typeOID) }
                return PQsendQueryParams(handle, sql, count, types, values, lengths, formats, 1)
            }
            return PQsendQueryPrepared(handle, name, count, values, lengths, formats, 1)
        }
    }

    /// Calls `body` with libpq's parameter arrays (binary format), valid only during the call.
    static func withBinaryParameters<T>(
        _ parameters: [PostgresValue],
        _ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?, [Int32], [Int32]) -> T
    ) -> T {
        let encoded = parameters.map(\.binary)
        // Callers keep each parameter far below 2 GiB (bodies are capped, write batches bounded
        // by bytes); clamping keeps even a mistake from trapping: the server would refuse it.
        let lengths = encoded.map { Int32(clamping: $0?.count ?? 0) }
        let formats = [Int32](repeating: 1, count: parameters.count)
        // Copies keep every parameter buffer valid for the whole call.
        let buffers: [UnsafeMutablePointer<CChar>?] = encoded.map { bytes in
            guard let bytes else { return nil }
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(bytes.count, 1))
            bytes.withUnsafeBufferPointer { source in
                source.withMemoryRebound(to: CChar.self) { buffer.update(from: $0.baseAddress!, count: bytes.count) }
            }
            return buffer
        }
        defer { buffers.forEach { $0?.deallocate() } }
        return buffers.map { UnsafePointer($0) }.withUnsafeBufferPointer { values in
            body(Int32(parameters.count), values.baseAddress, lengths, formats)
        }
    }

    /// Runs SQL text without parameters (several statements allowed), e.g. a migration file.
    public func execute(_ sql: String) throws {
        _ = try check(awaitResult(sent: PQsendQuery(handle, sql)))
    }

    /// Runs `body` in a transaction, committing when it returns and rolling back when it throws.
    public func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try execute("BEGIN")
        do {
            let value = try body(self)
            try execute("COMMIT")
            return value
        } catch {
            if !isBroken { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Prepares `sql` now (parameter types taken from `parameters`) and returns its name;
    /// a connection about to go non-blocking prepares its statements this way first.
    /// Behind a transaction pooler nothing is prepared: the name is nil.
    @discardableResult
    public func prepare(_ sql: String, like parameters: [PostgresValue]) throws -> String? {
        unnamedStatements ? nil : try preparedName(for: sql, parameters)
    }

    /// Whether `sql` may be sent from a non-blocking caller, and under which name (nil: unnamed).
    func sendableName(_ sql: String) -> String?? {
        if unnamedStatements { return .some(nil) }
        // The loop's statements are prepared once, `like` their calls: one variant each.
        return prepared[sql]?.values.first.map { .some($0) }
    }

    private func preparedName(for sql: String, _ parameters: [PostgresValue]) throws -> String {
        let types = parameters.map { Oid($0.typeOID) }
        if let name = prepared[sql]?[types] { return name }
        preparedCount += 1
        let name = "tc\(preparedCount)"
        _ = try check(awaitResult(sent: PQsendPrepare(handle, name, sql, Int32(types.count), types)))
        prepared[sql, default: [:]][types] = name
        return name
    }

    // MARK: Waiting with a deadline

    /// Flushes what was sent and collects the answer (the last result, as `PQexec` would),
    /// never waiting past the deadline. nil when libpq failed; `check` then reads its error.
    private func awaitResult(sent: Int32) throws -> OpaquePointer? {
        guard sent == 1 else { return nil }
        let limit = deadline.map { monotonicNow() + $0 }
        while true {
            let flushed = PQflush(handle)
            if flushed == 0 { break }
            if flushed < 0 { return nil }
            try waitForSocket(writable: true, until: limit)
            // The server may answer (an error) before taking all input: read it too.
            guard PQconsumeInput(handle) == 1 else { return nil }
        }
        var last: OpaquePointer?
        while true {
            while PQisBusy(handle) == 1 {
                try waitForSocket(writable: false, until: limit)
                guard PQconsumeInput(handle) == 1 else {
                    if let last { PQclear(last) }
                    return nil
                }
            }
            guard let next = PQgetResult(handle) else { return last }
            // An error result ends the statement; keep it over earlier ones.
            if let last { PQclear(last) }
            last = next
            // COPY hands the connection over to a data exchange; like PQexec, stop here.
            let status = PQresultStatus(next)
            if status == PGRES_COPY_IN || status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH { return last }
        }
    }

    private func waitForSocket(writable: Bool, until limit: TimeInterval?) throws {
        LoopThreads.noteWait("a database round trip")
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN) | (writable ? Int16(POLLOUT) : 0),
                                revents: 0)
        guard descriptor.fd >= 0 else { throw PostgresError(.connectionLost, serverMessage: "socket closed") }
        while true {
            let timeout: Int32
            if let limit {
                let left = limit - monotonicNow()
                if left <= 0 { throw abandon() }
                timeout = Int32(min(left * 1000, 60_000).rounded(.up))
            } else {
                timeout = -1
            }
            let ready = poll(&descriptor, 1, timeout)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR {
                throw PostgresError(.connectionLost, serverMessage: "poll failed: errno \(errno)")
            }
        }
    }

    /// Gives up on a session that did not answer in time: it is never used again, and the
    /// server is asked (in the background) to cancel what it may still be running.
    private func abandon() -> PostgresError {
        abandoned = true
        QueryCanceller.shared.cancel(handle)
        return PostgresError(.connectionLost, serverMessage: "no answer within \(deadline ?? 0) s; session abandoned")
    }

    func check(_ result: OpaquePointer?) throws -> PostgresResult {
        guard let result else {
            throw PostgresError(isBroken ? .connectionLost : .query,
                                serverMessage: String(cString: PQerrorMessage(handle)))
        }
        let owned = PostgresResult(handle: result)
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return owned
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { SQLState(String(cString: $0)) }
            let message = String(cString: PQresultErrorMessage(result))
            // A write refused as read-only: this session reached a standby (a failed-over
            // primary that came back demoted, or a multi-host URL's stale pick). Never reused,
            // so the next connect, with `target_session_attrs=read-write`, finds the primary.
            if state == SQLState.readOnlyTransaction { abandoned = true }
            let kind: PostgresError.Kind = isBroken ? .connectionLost : .query
            throw PostgresError(kind, sqlState: state, serverMessage: message)
        }
    }
}
