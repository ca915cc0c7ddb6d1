/// An incremental HTTP/1.1 request parser (RFC 9112): a pure state machine fed bytes.
///
/// `feed` appends bytes; `next` returns the next event once enough bytes are there. Bytes
/// after a complete request stay buffered for the next (pipelining). After a failure the
/// parser stays failed: the connection must be closed, since the message framing is lost.
public struct HTTPParser: Sendable {
    public enum Event: Sendable {
        /// The head of a request with a body is in, before any of the body is consumed: the
        /// connection routes and authenticates on it (and refuses before reading a byte of
        /// the body). `continueExpected`: the client sent `Expect: 100-continue` and waits.
        case head(HTTPRequest, continueExpected: Bool)
        case request(HTTPRequest)
        case failure(HTTPParseError)
    }

    /// The outcome of looking for the blank line that ends a head.
    enum HeadScan {
        case incomplete
        case bareLineFeed
        case complete(end: Int)
    }

    /// The outcome of reading one CRLF-terminated line.
    enum Line {
        case incomplete
        case tooLong
        case bareLineFeed
        case complete([UInt8])
    }

    enum State: Equatable {
        case head
        case body(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case failed
    }

    let limits: HTTPParserLimits
    private var buffer: [UInt8] = []
    private var start = 0
    /// Where the search for the end of the head resumes, so no byte is scanned twice.
    private var scanned = 0
    private var state: State = .head
    private var head: HTTPRequest?
    private var body: [UInt8] = []
    private var trailerBytes = 0

    public init(limits: HTTPParserLimits = HTTPParserLimits()) {
        self.limits = limits
    }

    /// True when no byte of a next request has arrived.
    public var isIdle: Bool { state == .head && start == buffer.count }
    /// The buffer's memory, in bytes (tests: a drained parser keeps at most `keptCapacity`).
    var bufferCapacity: Int { buffer.capacity }
    /// True while the head of a request is incomplete.
    public var isReadingHead: Bool { state == .head && start < buffer.count }
    public var isFailed: Bool { state == .failed }
    /// Bytes received and not yet consumed.
    public var bufferedBytes: Int { buffer.count - start }
    /// Body bytes of the request being received, held until it is complete.
    public var bodyBytesReceived: Int { body.count }
    /// True while a request's body is being received.
    public var isReadingBody: Bool { state != .head && state != .failed }

    public mutating func feed<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        buffer.append(contentsOf: bytes)
    }

