/// Reads one HTTP/1.1 response at a time from bytes as they arrive, in any split: the head,
/// then the body framed by Content-Length, chunked coding or the connection's end. Total:
/// every input ends in events or one failure, never a trap; every buffer is bounded.
public struct ResponseParser {
    public enum Event {
        /// The final head (1xx interim answers are skipped).
        case head(ClientResponseHead)
        /// Body bytes, decoded from any chunked coding.
        case body([UInt8])
        /// The response is complete; `reusable` when the connection may carry another.
        case end(reusable: Bool)
        /// The response broke the rules or a bound; nothing more is read.
        case failure(HTTPClientError)
    }

    public struct Limits: Sendable {
        public var headBytes = 64 * 1024
        public var headerCount = 128
        public var bodyBytes = 64 << 20
        public init() {}
    }

    enum Framing: Equatable {
        case length(Int)
        case chunked
        case close
        case none
    }

    enum State: Equatable {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case done
        case failed
    }

    private var state = State.head
    private var limits: Limits
    /// The request was HEAD: the response has no body whatever its headers say.
    private let headRequest: Bool
    private var line: [UInt8] = []
    private var headLines: [[UInt8]] = []
    private var headBytes = 0
    private var bodyBytes = 0
    private var reusable = false

    public init(limits: Limits = Limits(), headRequest: Bool = false) {
        self.limits = limits
        self.headRequest = headRequest
    }

    /// Whether a response has ended (or failed): bytes fed now are not this response's.
    public var isFinished: Bool { state == .done || state == .failed }
    /// Whether any byte of the response has been read.
    public private(set) var started = false
    /// Whether the body ends when the connection does (so an end of input completes it).
    public var readsUntilClose: Bool { state == .untilClose }

    /// Feeds bytes; events go to `emit` in order. Returns how many bytes were used: a
    /// response ends where it ends, and what follows it (never expected) is not read.
    @discardableResult
    public mutating func feed(_ bytes: UnsafeRawBufferPointer, _ emit: (Event) -> Void) -> Int {
        if !bytes.isEmpty { started = true }
        var index = 0
        while index < bytes.count {
            switch state {
            case .done, .failed:
                return index
            case .head, .chunkSize, .chunkDataEnd, .trailers:
                index = readLine(bytes, from: index, emit)
            case .fixed(let remaining):
                let take = min(remaining, bytes.count - index)
                deliver(bytes, index, take, emit)
                index += take
                if state != .failed { state = remaining == take ? .done : .fixed(remaining: remaining - take) }
                if state == .done { emit(.end(reusable: reusable)) }
            case .chunkData(let remaining):
                let take = min(remaining, bytes.count - index)
                deliver(bytes, index, take, emit)
                index += take
                if state != .failed { state = remaining == take ? .chunkDataEnd : .chunkData(remaining: remaining - take) }
            case .untilClose:
                deliver(bytes, index, bytes.count - index, emit)
                index = bytes.count
            }
        }
        return index
    }

    /// The connection's input ended: completes a body read to the close, fails anything else.
    public mutating func inputEnded(_ emit: (Event) -> Void) {
        switch state {
        case .untilClose:
            state = .done
            emit(.end(reusable: false))
        case .done, .failed:
            break
        default:
            fail(.closed, started ? "the upstream closed the connection mid-response"
                                  : "the upstream closed the connection without answering", emit)
        }
    }

    private mutating func deliver(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ count: Int, _ emit: (Event) -> Void) {
        guard count > 0 else { return }
        bodyBytes += count
        if bodyBytes > limits.bodyBytes {
            fail(.tooLarge, "the response body is larger than \(limits.bodyBytes) bytes", emit)
            return
        }
        emit(.body(Array(UnsafeRawBufferPointer(rebasing: bytes[start..<(start + count)]))))
    }

    private mutating func fail(_ code: HTTPClientError.Code, _ detail: String, _ emit: (Event) -> Void) {
        state = .failed
        emit(.failure(HTTPClientError(code, detail)))
    }

    // MARK: Lines (head, chunk sizes, trailers)

    /// Collects one line (LF-terminated; a CR before the LF is dropped) and acts on it.
    private mutating func readLine(_ bytes: UnsafeRawBufferPointer, from start: Int, _ emit: (Event) -> Void) -> Int {
        var index = start
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            headBytes += 1
            if headBytes > limits.headBytes {
                fail(.malformed, "the response head or chunk framing is longer than \(limits.headBytes) bytes", emit)
                return index
            }
            if byte == UInt8(ascii: "\n") {
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                let complete = line
                line.removeAll(keepingCapacity: true)
                take(line: complete, emit)
                return index
            }
            line.append(byte)
        }
        return index
    }

    private mutating func take(line: [UInt8], _ emit: (Event) -> Void) {
        switch state {
        case .head:
            if line.isEmpty {
                if headLines.isEmpty { return }  // stray blank lines before a status line (RFC 9112 2.2)
                finishHead(emit)
            } else {
                guard headLines.count <= limits.headerCount else {
                    fail(.malformed, "the response has more than \(limits.headerCount) headers", emit)
                    return
                }
                headLines.append(line)
            }
        case .chunkSize:
            chunkSize(line, emit)
        case .chunkDataEnd:
            guard line.isEmpty else {
                fail(.malformed, "a chunk is longer than its size says", emit)
                return
            }
            state = .chunkSize
        case .trailers:
            // Trailers are read and dropped: nothing here needs them.
            if line.isEmpty {
                state = .done
                emit(.end(reusable: reusable))
            }
        default:
            break
        }
    }

    private mutating func chunkSize(_ line: [UInt8], _ emit: (Event) -> Void) {
        let digits = line.prefix { $0 != UInt8(ascii: ";") && $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
        guard !digits.isEmpty, digits.count <= 15, let size = Int(String(decoding: digits, as: UTF8.self), radix: 16),
              digits.allSatisfy({ ResponseHead.isHexDigit($0) }) else {
            fail(.malformed, "a chunk size is not hexadecimal", emit)
            return
        }
        headBytes = 0  // the framing budget is per line here, not per response
        state = size == 0 ? .trailers : .chunkData(remaining: size)
    }

    // MARK: Head

    private mutating func finishHead(_ emit: (Event) -> Void) {
        let lines = headLines
        headLines.removeAll()
        headBytes = 0
        switch ResponseHead.parse(lines) {
        case .failure(let error):
            fail(error.code, error.detail, emit)
        case .success(let head):
            if (100..<200).contains(head.status) {
                // An interim answer (103 Early Hints, say): the final one follows. 101 would
                // switch protocols, which no request here asks for.
                if head.status == 101 { fail(.malformed, "the upstream switched protocols unasked", emit) }
                return
            }
            begin(head, emit)
        }
    }

    private mutating func begin(_ head: ClientResponseHead, _ emit: (Event) -> Void) {
        let framing: Framing
        switch ResponseHead.framing(of: head, headRequest: headRequest) {
        case .failure(let error):
            fail(error.code, error.detail, emit)
            return
        case .success(let found):
            framing = found
        }
        reusable = head.minorVersion >= 1 && framing != .close && !ResponseHead.closes(head)
        if case .length(let length) = framing, length > limits.bodyBytes {
            fail(.tooLarge, "the response body is \(length) bytes, more than \(limits.bodyBytes)", emit)
            return
        }
        emit(.head(head))
        switch framing {
        case .none, .length(0):
            state = .done
            emit(.end(reusable: reusable))
        case .length(let length): state = .fixed(remaining: length)
        case .chunked: state = .chunkSize
        case .close: state = .untilClose
        }
    }
}
