import FuzzSupport
import HTTPServer
import Observability
import TeamCache

/// Drives the whole request path: bytes → parser → router → the real handlers (header,
/// query and JSON parsers included) over the in-memory store. Traps when a
/// request gets a 500 (an unexpected error: the memory store does not fail) or when a
/// list-header helper breaks its own contract.
let router = RequestHarness.router()
// Each failed store call warns; millions of them would only slow the fuzzer down.
LogSink.shared.configure(level: .error)

func check(_ bytes: [UInt8]) {
    var limits = HTTPParserLimits()
    limits.maxBodyBytes = 64 * 1024
    var parser = HTTPParser(limits: limits)
    parser.feed(bytes)
    while let event = parser.next() {
        guard case .request(let request) = event else { continue }
        for (_, value) in request.headers { checkListHelpers(value) }
        guard let response = router.respondSynchronously(to: request) else { continue }
        precondition(response.status != 500, "500 for \(request.method) \(request.target)")
        precondition((100...599).contains(response.status), "status \(response.status)")
    }
}

/// The helpers' promises: elements are trimmed and never empty; parsed numbers are in range.
func checkListHelpers(_ value: String) {
    for element in HeaderList.split(value) {
        precondition(!element.isEmpty && element.first != " " && element.last != " ", "untrimmed element")
        let parsed = HeaderElement(parsing: element)
        if let seconds = parsed.value.flatMap(HeaderList.deltaSeconds) {
            precondition((0...HeaderList.deltaSecondsCap).contains(seconds), "delta-seconds out of range")
        }
        if let quality = parsed.parameter("q").flatMap(HeaderList.quality) {
            precondition((0...1).contains(quality), "q out of range")
        }
    }
    let headers = HTTPHeaders([("If-None-Match", value)])
    _ = EntityTagList(headers, "If-None-Match")?.matchesWeakly("\"a\"")
}

FuzzDriver.run(check)
