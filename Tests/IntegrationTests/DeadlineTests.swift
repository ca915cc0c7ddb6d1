import Locking
import Foundation
import Glibc
import Postgres
import Testing
import TeamCache
import TestSupport

/// Nothing waits without a deadline: a table lock held by another session, and a
/// PostgreSQL that stops answering without closing its sockets (SIGSTOP), each give 503
/// within the documented deadlines, and the service recovers by itself.
@Suite(.serialized) struct DeadlineTests {
    /// Short limits, so the test runs in seconds; the defaults are the same shape, longer.
    static func tune(_ configuration: inout Configuration, url: String) {
        configuration.databaseURL = url
        configuration.sessionLimits.statementTimeout = 1.5
        configuration.sessionLimits.lockTimeout = 0.5
        configuration.readTimeout = 1
        configuration.acquireTimeout = 0.5
        configuration.http.requestTimeout = 3
        configuration.tokenCacheTTL = 0
    }

    /// One timed request on a new connection; a negative status when no answer came back
    /// (-1 closed, -2 timed out, -3 could not connect, -4 malformed).
    static func timed(_ service: TestService, _ method: String, _ path: String, token: String?,
                      body: [UInt8] = []) -> (status: Int, seconds: Double) {
        let started = Date()
        let status: Int
        do {
            status = try service.request(method, path, token: token, body: body).status
        } catch RawClient.Failure.closed {
            status = -1
        } catch RawClient.Failure.timeout {
            status = -2
        } catch RawClient.Failure.connect {
            status = -3
        } catch {
            status = -4
        }
        return (status, Date().timeIntervalSince(started))
    }

    @Test func aHeldTableLockGives503WithinTheDeadlineAndLeavesNoOrphanedBackend() throws {
        let database = try PrivateCluster("tc-lock")
        defer { database.remove() }
        let service = try TestService { Self.tune(&$0, url: database.url) }
        defer { service.stop() }
        let token = try service.token([.read, .write, .admin], namespaces: "*")
        let path = entryPath("locked", "k")
        #expect(try service.request("PUT", path, token: token, body: [1]).status == 201)

        // Never presented before the lock: checking it needs the database.
        let freshToken = try service.token([.read, .write], namespaces: "*")
        // Another session holds both tables, as `LOCK TABLE` in psql would.
        let holder = try PostgresConnection(url: database.url, limits: .unbounded)
        try holder.execute("BEGIN; LOCK TABLE entries, api_tokens IN ACCESS EXCLUSIVE MODE")
        let requests: [(String, String, String)] = [
            ("PUT", path, token), ("DELETE", path, token), ("GET", "/v1/caches/locked/stats", token),
            ("GET", path, freshToken), ("GET", path, token),
        ]
        for (method, target, secret) in requests {
            let (status, seconds) = Self.timed(service, method, target, token: secret, body: method == "PUT" ? [2] : [])
            #expect(status == 503, "\(method) \(target) answered \(status) under the lock")
            #expect(seconds < 3 + 1, "\(method) \(target) took \(seconds) s")
        }
        try holder.execute("ROLLBACK")

        // Recovery by itself, once the lock is gone.
        #expect(Self.timed(service, "PUT", path, token: token, body: [3]).status == 200)
        #expect(Self.timed(service, "GET", path, token: freshToken).status == 200)
        #expect(Self.timed(service, "DELETE", path, token: token).status == 204)
        // No backend of the service is left waiting on a lock or idle inside a transaction.
        let observer = try PostgresConnection(url: database.url)
        let stuck = try observer.query("""
            SELECT count(*)::int8 AS n FROM pg_stat_activity
            WHERE application_name LIKE 'teamcache%' AND pid <> pg_backend_pid()
              AND (wait_event_type = 'Lock' OR state LIKE 'idle in transaction%')
            """)
        #expect(try stuck.rows.first?.int("n") == 0)
    }

