import CLibPQ
import Foundation
import Locking

/// One PostgreSQL connection in libpq's non-blocking mode, driven by an event loop: one
/// statement at a time, sent and answered without a thread waiting on the socket.
///
/// Connecting (which blocks in libpq) happens on a short-lived thread; the connection is
/// handed to the loop when ready. A statement that gets no answer within `timeout`, or a
/// broken socket, fails with `connectionLost` and drops the connection; a new one is tried
/// after `reconnectDelay`. Loop-confined, like the reactor's other users (not `Sendable`): the
/// connecting thread hands its result back through `Reactor.execute`, to a `LoopBound` self.
public final class LoopConnection {
    public typealias Completion = (Result<PostgresResult, PostgresError>) -> Void

    public struct Configuration: Sendable {
        public var url: String
        public var overrides: [String: String] = [:]
        /// Statements prepared right after connecting, with sample parameters for their types.
        public var statements: [(sql: String, like: [PostgresValue])]
        /// Longest wait for a statement's answer.
        public var timeout: TimeInterval = 2
        /// Pause after a failed connect or a dropped connection before trying again.
        public var reconnectDelay: TimeInterval = 0.5
        /// Server-side limits of the session (its own answers are bounded by `timeout`).
        public var limits = SessionLimits()
        /// Statements run once right after connecting (`LISTEN channel`, say).
        public var setup: [String] = []
        /// The session must reach a primary (see `PostgresConnection.requirePrimary`).
        public var requirePrimary = false

        public init(url: String, overrides: [String: String] = [:], statements: [(sql: String, like: [PostgresValue])],
                    timeout: TimeInterval = 2) {
            self.url = url
            self.overrides = overrides
            self.statements = statements
            self.timeout = timeout
        }
    }

    private struct Statement {
        let completion: Completion
        let deadline: UInt64
        var result: Result<PostgresResult, PostgresError>?
    }

    private enum State {
        case closed(retryAt: UInt64)
        case connecting
        case open(PostgresConnection)
    }

    private let configuration: Configuration
    /// Called on the reactor's thread with each notification (channel, payload) that arrives.
    public var onNotification: ((String, String) -> Void)?
    /// Called on the reactor's thread when the connection opens (true) or is dropped (false).
    public var onOpenChange: ((Bool) -> Void)?
    /// Weakly, through its handle (`ReactorHandle`: the loop itself held weakly would make
    /// every retain of it slow).
    private weak var reactorHandle: ReactorHandle?
    private var reactor: (any Reactor)? { reactorHandle?.reactor }
    private var state = State.closed(retryAt: 0)
    private var statement: Statement?
    private var flushing = false
    private var stopped = false
    /// The socket registered with the reactor. Kept apart from `PQsocket`, which answers -1
    /// once libpq has closed a broken socket itself: unwatching that would leave a stale
    /// registration behind for the next socket that reuses the descriptor number.
    private var watchedSocket: Int32 = -1

    public init(_ configuration: Configuration) {
        self.configuration = configuration
    }

    /// Binds the connection to `reactor` and starts connecting. Call on the reactor's thread.
    public func attach(to reactor: any Reactor) {
        reactorHandle = reactor.handle
        connectIfDue()
    }

    /// Connected, whether or not a statement is in flight.
    public var isOpen: Bool {
        if case .open = state { return true }
        return false
    }

    /// Connected with no statement in flight: `send` may be called.
    public var isIdle: Bool { isOpen && statement == nil }

    /// Starts a connect when closed and the reconnect delay has passed.
    public func connectIfDue() {
        guard !stopped, let reactor, case .closed(let retryAt) = state, reactor.nanoseconds >= retryAt else { return }
        state = .connecting
        let configuration = self.configuration
        let this = LoopBound(self, on: reactor)
        Thread.detachNewThread {
            let connection = Self.open(configuration)
            reactor.execute { this.value.connected(connection) }
        }
    }

    /// Sends one prepared statement (from the configuration) with binary parameters and
    /// results; `completion` runs on the reactor's thread. Requires `isIdle`.
    public func send(_ sql: String, _ parameters: [PostgresValue], completion: @escaping Completion) {
        precondition(isIdle, "send requires an idle connection")
        guard let reactor, case .open(let connection) = state, let name = connection.sendableName(sql) else {
            completion(.failure(PostgresError(.query, serverMessage: "statement not prepared")))
            return
        }
        let sent = connection.send(sql, named: name, parameters)
        guard sent == 1 else {
            drop(connection)
            completion(.failure(PostgresError(.connectionLost, serverMessage: String(cString: PQerrorMessage(connection.handle)))))
            return
        }
        let deadline = reactor.nanoseconds + UInt64(configuration.timeout * 1e9)
        statement = Statement(completion: completion, deadline: deadline)
        flushing = true
        flush(connection)
    }

