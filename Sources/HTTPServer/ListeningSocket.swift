import CLinux
import Glibc

/// A non-blocking TCP listening socket with `SO_REUSEPORT`, so each event loop can own one
/// bound to the same port and the kernel spreads new connections across them.
enum ListeningSocket {
    /// Claims `port` (0: a free one) for this process and returns it.
    ///
    /// SO_REUSEPORT lets any process of the same user bind a port that is already taken, and
    /// the kernel then splits connections between them: a second server (or an old version
    /// left running) would silently share the traffic. So the port is first probed with a
    /// plain bind, which fails with EADDRINUSE when anything listens there.
    static func claim(host: String, port: Int) throws -> Int {
        let probe = try open(host: host, port: port, reusePort: false, listening: false)
        defer { close(probe.fd) }
        return probe.port
    }

    static func open(host: String, port: Int, backlog: Int32 = 4096, reusePort: Bool = true,
                     listening: Bool = true) throws -> (fd: Int32, port: Int) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            throw SystemError(call: "inet_pton(\(host))", code: EINVAL)
        }
        let fd = try systemCall("socket") {
            socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        do {
            var one: Int32 = 1
            let size = socklen_t(MemoryLayout<Int32>.size)
            try systemCall("setsockopt(SO_REUSEADDR)") { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, size) }
            if reusePort {
                try systemCall("setsockopt(SO_REUSEPORT)") { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, size) }
            }
            try withUnsafePointer(to: &address) { pointer in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                    _ = try systemCall("bind") { bind(fd, raw, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
            }
            if listening { try systemCall("listen") { listen(fd, backlog) } }
            return (fd, try boundPort(fd))
        } catch {
            close(fd)
            throw error
        }
    }

    static func boundPort(_ fd: Int32) throws -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                _ = try systemCall("getsockname") { getsockname(fd, raw, &length) }
            }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Raises the soft open-files limit to the hard limit (10,000 keep-alive clients need it).
    static func raiseFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
