import Foundation
import HTTPServer

/// The request directives of `Cache-Control` (RFC 9111 §5.2.1) the cache honours.
///
/// Every value a client can send has one meaning, and none traps:
/// - `max-stale` without a value: any staleness (bounded in practice by the stale retention);
/// - `max-stale=N`: N seconds (a delta past 2^31 counts as 2^31, RFC 9111 §1.2.2);
/// - `max-stale` with anything else (`abc`, `-5`, empty): ignored, so no stale answer is
///   served; a cache told nonsense about staleness stays on the safe side (fresh only);
/// - unknown directives, and directives given a value they do not take, are ignored.
struct RequestCacheControl: Sendable {
    var noCache = false
    var onlyIfCached = false
    /// nil: no stale answer; `Int.max`: any staleness (`max-stale` without a value).
    var maxStale: Int?

    init(_ headers: HTTPHeaders) {
        // Most requests send neither header; skip the list building then.
        guard headers.contains("Cache-Control") || headers.contains("Pragma") else { return }
        for directive in HeaderList.elements(headers, "Cache-Control") {
            switch directive.name {
            case "no-cache": noCache = true
            case "only-if-cached": onlyIfCached = true
            case "max-stale":
                guard let text = directive.value else {
                    maxStale = Int.max
                    continue
                }
                if let seconds = HeaderList.deltaSeconds(text) { maxStale = seconds }
            default: break
            }
        }
        // `Pragma: no-cache` is the HTTP/1.0 spelling of a forced refresh.
        if HeaderList.elements(headers, "Pragma").contains(where: { $0.name == "no-cache" }) { noCache = true }
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
        for coding in HeaderList.elements(headers, "Accept-Encoding") {
            // A weight that is not a qvalue makes the element unreadable: it is skipped.
            let quality: Double
            if let text = coding.parameter("q") {
                guard let parsed = HeaderList.quality(text) else { continue }
                quality = parsed
            } else {
                quality = 1
            }
            switch coding.name {
            case "gzip", "x-gzip": gzip = quality
            case "*": star = quality
            default: break
            }
        }
        return (gzip ?? star ?? 0) > 0
    }
}