    @Test func aFrozenDatabaseGives503WithinTheDeadlineAndServiceReturnsAfterIt() throws {
        let database = try PrivateCluster("tc-freeze")
        defer { database.remove() }
        let service = try TestService { Self.tune(&$0, url: database.url) }
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "*")
        for index in 0..<20 {
            #expect(try service.request("PUT", entryPath("frozen", "k\(index)"), token: token, body: [1]).status == 201)
        }
        let outcomes = Locked<(statuses: [Int: Int], slowest: Double)>(([:], 0))
        let running = Locked(true)
        let load = DispatchGroup()
        for worker in 0..<8 {
            DispatchQueue.global().async(group: load) {
                var round = 0
                while running.value {
                    round += 1
                    let path = entryPath("frozen", "k\(round % 20)")
                    let (status, seconds) = worker % 2 == 0
                        ? Self.timed(service, "GET", path, token: token)
                        : Self.timed(service, "PUT", path, token: token, body: [UInt8(truncatingIfNeeded: round)])
                    outcomes.withLock {
                        $0.statuses[status, default: 0] += 1
                        $0.slowest = max($0.slowest, seconds)
                    }
                }
            }
        }
        Thread.sleep(forTimeInterval: 0.5)
        let frozen = try PostgresProcesses(database.cluster.clusterDirectory)
        frozen.signal(SIGSTOP)
        let stoppedAt = Date()
        var unreadyAfter: Double?
        while Date().timeIntervalSince(stoppedAt) < 10 {
            // Timed from when the probe was asked: its answer may come late on a loaded machine.
            let asked = Date().timeIntervalSince(stoppedAt)
            if unreadyAfter == nil, (try? service.request("GET", "/readyz").status) == 503 {
                unreadyAfter = asked
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        frozen.signal(SIGCONT)
        let resumedAt = Date()
        var recovered: Double?
        while recovered == nil && Date().timeIntervalSince(resumedAt) < 15 {
            let put = Self.timed(service, "PUT", entryPath("frozen", "after"), token: token, body: [9]).status
            if [200, 201].contains(put), Self.timed(service, "GET", entryPath("frozen", "after"), token: token).status == 200,
               (try? service.request("GET", "/readyz").status) == 200 {
                recovered = Date().timeIntervalSince(resumedAt)
            } else {
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        running.withLock { $0 = false }
        load.wait()
        let (statuses, slowest) = outcomes.value
        // Every answer is one of these. A connection closed without any answer was seen about
        // once in 5,000 requests during the freeze in full-suite runs and not yet explained
        // (the server logs each at debug level: "connection closed without an answer"); more
        // than one in a thousand fails.
        let unanswered = statuses.filter { $0.key < 0 }.values.reduce(0, +)
        let answered = statuses.filter { $0.key > 0 }.values.reduce(0, +)
        #expect(statuses.keys.filter { $0 > 0 }.allSatisfy { [200, 201, 503].contains($0) }, "\(statuses)")
        #expect(unanswered * 1000 <= answered, "\(statuses)")
        #expect(statuses[503, default: 0] > 0, "\(statuses)")
        #expect(slowest < 3 + 1, "a request took \(slowest) s (deadline 3 s)")
        #expect(unreadyAfter.map { $0 < 2.5 } == true, "readyz unready after \(String(describing: unreadyAfter)) s")
        #expect(recovered != nil, "no recovery within 15 s of SIGCONT")
        #expect(try service.request("GET", "/healthz").status == 200)
    }

    /// A PUT whose token is cached starts on its event loop (bench/results/2026-12-06-writes-4.md),
    /// and its group's commit, which waits on the database, is handed to a worker. With the
    /// database frozen and PUTs waiting for their commits, the one loop still answers at once;
    /// the PUTs get their 503 within the deadline. Were a loop to commit a group itself, it
    /// would wait for the database with them, and `/healthz` would not be answered.
    @Test func putsStartedOnTheLoopNeverHoldItWhileTheDatabaseIsFrozen() throws {
        let database = try PrivateCluster("tc-loop-put")
        defer { database.remove() }
        let service = try TestService {
            Self.tune(&$0, url: database.url)
            $0.tokenCacheTTL = 60
            $0.http.eventLoops = 1
        }
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "*")
        // The token is then cached, and the namespace's (absent) key remembered: these PUTs
        // start on the loop.
        for index in 0..<3 {
            let warm = try service.request("PUT", entryPath("loopput", "warm\(index)"), token: token, body: [1])
            #expect(warm.status == 201)
        }
        let waitsBefore = LoopThreads.blockingWaits
        let frozen = try PostgresProcesses(database.cluster.clusterDirectory)
        frozen.signal(SIGSTOP)
        defer { frozen.signal(SIGCONT) }
        let puts = Locked<[(status: Int, seconds: Double)]>([])
        let writers = DispatchGroup()
        // Threads of their own: a busy machine's shared queue may start them late.
        for index in 0..<6 {
            writers.enter()
            Thread {
                let outcome = Self.timed(service, "PUT", entryPath("loopput", "k\(index)"), token: token, body: [2])
                puts.withLock { $0.append(outcome) }
                writers.leave()
            }.start()
        }
        Thread.sleep(forTimeInterval: 0.3)
        var slowestHealth = 0.0
        for _ in 0..<10 {
            let (status, seconds) = Self.timed(service, "GET", "/healthz", token: nil)
            #expect(status == 200)
            slowestHealth = max(slowestHealth, seconds)
            Thread.sleep(forTimeInterval: 0.05)
        }
        // A held loop would hold /healthz to the 3 s deadline; the tripwire below counts waits.
        #expect(slowestHealth < 1.5, "the loop was held \(slowestHealth) s while PUTs waited for a frozen database")
        #expect(writers.wait(timeout: .now() + 8) == .success)
        frozen.signal(SIGCONT)
        // 503 (the database is unavailable), or 504 at the deadline for a write queued behind
        // a group that was still waiting: never stored, never a wait past the deadline.
        for (status, seconds) in puts.value {
            #expect([503, 504].contains(status), "a PUT to a frozen database answered \(status)")
            #expect(seconds < 3 + 1, "a PUT took \(seconds) s (deadline 3 s)")
        }
        #expect(LoopThreads.blockingWaits == waitsBefore, "a wait ran on an event loop thread")
        var recovered = false
        for _ in 0..<50 where !recovered {
            recovered = [200, 201].contains(Self.timed(service, "PUT", entryPath("loopput", "after"), token: token,
                                                       body: [3]).status)
            if !recovered { Thread.sleep(forTimeInterval: 0.2) }
        }
        #expect(recovered, "no PUT succeeded within 10 s of SIGCONT")
    }

    /// With every worker busy and the workers' queue full, a PUT that would start on its loop
    /// is refused at once (503, retry-safe, nothing stored), as one starting on a worker is,
    /// and as docs/limits-and-failures.md says. Started on the loop, its commit would have no
    /// worker to go to and would fall to the write batcher's one fallback thread (without the
    /// check: 200, committed there).
    @Test func aPutIsRefusedAtOnceWhileTheWorkersAreFull() throws {
        let service = try TestService {
            $0.tokenCacheTTL = 60
            $0.http.workerThreads = 1
            $0.http.maxQueuedJobs = 1
        }
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "*")
        let path = entryPath(TestService.namespace("fullworkers"), "refused")
        #expect(try service.request("PUT", path, token: token, body: [1]).status == 201)
        // One job holds the only worker, one fills its queue.
        let workers = service.app.server.workers
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        #expect(workers.submit { started.signal(); gate.wait() })
        started.wait()
        #expect(workers.submit { gate.wait() })
        #expect(workers.isFull)
        let (status, seconds) = Self.timed(service, "PUT", path, token: token, body: [2])
        gate.signal()
        gate.signal()
        #expect(status == 503, "a PUT with the workers full answered \(status)")
        #expect(seconds < 1, "the refusal took \(seconds) s")
        for _ in 0..<200 where workers.queued > 0 { Thread.sleep(forTimeInterval: 0.01) }
        #expect(try service.request("GET", path, token: token).body == [1], "the refused PUT was stored")
    }
}

/// The processes of one cluster (the postmaster and its children), to freeze and thaw them.
struct PostgresProcesses {
    let pids: [pid_t]

    init(_ dataDirectory: URL) throws {
        let pidFile = try String(contentsOf: dataDirectory.appendingPathComponent("postmaster.pid"), encoding: .utf8)
        guard let first = pidFile.split(separator: "\n").first, let postmaster = pid_t(first) else {
            throw CocoaError(.fileReadCorruptFile)
        }
        var pids = [postmaster]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // Fields after the command name: state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == postmaster { pids.append(pid) }
        }
        self.pids = pids
    }

    func signal(_ signal: Int32) {
        for pid in pids { kill(pid, signal) }
    }
}
