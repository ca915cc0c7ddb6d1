@testable import HTTPServer
import Testing

/// List headers (RFC 9110 §5.6): elements, parameters, quoted strings, q values, entity
/// tags, delta-seconds, and the values that used to trap.
@Suite struct HeaderListTests {
    private func headers(_ name: String, _ values: String...) -> HTTPHeaders {
        HTTPHeaders(values.map { (name, $0) })
    }

    @Test func elementsSplitOutsideQuotesAndDropEmpties() {
        #expect(HeaderList.split("a, b ,,c") == ["a", "b", "c"])
        #expect(HeaderList.split("a=\"x,y\", b") == ["a=\"x,y\"", "b"])
        #expect(HeaderList.split("\"a\\\",b\", c") == ["\"a\\\",b\"", "c"])
        #expect(HeaderList.split("") == [])
        #expect(HeaderList.split(" , ,\t") == [])
        // An unterminated quote swallows the rest of the value, as a quoted string would.
        #expect(HeaderList.split("\"a, b") == ["\"a, b"])
        #expect(HeaderList.split(headers("X", "a", "b, c"), "x") == ["a", "b", "c"])
    }

    @Test func elementsReadNamesValuesAndParameters() {
        let element = HeaderElement(parsing: "GZip ; q=0.5;Level=\"9\"")
        #expect(element.name == "gzip")
        #expect(element.value == nil)
        #expect(element.parameter("q") == "0.5")
        #expect(element.parameter("level") == "9")
        let directive = HeaderElement(parsing: "Max-Stale = \"60\"")
        #expect(directive.name == "max-stale" && directive.value == "60")
        // The values that trapped: a lone `=`, a lone `;`, an empty element.
        #expect(HeaderElement(parsing: "=") == HeaderElement(parsing: " = "))
        #expect(HeaderElement(parsing: "=").name == "" && HeaderElement(parsing: "=").value == "")
        #expect(HeaderElement(parsing: ";").name == "" && HeaderElement(parsing: ";").parameters.isEmpty)
        #expect(HeaderElement(parsing: "").name == "")
        #expect(HeaderElement(parsing: "a=b=c").value == "b=c")
        #expect(HeaderElement(parsing: "x;=1;q").parameters == [.init(name: "q", value: "")])
    }

    @Test func deltaSecondsSaturateAtTwoToTheThirtyOne() {
        #expect(HeaderList.deltaSeconds("0") == 0)
        #expect(HeaderList.deltaSeconds("600") == 600)
        #expect(HeaderList.deltaSeconds("2147483648") == 1 << 31)
        #expect(HeaderList.deltaSeconds(String(repeating: "9", count: 5000)) == 1 << 31)
        for bad in ["", "-1", "+1", "1.5", "abc", " 1", "1 ", "０", "1e3"] {
            #expect(HeaderList.deltaSeconds(bad) == nil, "\(bad)")
        }
    }

    @Test func qualityFollowsTheQvalueGrammar() {
        #expect(HeaderList.quality("1") == 1)
        #expect(HeaderList.quality("1.000") == 1)
        #expect(HeaderList.quality("0") == 0)
        #expect(HeaderList.quality("0.5") == 0.5)
        #expect(HeaderList.quality("0.001") == 0.001)
        #expect(HeaderList.quality("0.") == 0)
        for bad in ["", "1.5", "2", "0.0001", "-0", ".5", "nan", "inf", "0x1", "1.001", "00"] {
            #expect(HeaderList.quality(bad) == nil, "\(bad)")
        }
    }

    @Test func unquoteRemovesOneLevel() {
        #expect(HeaderList.unquote("\"a\\\"b\"") == "a\"b")
        #expect(HeaderList.unquote("\"\"") == "")
        #expect(HeaderList.unquote("\"") == "\"")
        #expect(HeaderList.unquote("\"a\\\"") == "a")
        #expect(HeaderList.unquote("plain") == "plain")
    }

    @Test func entityTagListsMatchWeaklyAndStrongly() throws {
        let list = try #require(EntityTagList(headers("If-None-Match", "W/\"a\", \"b\"", "junk, \"c,d\""), "if-none-match"))
        #expect(list.matchesWeakly("\"a\""))
        #expect(list.matchesWeakly("\"b\""))
        #expect(list.matchesWeakly("\"c,d\""))
        #expect(!list.matchesWeakly("\"junk\""))
        #expect(!list.matchesStrongly("\"a\""))
        #expect(list.matchesStrongly("\"b\""))
        #expect(list.strongTags == ["\"b\"", "\"c,d\""])
        #expect(EntityTagList(headers("If-Match", "*"), "If-Match") == .any)
        #expect(EntityTagList(headers("If-Match", "\"a\", *"), "If-Match") == .any)
        #expect(EntityTagList(HTTPHeaders(), "If-Match") == nil)
        for bad in ["", "\"", "W/", "W/\"", "\"a", "a\"", "\"a b\"", "\"a\"b\""] {
            #expect(EntityTagList(headers("If-Match", bad), "If-Match") == .tags([]), "\(bad)")
        }
    }

