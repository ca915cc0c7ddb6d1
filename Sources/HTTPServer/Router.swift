/// Handles one request; runs on an event loop (`inline`) or on a worker thread.
public typealias HTTPHandler = @Sendable (HTTPRequest) throws -> HTTPResponse

/// Starts handling one request on its event loop and answers later through the responder,
/// from the same loop (after waiting on something the loop watches) or from a worker.
/// Must not block: this is how reads reach the database without a thread hand-off.
public typealias AsyncHTTPHandler = @Sendable (HTTPRequest, Responder) -> Void

/// What a route's precheck found on a request's head.
public enum PrecheckVerdict: Sendable {
    /// Everything the head could show is checked: read the body.
    case admitted
    /// Not all of it could be checked without blocking; `verify` does the rest (it may
    /// block; it throws an `HTTPError` to refuse the request before its body is read).
    case unverified(verify: @Sendable () throws -> Void)
}

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

    /// Checks a request on its head alone, before its body is read (authentication from
    /// cached state, say): throwing an `HTTPError` refuses it without reading the body.
    /// Must not block: it runs on the event loop. `.unverified` says what it could not check
    /// without blocking (a credential not seen yet): the server runs that check on a worker
    /// before it reads a large body, and gives a small body only a small share of the budget.
    public typealias Precheck = @Sendable (HTTPRequest) throws -> PrecheckVerdict

    public let method: String
    public let template: String
    let work: Work

    let precheck: Precheck?
    let segments: [Segment]
    /// The route's position in its router (a metrics key).
    public let id: Int

    enum Segment: Equatable {
        case literal([UInt8])
        case parameter(String)
        /// `{name...}`, last: one or more segments, the rest of the path, given raw (undecoded,
        /// slashes and all) so a handler that forwards it judges exactly what was sent.
        case rest(String)
    }

    /// The route's handler may change state (a write): a request given up at its deadline
    /// may still take effect, so it is answered 504 "outcome unknown", not a 503 a client
    /// would read as "not applied, retry".
    public let mayChangeState: Bool

    public convenience init(_ method: String, _ template: String, _ execution: Execution = .worker,
                            precheck: Precheck? = nil, mayChangeState: Bool = false, handler: @escaping HTTPHandler) {
        self.init(method, template, execution == .inline ? .inline(handler) : .worker(handler), precheck: precheck,
                  mayChangeState: mayChangeState, id: -1)
    }

    public convenience init(_ method: String, _ template: String, precheck: Precheck? = nil,
                            mayChangeState: Bool = false, responder handler: @escaping AsyncHTTPHandler) {
        self.init(method, template, .async(handler), precheck: precheck, mayChangeState: mayChangeState, id: -1)
    }

    init(_ method: String, _ template: String, _ work: Work, precheck: Precheck?, mayChangeState: Bool, id: Int) {
        self.method = method
        self.template = template
        self.work = work
        self.precheck = precheck
        self.mayChangeState = mayChangeState
        self.id = id
        self.segments = template.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map {
            guard $0.hasPrefix("{") && $0.hasSuffix("}") else { return .literal(Array($0.utf8)) }
            let name = $0.dropFirst().dropLast()
            return name.hasSuffix("...") ? .rest(String(name.dropLast(3))) : .parameter(String(name))
        }
    }
}

/// A route's decoded path parameters, by name. Routes have one or two, so a short array
/// beats a dictionary: no hashing and one allocation per request. (Held inline instead, the
/// pairs saved that allocation but cost more: every read of `request.pathParameters` copies
/// the struct, retaining each name and value rather than one array.)
public struct PathParameters: Sendable, ExpressibleByDictionaryLiteral {
    /// A struct, not a tuple: an array of tuples is destroyed through the runtime's generic
    /// tuple witness, dearer than a struct's own.
    private struct Pair {
        let name: String
        let value: [UInt8]
    }

    private var pairs: [Pair] = []

    public init(dictionaryLiteral elements: (String, [UInt8])...) {
        pairs = elements.map { Pair(name: $0.0, value: $0.1) }
    }

    init(reserving count: Int) { pairs.reserveCapacity(count) }

    mutating func append(_ name: String, _ value: [UInt8]) { pairs.append(Pair(name: name, value: value)) }

    public subscript(name: String) -> [UInt8]? { pairs.first(where: { $0.name == name })?.value }
}

/// A table of routes matched by method and path segments.
public struct Router: Sendable {
    public enum Match {
        case found(Route, PathParameters)
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
    /// Routes without parameters, grouped by template: most operational requests match one
    /// by a byte comparison and skip splitting and decoding.
    private let exact: [(template: [UInt8], routes: [Route])]

    public init(_ routes: [Route]) {
        self.routes = routes.enumerated().map { index, route in
            Route(route.method, route.template, route.work, precheck: route.precheck,
                  mayChangeState: route.mayChangeState, id: index)
        }
        var exact: [(template: [UInt8], routes: [Route])] = []
        for route in self.routes where route.segments.allSatisfy({ if case .literal = $0 { true } else { false } }) {
            let template = Array(route.template.utf8)
            if let index = exact.firstIndex(where: { $0.template == template }) {
                exact[index].routes.append(route)
            } else {
                exact.append((template, [route]))
            }
        }
        self.exact = exact
    }

