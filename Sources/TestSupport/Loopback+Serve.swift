import Foundation

extension Loopback {
    /// A listening socket on 127.0.0.1 (a port the kernel picks) whose connections are handed,
    /// each on a thread of its own, to `handle`; the accept loop ends when `fd` is shut down.
    /// For the stand-in services tests run (a proxy, a canned feed).
    public static func serve(_ handle: @escaping @Sendable (Int32) -> Void) -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = bind(fd, port: 0)
        listen(fd, 64)
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }  // shut down
                Thread.detachNewThread { handle(client) }
            }
        }
        return (fd, boundPort(fd))
    }
}
