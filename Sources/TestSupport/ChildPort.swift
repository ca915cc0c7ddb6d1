import Foundation
import Glibc
import Locking

/// Ports for the child processes tests start (`teamcache serve`, PostgreSQL, PgBouncer), which
/// bind them a moment after the test picked them.
///
/// A port the kernel picks (a bind to port 0) comes from its ephemeral range, and so do the
/// ports of every in-process server, every bound test socket and every outgoing connection:
/// in the moment between the pick and the child's bind, one of those can take the port. The
/// child then fails to bind, and a readiness check that only connects finds the other socket
/// listening there. (One possible reading, not confirmed, of a Swift client test whose replica
/// "listened" but whose feed follower never reached it in 30 s: `ClientFailOpenTests`' frozen
/// listeners, beside it, bind to port 0.) So a child's port is drawn from below that range, where
/// nothing else here binds, and never handed out twice by one process.
public enum ChildPort {
    private static let handedOut = Locked(Set<Int>())

    /// A port free on 127.0.0.1 now, below the ephemeral range, not handed out before.
    public static func next() throws -> Int {
        let range = candidates()
        for _ in 0..<200 {
            let port = Int.random(in: range)
            guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
            if isFree(port) { return port }
        }
        throw RawClient.Failure.connect(EADDRINUSE)
    }

    /// 10000 up to the ephemeral range's start (32768 on Linux by default), and below 30000,
    /// where a Kubernetes host forwards its NodePorts with no socket bound; when the range
    /// starts too low for that, the 1,000 ports above 10000 and hope.
    static func candidates() -> ClosedRange<Int> {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let low = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) }
            ?? 32768
        return 10000...max(11000, min(29999, low - 1))
    }

    /// A plain bind (no SO_REUSEADDR) fails when anything holds the port, listening or not,
    /// TIME_WAIT included: such a port is passed over.
    static func isFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        return Loopback.bind(fd, port: port)
    }
}
