/// Handles one request; runs on an event loop (`inline`) or on a worker thread.
public typealias HTTPHandler = @Sendable (HTTPRequest) throws -> HTTPResponse

/// Starts handling one request on its event loop and answers later through the responder,
/// from the same loop (after waiting on something the loop watches) or from a worker.
/// Must not block: this is how reads reach the database without a thread hand-off.
public typealias AsyncHTTPHandler = @Sendable (HTTPRequest, Responder) -> Void

/// A method and path template (`/v1/caches/{ns}/entries/{key}`) with its handler.
/// Immutable; a class so a match hands out one reference, not a copy of every field.
public final class Route: Sendable {
    /// Where a synchronous handler runs.
    public enum Execution: Sendable {
        /// Cheap and non-blocking: runs on the event loop, no hand-off.
        case inline
        /// May block (database, compression of large bodies): runs on the worker pool.
        case worker
    }

    enum Work: Sendable {
        case inline(HTTPHandler)
        case worker(HTTPHandler)
        /// Starts on the event loop and answers through a `Responder` when ready.
        case async(AsyncHTTPHandler)
    }

    public let method: String
    public let template: String
    let work: Work
    let segments: [Segment]
    /// The route's position in its router (a metrics key).
    public let id: Int

    enum Segment: Equatable {
        case literal(String)
        case parameter(String)
    }

    public convenience init(_ method: String, _ template: String, _ execution: Execution = .worker,
                            handler: @escaping HTTPHandler) {
        self.init(method, template, execution == .inline ? .inline(handler) : .worker(handler), id: -1)
    }

    public convenience init(_ method: String, _ template: String, responder handler: @escaping AsyncHTTPHandler) {
        self.init(method, template, .async(handler), id: -1)
    }

    init(_ method: String, _ template: String, _ work: Work, id: Int) {
        self.method = method
        self.template = template
        self.work = work
        self.id = id
        self.segments = template.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map {
            $0.hasPrefix("{") && $0.hasSuffix("}") ? .parameter(String($0.dropFirst().dropLast())) : .literal(String($0))
        }
    }
}

/// A table of routes matched by method and path segments.
public struct Router: Sendable {
    public enum Match {
        case found(Route, [String: [UInt8]])
        /// The path exists with other methods (for `405` and `Allow`).
        case methodNotAllowed([String])
        case notFound
        /// A segment had a malformed percent-escape.
        case badPath
    }

    /// Metric keys of requests that matched no route, or could not be parsed.
    static let unmatchedID = -1
    static let unparsedID = -2

    private let routes: [Route]
    /// Routes without parameters by their exact path: most operational requests skip decoding.
    private let exact: [String: [Route]]

    public init(_ routes: [Route]) {
        self.routes = routes.enumerated().map { index, route in
            Route(route.method, route.template, route.work, id: index)
        }
        var exact: [String: [Route]] = [:]
        for route in self.routes where !route.segments.contains(where: { if case .parameter = $0 { true } else { false } }) {
            exact[route.template, default: []].append(route)
        }
        self.exact = exact
    }

    var templates: [String] { routes.map(\.template) }

    /// Matches `path` (raw, before decoding); HEAD falls back to the GET route.
    public func match(method: String, path: Substring) -> Match {
        guard path.hasPrefix("/") else { return .notFound }
        if let candidates = exact[String(path)] {
            if let route = candidates.first(where: { $0.method == method })
                ?? (method == "HEAD" ? candidates.first(where: { $0.method == "GET" }) : nil) {
                return .found(route, [:])
            }
        }
        // Split on bytes: splitting the string would walk grapheme clusters.
        let raw = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
        var decoded: [[UInt8]] = []
        decoded.reserveCapacity(raw.count)
        for segment in raw {
            guard let bytes = PercentDecoding.decode(bytes: segment) else { return .badPath }
            decoded.append(bytes)
        }
        var allowed: [String] = []
        var fallback: (Route, [String: [UInt8]])?
        for route in routes {
            guard let parameters = Self.bind(route.segments, decoded) else { continue }
            if route.method == method { return .found(route, parameters) }
            if method == "HEAD" && route.method == "GET" { fallback = (route, parameters) }
            allowed.append(route.method)
        }
        if let (route, parameters) = fallback { return .found(route, parameters) }
        if allowed.isEmpty { return .notFound }
        if allowed.contains("GET") && !allowed.contains("HEAD") { allowed.append("HEAD") }
        return .methodNotAllowed(allowed)
    }

    private static func bind(_ template: [Route.Segment], _ path: [[UInt8]]) -> [String: [UInt8]]? {
        guard template.count == path.count else { return nil }
        var parameters: [String: [UInt8]] = [:]
        for (segment, bytes) in zip(template, path) {
            switch segment {
            case .literal(let text):
                guard bytes.elementsEqual(text.utf8) else { return nil }
            case .parameter(let name):
                parameters[name] = bytes
            }
        }
        return parameters
    }
}
