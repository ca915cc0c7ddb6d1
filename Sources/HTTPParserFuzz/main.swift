import FuzzSupport
import HTTPServer

/// Feeds one input to the parser whole and split at a point chosen by its first byte, and
/// traps if the two disagree: framing must not depend on how bytes arrive.
func check(_ bytes: [UInt8]) {
    var limits = HTTPParserLimits()
    limits.maxBodyBytes = 4096
    limits.maxHeaderBytes = 2048
    limits.maxRequestLineBytes = 512
    let whole = outcomes([bytes], limits)
    if bytes.count > 1 {
        let split = 1 + Int(bytes[0]) % (bytes.count - 1)
        let pieces = outcomes([Array(bytes[..<split]), Array(bytes[split...])], limits)
        precondition(pieces == whole, "split at \(split) changed the parse")
    }
}

func outcomes(_ pieces: [[UInt8]], _ limits: HTTPParserLimits) -> [String] {
    var parser = HTTPParser(limits: limits)
    var seen: [String] = []
    for piece in pieces {
        parser.feed(piece)
        while let event = parser.next() {
            switch event {
            case .head: break  // whether `continueExpected` depends on how the body arrived
            case .request(let request):
                seen.append("\(request.method) \(request.target) \(request.body.count) \(request.keepAlive)")
            case .failure(let error): seen.append("fail \(error.status)")
            }
        }
    }
    return seen
}

FuzzDriver.run(check)