    var templates: [String] { routes.map(\.template) }

    /// Matches `path` (raw, before decoding); HEAD falls back to the GET route.
    public func match(method: String, path: Substring) -> Match {
        // Matched over raw bytes: indexing a substring's UTF-8 view costs a call per byte.
        if let match = path.utf8.withContiguousStorageIfAvailable({ match(method: method, bytes: $0) }) {
            return match
        }
        return Array(path.utf8).withUnsafeBufferPointer { match(method: method, bytes: $0) }
    }

    private func match(method: String, bytes: UnsafeBufferPointer<UInt8>) -> Match {
        guard bytes.first == UInt8(ascii: "/") else { return .notFound }
        for candidates in exact where candidates.template.count == bytes.count
            && ByteSearch.equal(candidates.template, bytes) {
            if let route = candidates.routes.first(where: { $0.method == method })
                ?? (method == "HEAD" ? candidates.routes.first(where: { $0.method == "GET" }) : nil) {
                return .found(route, [:])
            }
        }
        // Every segment starts at a `/`; their ranges live on the stack for the match.
        let count = ByteSearch.count(of: UInt8(ascii: "/"), in: bytes)
        return withUnsafeTemporaryAllocation(of: Range<Int>.self, capacity: count) { ranges in
            guard let segments = PathSegments(bytes, ranges: ranges) else { return .badPath }
            return match(method: method, segments)
        }
    }

    private func match(method: String, _ segments: PathSegments) -> Match {
        var allowed: [String] = []
        var fallback: Route?
        for route in routes where segments.fit(route.segments) {
            if route.method == method { return .found(route, segments.parameters(of: route.segments)) }
            if method == "HEAD" && route.method == "GET" { fallback = route }
            allowed.append(route.method)
        }
        if let route = fallback { return .found(route, segments.parameters(of: route.segments)) }
        if allowed.isEmpty { return .notFound }
        if allowed.contains("GET") && !allowed.contains("HEAD") { allowed.append("HEAD") }
        return .methodNotAllowed(allowed)
    }
}

/// A request path split on `/` into byte ranges (bytes, not characters: splitting the
/// string would walk grapheme clusters). Only segments holding a `%` are decoded; the rest
/// compare as they are. Valid only while the path's bytes and the ranges' memory are.
private struct PathSegments {
    let bytes: UnsafeBufferPointer<UInt8>
    /// One per `/` of the path (it starts with one), filled by `init`.
    let ranges: UnsafeMutableBufferPointer<Range<Int>>
    /// Decoded segments by position; empty when no segment has an escape.
    private var decoded: [[UInt8]?] = []

    /// Nil when a segment has a malformed escape. `ranges` has room for one range per `/`.
    init?(_ bytes: UnsafeBufferPointer<UInt8>, ranges: UnsafeMutableBufferPointer<Range<Int>>) {
        self.bytes = bytes
        self.ranges = ranges
        // Found by `memchr`: a test of every byte cost ~15 instructions a byte, every request.
        var filled = 0
        var start = 1  // after the leading slash
        while true {
            let end = ByteSearch.firstIndex(of: UInt8(ascii: "/"), in: bytes, from: start) ?? bytes.count
            ranges.initializeElement(at: filled, to: start..<end)
            filled += 1
            if end == bytes.count { break }
            start = end + 1
        }
        let escaped = ByteSearch.firstIndex(of: UInt8(ascii: "%"), in: bytes, from: 1) != nil
        guard escaped else { return }
        decoded = Array(repeating: nil, count: ranges.count)
        for (position, range) in ranges.enumerated() where bytes[range].contains(UInt8(ascii: "%")) {
            guard let segment = PercentDecoding.decode(bytes: bytes[range]) else { return nil }
            decoded[position] = segment
        }
    }

    /// Whether the path has the template's shape and literals.
    func fit(_ template: [Route.Segment]) -> Bool {
        if case .rest = template.last {
            guard ranges.count >= template.count else { return false }
        } else {
            guard template.count == ranges.count else { return false }
        }
        for (position, segment) in template.enumerated() {
            guard case .literal(let literal) = segment else { continue }
            if let segment = decoded.isEmpty ? nil : decoded[position] {
                if segment != literal { return false }
            } else if !ByteSearch.equal(literal, UnsafeBufferPointer(rebasing: bytes[ranges[position]])) {
                return false
            }
        }
        return true
    }

    /// The parameters of a template the path fits.
    func parameters(of template: [Route.Segment]) -> PathParameters {
        var parameters = PathParameters(reserving: 2)
        for (position, segment) in template.enumerated() {
            if case .rest(let name) = segment {
                parameters.append(name, Array(UnsafeBufferPointer(rebasing: bytes[ranges[position].lowerBound...])))
                continue
            }
            guard case .parameter(let name) = segment else { continue }
            parameters.append(name, (decoded.isEmpty ? nil : decoded[position])
                              ?? Array(UnsafeBufferPointer(rebasing: bytes[ranges[position]])))
        }
        return parameters
    }
}
