import Glibc

/// 127.0.0.1 for the socket calls tests and tools make themselves.
public enum Loopback {
    /// `bind` of `fd` to 127.0.0.1:`port` (0: the kernel's pick); true when it took.
    public static func bind(_ fd: Int32, port: Int) -> Bool {
        withAddress(port) { Glibc.bind(fd, $0, $1) == 0 }
    }

    /// `connect` of `fd` to 127.0.0.1:`port`; true when it connected.
    public static func connect(_ fd: Int32, port: Int) -> Bool {
        withAddress(port) { Glibc.connect(fd, $0, $1) == 0 }
    }

    /// The port `fd` is bound to (0 when it is not).
    public static func boundPort(_ fd: Int32) -> Int {
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        return named ? Int(UInt16(bigEndian: bound.sin_port)) : 0
    }

    private static func withAddress(_ port: Int, _ call: (UnsafePointer<sockaddr>, socklen_t) -> Bool) -> Bool {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }
}