    /// Fails a statement past its deadline (the server is stalled or the network gone).
    public func checkDeadline() {
        guard let reactor, let statement, reactor.nanoseconds > statement.deadline, case .open(let connection) = state
        else { return }
        // The server may still be running it: ask it to stop, without waiting for the answer.
        QueryCanceller.shared.cancel(connection.handle)
        fail(connection, PostgresError(.connectionLost, serverMessage: "no answer within \(configuration.timeout) s"))
    }

    /// Closes the connection for good (at shutdown, once the loop has stopped).
    public func close() {
        stopped = true
        if case .open(let connection) = state { drop(connection) }
    }

    // MARK: Connection life

    private static func open(_ configuration: Configuration) -> PostgresConnection? {
        do {
            let connection = try PostgresConnection(url: configuration.url, overrides: configuration.overrides,
                                                limits: configuration.limits)
            if configuration.requirePrimary { try connection.requirePrimary() }
            for statement in configuration.statements {
                _ = try connection.prepare(statement.sql, like: statement.like)
            }
            for sql in configuration.setup { try connection.execute(sql) }
            guard PQsetnonblocking(connection.handle, 1) == 0 else { return nil }
            return connection
        } catch {
            return nil
        }
    }

    private func connected(_ connection: PostgresConnection?) {
        guard reactor != nil, let connection, !stopped else {
            state = .closed(retryAt: (reactor?.nanoseconds ?? 0) + UInt64(configuration.reconnectDelay * 1e9))
            return
        }
        state = .open(connection)
        watchedSocket = PQsocket(connection.handle)
        watch(connection, writable: false)
        onOpenChange?(true)
    }

    private func watch(_ connection: PostgresConnection, writable: Bool) {
        reactor?.watch(watchedSocket, writable: writable) { [unowned self] in onSocketEvent(connection) }
    }

    /// Forgets the connection (closing its socket) and schedules a reconnect.
    private func drop(_ connection: PostgresConnection) {
        reactor?.unwatch(watchedSocket)
        watchedSocket = -1
        state = .closed(retryAt: (reactor?.nanoseconds ?? 0) + UInt64(configuration.reconnectDelay * 1e9))
        flushing = false
        onOpenChange?(false)
    }

    /// Hands every notification libpq has read to `onNotification`.
    private func deliverNotifications(_ connection: PostgresConnection) {
        while let notification = PQnotifies(connection.handle) {
            let channel = String(cString: notification.pointee.relname)
            let payload = String(cString: notification.pointee.extra)
            PQfreemem(notification)
            onNotification?(channel, payload)
        }
    }

    private func fail(_ connection: PostgresConnection, _ error: PostgresError) {
        drop(connection)
        finish(.failure(error))
    }

    private func finish(_ result: Result<PostgresResult, PostgresError>) {
        guard let statement else { return }
        self.statement = nil
        statement.completion(result)
    }

    // MARK: Socket events

    private func flush(_ connection: PostgresConnection) {
        switch PQflush(connection.handle) {
        case 0:
            if flushing {
                flushing = false
                watch(connection, writable: false)
            }
        case 1:
            watch(connection, writable: true)
        default:
            fail(connection, PostgresError(.connectionLost, serverMessage: String(cString: PQerrorMessage(connection.handle))))
        }
    }

    private func onSocketEvent(_ connection: PostgresConnection) {
        guard case .open(let current) = state, current === connection else { return }
        if flushing {
            flush(connection)
            guard isOpen else { return }
        }
        // Idle input is a notice or the server saying goodbye; either way it is consumed here.
        guard PQconsumeInput(connection.handle) == 1, !connection.isBroken else {
            let error = PostgresError(.connectionLost, serverMessage: String(cString: PQerrorMessage(connection.handle)))
            fail(connection, error)
            return
        }
        deliverNotifications(connection)
        guard statement != nil else { return }
        while PQisBusy(connection.handle) == 0 {
            guard let next = PQgetResult(connection.handle) else {
                // An error can end the session too (an administrator's terminate, say).
                if connection.isBroken { drop(connection) }
                finish(statement?.result ?? .failure(PostgresError(.decoding, serverMessage: "no result")))
                return
            }
            // The first result is the statement's; later ones (none expected) are cleared.
            guard statement?.result == nil else {
                PQclear(next)
                continue
            }
            do {
                statement?.result = .success(try connection.check(next))
            } catch let error as PostgresError {
                statement?.result = .failure(error)
            } catch {
                statement?.result = .failure(PostgresError(.query, serverMessage: "\(error)"))
            }
        }
    }
}