    /// Every byte sequence up to three bytes from a small alphabet: nothing traps.
    @Test func shortValuesNeverTrap() {
        let alphabet = Array(" ,;=\"\\*W/q0.9a\t".utf8) + [0xFF, 0xC3]
        var count = 0
        for a in alphabet {
            for b in alphabet {
                for c in alphabet {
                    let value = String(decoding: [a, b, c], as: UTF8.self)
                    for element in HeaderList.split(value) {
                        let parsed = HeaderElement(parsing: element)
                        _ = parsed.value.map(HeaderList.deltaSeconds)
                        _ = parsed.parameter("q").map(HeaderList.quality)
                    }
                    _ = EntityTagList(HTTPHeaders([("E", value)]), "E")?.matchesWeakly("\"a\"")
                    count += 1
                }
            }
        }
        #expect(count == alphabet.count * alphabet.count * alphabet.count)
    }

    /// A lookup skips the comparisons when no field's name can match; it must never skip one
    /// that does: every name found in any casing, by every lookup (a subscript, a count, a
    /// list, `contains`), whether the fields came at init or one by one, and absent names not.
    @Test func lookupsFindEveryCasingAndNothingElse() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_!#$%&'*+.^`|~@[]")
        func recased(_ name: String) -> String {
            String(name.map {
                Bool.random(using: &generator) ? Character($0.uppercased()) : Character($0.lowercased())
            })
        }
        // Canonically equivalent spellings are different bytes: not the same name (String's
        // `==` says they are equal), so every lookup agrees with `same` on them.
        #expect(!HTTPHeaders.same("\u{F900}", "\u{8C48}") && HTTPHeaders.same("\u{F900}", "\u{F900}"))
        let unicode = HTTPHeaders([("\u{8C48}", "v")])
        #expect(unicode["\u{F900}"] == nil && unicode.count(of: "\u{F900}") == 0 && unicode["\u{8C48}"] == "v")
        let known = ["Authorization", "Cache-Control", "Pragma", "If-None-Match", "Accept-Encoding", "X-Request-Id",
                     "Content-Length", "Host", "TeamCache-Min-Position", "Connection", "a", "A", "@", "`"]
        for _ in 0..<2_000 {
            let random = (0..<Int.random(in: 1...3, using: &generator)).map { _ in
                let length = Int.random(in: 1...24, using: &generator)
                return String((0..<length).map { _ in alphabet.randomElement(using: &generator)! })
            }
            let names = random + known.shuffled(using: &generator).prefix(Int.random(in: 0...4, using: &generator))
            var added = HTTPHeaders()
            for name in names { added.add(recased(name), "v") }
            let given = HTTPHeaders(names.map { (recased($0), "v") })
            for headers in [added, given] {
                for name in names {
                    let asked = recased(name)
                    #expect(headers[asked] == "v" && headers.contains(asked), "\(asked) in \(names)")
                    #expect(headers.count(of: asked) == names.filter { HTTPHeaders.same($0, asked) }.count)
                    #expect(headers.list(asked).count == headers.count(of: asked))
                }
                let absent = (known + random.map { $0 + "x" }).filter { name in
                    !names.contains { HTTPHeaders.same($0, name) }
                }
                for name in absent {
                    #expect(headers[name] == nil && headers.count(of: name) == 0 && headers.list(name).isEmpty)
                }
            }
        }
    }

    /// The name filter keeps apart the fields clients commonly send and those a hit asks for
    /// that requests mostly lack: a lookup of one of these in a request of those compares
    /// nothing. (Not a correctness property, a cost one: a shared bit only costs compares.)
    @Test func commonFieldsAndAskedForAbsentOnesHaveBitsApart() {
        let sent = ["Host", "Authorization", "User-Agent", "Accept", "Accept-Encoding", "Connection", "Content-Type",
                    "Content-Length", "Transfer-Encoding", "TeamCache-Authorization", "Expect"]
        let asked = ["If-None-Match", "Cache-Control", "Pragma", "X-Request-Id", "TeamCache-Min-Position", "If-Match"]
        let sentBits = sent.reduce(UInt64(0)) { $0 | HTTPHeaders.bit(for: $1) }
        for name in asked { #expect(sentBits & HTTPHeaders.bit(for: name) == 0, "\(name)") }
        let headers = HTTPHeaders(sent.map { ($0, "v") })
        for name in asked { #expect(!headers.mayHave(name) && headers[name] == nil, "\(name)") }
    }
}
