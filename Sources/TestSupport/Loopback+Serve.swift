import Foundation

extension Loopback {
    /// A listening socket on 127.0.0.1 (a port the kernel picks) whose connections are handed,
    /// each on a thread of its own, to `handle`. Stop it with `shutdown(fd, SHUT_RDWR)` only:
    /// the accept loop then ends and closes `fd` itself (closed elsewhere, its number could be
    /// reused by another test's socket while the loop still accepts on it). For the stand-in
    /// services tests run (a proxy, a canned feed).
    /// Throws when no socket can listen (out of descriptors, no loopback): the test fails, the
    /// process goes on.
    public static func serve(_ handle: @escaping @Sendable (Int32) -> Void) throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NoListener(errno: errno) }
        guard bind(fd, port: 0), listen(fd, 64) == 0 else {
            let failure = NoListener(errno: errno)
            close(fd)
            throw failure
        }
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    close(fd)  // shut down
                    return
                }
                Thread.detachNewThread { handle(client) }
            }
        }
        return (fd, boundPort(fd))
    }
}

/// No loopback socket could listen, with the `errno` that said why.
public struct NoListener: Error {
    public let errno: Int32
}
