/// Where calls go: scheme, host and port of a base URL, and the path under it that every
/// call's path is appended to (`https://api.openai.com/v1` → host `api.openai.com`, port
/// 443, base path `/v1`).
public struct Origin: Hashable, Sendable, CustomStringConvertible {
    public let secure: Bool
    /// The host name or IP literal as written (IPv6 without its brackets), lowercased.
    public let host: String
    public let port: Int
    /// The base path without a trailing slash ("" for the root).
    public let basePath: String

    /// The `Host` header's value: the port only when it is not the scheme's default.
    public var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? name : "\(name):\(port)"
    }

    /// Whether `host` is an IP address rather than a name (no DNS, no SNI; the certificate
    /// is checked against the address).
    public var hostIsAddress: Bool { IPAddress.parse(host) != nil }

    public var description: String { "\(secure ? "https" : "http")://\(hostHeader)\(basePath)" }

    /// Parses an absolute `http://` or `https://` URL without credentials, query or fragment.
    /// Throws a description of what is wrong.
    public init(parsing url: String) throws(OriginError) {
        let rest: Substring
        if url.lowercased().hasPrefix("https://") {
            secure = true
            rest = url.dropFirst(8)
        } else if url.lowercased().hasPrefix("http://") {
            secure = false
            rest = url.dropFirst(7)
        } else {
            throw OriginError("must start with http:// or https://")
        }
        guard rest.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw OriginError("must be printable ASCII without spaces")
        }
        guard !rest.contains("?"), !rest.contains("#") else { throw OriginError("must have no query or fragment") }
        guard !rest.contains("@") else { throw OriginError("must not carry credentials") }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        var path = String(rest[slash...])
        while path.hasSuffix("/") { path.removeLast() }
        guard !path.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }) else {
            throw OriginError("must not have . or .. segments")
        }
        (host, port) = try Self.splitAuthority(authority, defaultPort: secure ? 443 : 80)
        basePath = path
    }

    private static func splitAuthority(_ authority: Substring, defaultPort: Int) throws(OriginError) -> (String, Int) {
        var hostPart = authority
        var portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw OriginError("has an unclosed [") }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw OriginError("has text after ]") }
                portPart = after.dropFirst()
            }
            guard case .v6 = IPAddress.parse(String(hostPart)) else { throw OriginError("has a bad IPv6 address") }
        } else if let colon = authority.firstIndex(of: ":") {
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
        }
        guard !hostPart.isEmpty, hostPart.utf8.count <= 253 else { throw OriginError("has no host") }
        let host = hostPart.lowercased()
        if !authority.hasPrefix("[") {
            guard host.utf8.allSatisfy({ isHostByte($0) }) else { throw OriginError("has a bad host name") }
        }
        guard let portPart else { return (host, defaultPort) }
        guard !portPart.isEmpty, portPart.count <= 5, portPart.allSatisfy(\.isASCII), let port = Int(portPart),
              (1...65535).contains(port) else {
            throw OriginError("has a bad port")
        }
        return (host, port)
    }

    private static func isHostByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
            return true
        default:
            return false
        }
    }
}

/// Why a base URL was refused.
public struct OriginError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}
