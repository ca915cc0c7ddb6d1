import Foundation
import HTTPServer

/// The request directives of `Cache-Control` (RFC 9111 §5.2.1) the cache honours.
struct RequestCacheControl: Sendable {
    var noCache = false
    var onlyIfCached = false
    /// nil: no stale answer; `Int.max`: any staleness (`max-stale` without a value).
    var maxStale: Int?

    init(_ headers: HTTPHeaders) {
        // Most requests send neither header; skip the list building then.
        guard headers.contains("Cache-Control") || headers.contains("Pragma") else { return }
        for directive in headers.list("Cache-Control") {
            let parts = directive.split(separator: "=", maxSplits: 1)
            let name = parts[0].lowercased()
            let value = parts.count > 1 ? String(parts[1]).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : nil
            switch name {
            case "no-cache": noCache = true
            case "only-if-cached": onlyIfCached = true
            case "max-stale": maxStale = value.map { Int($0) ?? 0 } ?? Int.max
            default: break
            }
        }
        // `Pragma: no-cache` is the HTTP/1.0 spelling of a forced refresh.
        if headers.list("Pragma").contains(where: { $0.lowercased() == "no-cache" }) { noCache = true }
    }
}

/// `Accept-Encoding` (RFC 9110 §12.5.3): whether gzip is acceptable.
enum AcceptEncoding {
    static func allowsGzip(_ headers: HTTPHeaders) -> Bool {
        // The common cases answered without parsing: no header, or exactly `gzip` once.
        guard let first = headers["Accept-Encoding"] else { return false }
        if first == "gzip" && headers.count(of: "Accept-Encoding") == 1 {
            return true
        }
        var gzip: Double?, star: Double?
        for item in headers.list("Accept-Encoding") {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            let quality = parts.dropFirst().compactMap { parameter -> Double? in
                let pair = parameter.split(separator: "=")
                return pair.count == 2 && pair[0].lowercased() == "q" ? Double(pair[1]) : nil
            }.first ?? 1
            switch parts[0].lowercased() {
            case "gzip", "x-gzip": gzip = quality
            case "*": star = quality
            default: break
            }
        }
        return (gzip ?? star ?? 0) > 0
    }
}