    public mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
    }

    /// The next event, or nil when more bytes are needed.
    public mutating func next() -> Event? {
        while true {
            switch state {
            case .failed:
                return nil
            case .head:
                skipEmptyLinesBeforeRequest()
                if let refusal = refuseNonHTTP1() { return refusal }
                switch findHeadEnd() {
                case .incomplete: return headLimitFailure()
                case .bareLineFeed: return fail(.badRequest("Header lines must end with CRLF."))
                case .complete(let end):
                    switch parseHead(upTo: end) {
                    case .failure(let error): return fail(error)
                    case .success(let (request, framing, expectsContinue)):
                        if let event = beginBody(request, framing) { return event }
                        return .head(request, continueExpected: expectsContinue && bufferedBytes == 0)
                    }
                }
            case .body(let remaining):
                let take = min(remaining, bufferedBytes)
                guard take > 0 || remaining == 0 else { return nil }
                body.append(contentsOf: buffer[start..<start + take])
                consume(take)
                if remaining - take == 0 { return finish() }
                state = .body(remaining: remaining - take)
                return nil
            case .chunkSize:
                let size: Int
                switch takeLine(limit: 1024) {
                case .incomplete: return nil
                case .tooLong, .bareLineFeed: return fail(.badRequest("Malformed chunk size line."))
                case .complete(let line):
                    guard let parsed = Self.parseChunkSize(line) else { return fail(.badRequest("Malformed chunk size.")) }
                    size = parsed
                }
                if size == 0 {
                    state = .trailers
                } else if body.count + size > limits.maxBodyBytes {
                    return fail(.bodyTooLarge)
                } else {
                    state = .chunkData(remaining: size)
                }
            case .chunkData(let remaining):
                let take = min(remaining, bufferedBytes)
                guard take > 0 else { return nil }
                body.append(contentsOf: buffer[start..<start + take])
                consume(take)
                state = remaining - take == 0 ? .chunkDataEnd : .chunkData(remaining: remaining - take)
            case .chunkDataEnd:
                guard bufferedBytes >= 2 else { return nil }
                guard buffer[start] == 13 && buffer[start + 1] == 10 else {
                    return fail(.badRequest("Chunk data is not followed by CRLF."))
                }
                consume(2)
                state = .chunkSize
            case .trailers:
                let bytes: [UInt8]
                switch takeLine(limit: limits.maxHeaderBytes) {
                case .incomplete: return nil
                case .tooLong: return fail(.headersTooLarge)
                case .bareLineFeed: return fail(.badRequest("Malformed trailer."))
                case .complete(let line): bytes = line
                }
                trailerBytes += bytes.count + 2
                if trailerBytes > limits.maxHeaderBytes { return fail(.headersTooLarge) }
                // Trailer fields are read and dropped: nothing here relies on them.
                if bytes.isEmpty { return finish() }
            }
        }
    }

    // MARK: Head

    /// RFC 9112 §2.2: ignore empty lines before a request line (some clients send CRLF after a body).
    private mutating func skipEmptyLinesBeforeRequest() {
        while bufferedBytes >= 2 && buffer[start] == 13 && buffer[start + 1] == 10 { consume(2) }
    }

    /// Bytes that cannot begin an HTTP/1.x request are refused as soon as they arrive, not
    /// after the header timeout: a TLS ClientHello (0x16), an HTTP/2 connection preface, or
    /// anything else whose first byte is not a method's token character.
    private mutating func refuseNonHTTP1() -> Event? {
        guard bufferedBytes > 0 else { return nil }
        let first = buffer[start]
        // CR and LF may be the start of an empty line before the request (RFC 9112 §2.2).
        if first != 13 && first != 10 && !HTTPHeadParser.isTokenByte(first) {
            return fail(.badRequest("This is not an HTTP/1.x request (TLS or a binary protocol?)."))
        }
        // Decided on the preface's whole first line only: refusing on a shorter match would
        // make the outcome depend on how the bytes arrive (`PRI ` alone, then `UnsafeBu`, was
        // refused, while the same 12 bytes at once were not; found by the fuzzer). The
        // preface arrives in one packet in practice, so this is still at once.
        let preface = Self.http2Preface
        if bufferedBytes >= preface.count && buffer[start..<start + preface.count].elementsEqual(preface) {
            return fail(.badRequest("HTTP/2 is not served here; use HTTP/1.1."))
        }
        return nil
    }

    private static let http2Preface = Array("PRI * HTTP/2.0\r\n".utf8)
    /// The most buffer memory a drained parser keeps (`releaseIfEmpty`).
    static let keptCapacity = 512

    private mutating func findHeadEnd() -> HeadScan {
        let from = max(start, scanned)
        let found: HeadScan = buffer.withUnsafeBufferPointer { bytes in
            var index = from
            // From line feed to line feed (memchr), not byte by byte: this runs on every request.
            while let lineFeed = ByteSearch.firstIndex(of: 10, in: bytes, from: index) {
                // Only CRLF ends a line; a bare LF is a request-smuggling vector.
                guard lineFeed > start, bytes[lineFeed - 1] == 13 else { return .bareLineFeed }
                if lineFeed - start >= 3 && bytes[lineFeed - 2] == 10 && bytes[lineFeed - 3] == 13 {
                    return .complete(end: lineFeed + 1)
                }
                index = lineFeed + 1
            }
            return .incomplete
        }
        switch found {
        case .complete(let end): scanned = end
        case .incomplete: scanned = buffer.count
        case .bareLineFeed: break
        }
        return found
    }

    private mutating func headLimitFailure() -> Event? {
        let lineEnd = buffer[start...].firstIndex(of: 13) ?? buffer.count
        if lineEnd - start > limits.maxRequestLineBytes { return fail(.requestLineTooLong) }
        if bufferedBytes > limits.maxHeaderBytes { return fail(.headersTooLarge) }
        return nil
    }

    private mutating func parseHead(upTo end: Int) -> Result<HTTPHeadParser.Head, HTTPParseError> {
        if end - start > limits.maxHeaderBytes { return .failure(.headersTooLarge) }
        // Parsed before the bytes are consumed: a slice alive across `consume` would make the
        // buffer's memory shared, and keeping it (`releaseIfEmpty`) would copy it.
        let head = HTTPHeadParser.parse(buffer[start..<end - 4], limits: limits)
        consume(end - start)
        scanned = start
        return head
    }

    private mutating func beginBody(_ request: HTTPRequest, _ framing: HTTPHeadParser.Framing) -> Event? {
        head = request
        body = []
        trailerBytes = 0
        switch framing {
        case .none:
            return finish()
        case .length(let length):
            if length > limits.maxBodyBytes { return fail(.bodyTooLarge) }
            if length == 0 { return finish() }
            // No reservation from the declared length: memory follows the bytes that arrive.
            state = .body(remaining: length)
        case .chunked:
            state = .chunkSize
        }
        return nil
    }

    private mutating func finish() -> Event {
        let request = head!
        request.body = body
        head = nil
        body = []
        state = .head
        releaseIfEmpty()
        return .request(request)
    }

    // MARK: Lines and buffer

    /// The next CRLF-terminated line, without its CRLF.
    private mutating func takeLine(limit: Int) -> Line {
        guard let lf = buffer[start...].firstIndex(of: 10) else {
            return bufferedBytes > limit ? .tooLong : .incomplete
        }
        guard lf > start, buffer[lf - 1] == 13 else { return .bareLineFeed }
        if lf - 1 - start > limit { return .tooLong }
        let line = Array(buffer[start..<lf - 1])
        consume(lf + 1 - start)
        return .complete(line)
    }

    /// chunk-size [ chunk-ext ] (RFC 9112 §7.1): hex digits, then optional whitespace (BWS)
    /// and `;` extensions, which are ignored. Anything else after the digits (`3 garbage`,
    /// `3x`, trailing spaces with no extension) is refused: a lenient reading here is how two
    /// parsers in a chain come to disagree on where a body ends.
    static func parseChunkSize(_ line: [UInt8]) -> Int? {
        var size = 0
        var digits = 0
        var index = 0
        while index < line.count, let value = PercentDecoding.hexValue(line[index]) {
            guard digits < 15 else { return nil }
            size = size << 4 | Int(value)
            digits += 1
            index += 1
        }
        guard digits > 0 else { return nil }
        if index < line.count {
            // chunk-ext = *( BWS ";" … ): whitespace only before a `;`.
            while index < line.count, line[index] == UInt8(ascii: " ") || line[index] == UInt8(ascii: "\t") { index += 1 }
            guard index < line.count, line[index] == UInt8(ascii: ";") else { return nil }
        }
        if line.contains(where: { $0 == 0 || $0 == 13 }) { return nil }
        return size
    }

    private mutating func consume(_ count: Int) {
        start += count
        releaseIfEmpty()
    }

    /// Drops consumed bytes: all of them when the buffer is drained, or the front half when it
    /// grows large. A drained buffer's memory is kept when small (a GET's head fits): the next
    /// request then needs no allocation and free (~300 instructions a near-cache hit); a larger
    /// one is released, so an idle keep-alive connection holds at most `keptCapacity` bytes.
    private mutating func releaseIfEmpty() {
        if start == buffer.count {
            if buffer.capacity <= Self.keptCapacity {
                buffer.removeAll(keepingCapacity: true)
            } else {
                buffer = []
            }
            start = 0
            scanned = 0
        } else if start > 64 * 1024 && start > buffer.count / 2 {
            buffer.removeFirst(start)
            scanned -= start
            start = 0
        }
    }

    private mutating func fail(_ error: HTTPParseError) -> Event {
        state = .failed
        body = []
        head = nil
        buffer = []
        start = 0
        return .failure(error)
    }
}

