import HTTPServer
@testable import TeamCache
import Testing

/// `Accept-Encoding` read in place (`plainList`) answers what the general element parser
/// answers, for every list it takes on.
@Suite struct AcceptEncodingTests {
    @Test func theInPlaceReadingAnswersAsTheParserDoes() {
        let pieces = ["gzip", "GZip", "x-gzip", "*", "identity", "br", "deflate", "zstd", ",", ", ", " ", "\t", ";", ";q=",
                      "; q = ", "q", "Q", "=", "0", "1", ".", "5", "000", "0.5", "1.0", "1.001", "0.0001", ";level=1",
                      "gzip=1", "\"", "\\", "é", ""]
        var generator = SystemRandomNumberGenerator()
        var taken = 0
        for _ in 0..<50_000 {
            let fields = (0..<Int.random(in: 1...2, using: &generator)).map { _ in
                (0..<Int.random(in: 0...9, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
            }
            let headers = HTTPHeaders(fields.map { ("Accept-Encoding", $0) })
            #expect(AcceptEncoding.allowsGzip(headers) == AcceptEncoding.parsed(headers), "\(fields)")
            guard let plain = AcceptEncoding.plainList(headers) else { continue }
            taken += 1
            #expect(plain == AcceptEncoding.parsed(headers), "\(fields)")
        }
        #expect(taken > 25_000, "most random lists are read in place (those without a quote or é)")
        for common in ["gzip, deflate", "gzip, deflate, br, zstd", "identity", "br;q=1.0, gzip;q=0.8, *;q=0.1",
                       "gzip;q=0", "*", "deflate, gzip;q=1.0, *;q=0.5"] {
            let headers = HTTPHeaders([("Accept-Encoding", common)])
            #expect(AcceptEncoding.plainList(headers) == AcceptEncoding.parsed(headers), "\(common)")
            #expect(AcceptEncoding.plainList(headers) != nil, "\(common) is read in place")
        }
        #expect(AcceptEncoding.allowsGzip(HTTPHeaders([("Accept-Encoding", "gzip, deflate")])))
        #expect(!AcceptEncoding.allowsGzip(HTTPHeaders([("Accept-Encoding", "identity")])))
        #expect(!AcceptEncoding.allowsGzip(HTTPHeaders([("Accept-Encoding", "gzip;q=0, *")])))
        // The fast path takes `gzip` only when it is the one field: a second one may refuse it.
        #expect(AcceptEncoding.allowsGzip(HTTPHeaders([("Host", "h"), ("accept-encoding", "gzip")])))
        #expect(!AcceptEncoding.allowsGzip(HTTPHeaders([("Accept-Encoding", "gzip"), ("Accept-Encoding", "gzip;q=0")])))
        #expect(!AcceptEncoding.allowsGzip(HTTPHeaders([("Host", "h")])))
        #expect(HTTPHeaders([("A", "1"), ("a", "2")]).single("A") == nil)
        #expect(HTTPHeaders([("A", "1"), ("B", "2")]).single("a") == "1")
        #expect(HTTPHeaders([("B", "2")]).single("A") == nil)
    }
}
