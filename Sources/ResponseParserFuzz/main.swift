import FuzzSupport
import HTTPClient

/// Feeds one input to the response parser whole and split at a point chosen by its first
/// byte, then ends the input, and traps if the two disagree: a response's framing must not
/// depend on how its bytes arrive. Every input must end in events or one failure.
func check(_ bytes: [UInt8]) {
    let headRequest = bytes.first.map { $0 & 0x80 != 0 } ?? false
    let whole = outcomes([bytes], headRequest: headRequest)
    if bytes.count > 1 {
        let split = 1 + Int(bytes[0]) % (bytes.count - 1)
        let pieces = outcomes([Array(bytes[..<split]), Array(bytes[split...])], headRequest: headRequest)
        precondition(pieces == whole, "split at \(split) changed the parse")
    }
}

func outcomes(_ pieces: [[UInt8]], headRequest: Bool) -> [String] {
    var limits = ResponseParser.Limits()
    limits.headBytes = 1024
    limits.headerCount = 16
    limits.bodyBytes = 4096
    var parser = ResponseParser(limits: limits, headRequest: headRequest)
    var seen: [String] = []
    var body = 0
    let record: (ResponseParser.Event) -> Void = { event in
        switch event {
        case .head(let head): seen.append("head \(head.status) \(head.headers.count)")
        case .body(let part):
            precondition(!part.isEmpty, "an empty body part")
            body += part.count
        case .end(let reusable): seen.append("end \(body) \(reusable)")
        case .failure(let error): seen.append("fail \(error.code)")
        }
    }
    for piece in pieces where !parser.isFinished {
        piece.withUnsafeBytes { _ = parser.feed($0, record) }
    }
    parser.inputEnded(record)
    precondition(parser.isFinished, "the input ended and the response is neither complete nor failed")
    seen.append("body \(body)")
    return seen
}

FuzzDriver.run(check)
