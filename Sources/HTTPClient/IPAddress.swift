import Glibc

/// A numeric IPv4 or IPv6 address, as `inet_pton` reads it.
enum IPAddress: Equatable {
    case v4(in_addr)
    case v6(in6_addr)

    static func parse(_ text: String) -> IPAddress? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return .v4(v4) }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return .v6(v6) }
        return nil
    }

    static func == (lhs: IPAddress, rhs: IPAddress) -> Bool {
        switch (lhs, rhs) {
        case (.v4(var a), .v4(var b)): return memcmp(&a, &b, MemoryLayout<in_addr>.size) == 0
        case (.v6(var a), .v6(var b)): return memcmp(&a, &b, MemoryLayout<in6_addr>.size) == 0
        default: return false
        }
    }
}
