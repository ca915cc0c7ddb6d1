import Glibc

/// One resolved address to connect to.
struct SocketAddress: @unchecked Sendable {
    // @unchecked: a plain C value (sockaddr_storage holds only integers and bytes).
    var storage = sockaddr_storage()
    var length: socklen_t = 0
    var family: Int32 { Int32(storage.ss_family) }

    /// An IP literal and port, without DNS.
    static func literal(_ host: String, port: Int) -> SocketAddress? {
        guard let address = IPAddress.parse(host) else { return nil }
        var result = SocketAddress()
        withUnsafeMutableBytes(of: &result.storage) { raw in
            switch address {
            case .v4(let ip):
                var v4 = sockaddr_in()
                v4.sin_family = sa_family_t(AF_INET)
                v4.sin_port = in_port_t(UInt16(port).bigEndian)
                v4.sin_addr = ip
                withUnsafeBytes(of: v4) { raw.copyMemory(from: $0) }
                result.length = socklen_t(MemoryLayout<sockaddr_in>.size)
            case .v6(let ip):
                var v6 = sockaddr_in6()
                v6.sin6_family = sa_family_t(AF_INET6)
                v6.sin6_port = in_port_t(UInt16(port).bigEndian)
                v6.sin6_addr = ip
                withUnsafeBytes(of: v6) { raw.copyMemory(from: $0) }
                result.length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            }
        }
        return result
    }
}
