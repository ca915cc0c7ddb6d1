@testable import TeamCache
import Testing

/// The namespace glob of scoped tokens and the bearer scheme check, which run on every
/// request without allocating, against plain reference definitions.
@Suite struct TokenMatchingTests {
    /// `*` matches any run of bytes: by recursion, slow and obviously right.
    private func reference(_ pattern: ArraySlice<UInt8>, _ text: ArraySlice<UInt8>) -> Bool {
        guard let first = pattern.first else { return text.isEmpty }
        if first == UInt8(ascii: "*") {
            return (text.startIndex...text.endIndex).contains { reference(pattern.dropFirst(), text[$0...]) }
        }
        return text.first == first && reference(pattern.dropFirst(), text.dropFirst())
    }

    @Test func globAgreesWithTheReferenceOnRandomPatterns() {
        let alphabet = Array("ab*".utf8), letters = Array("ab".utf8)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let pattern = (0..<Int.random(in: 0...6, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            let text = (0..<Int.random(in: 0...7, using: &generator)).map { _ in letters.randomElement(using: &generator)! }
            let p = String(decoding: pattern, as: UTF8.self), t = String(decoding: text, as: UTF8.self)
            #expect(APIToken.glob(p, matches: t) == reference(pattern[...], text[...]), "\(p) ~ \(t)")
        }
    }

    @Test func globOnNamespaceNames() {
        #expect(APIToken.glob("team-a*", matches: "team-a-prod"))
        #expect(APIToken.glob("team-a*", matches: "team-a"))
        #expect(!APIToken.glob("team-a*", matches: "team-b"))
        #expect(APIToken.glob("*", matches: ""))
        #expect(APIToken.glob("*-prod", matches: "x-prod") && !APIToken.glob("*-prod", matches: "-pro"))
        #expect(APIToken.glob("a*a", matches: "aa") && !APIToken.glob("a*a", matches: "a"))
        #expect(APIToken.glob("ünï*", matches: "ünïcode") && !APIToken.glob("exact", matches: "exactly"))
    }

    @Test func theBearerSchemeInAnyCaseAndNothingElse() {
        func isBearer(_ scheme: String) -> Bool { Array(scheme.utf8).withUnsafeBufferPointer(Authenticator.isBearer) }
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] { #expect(isBearer(scheme)) }
        for scheme in ["", "Beare", "Bearers", "Basic", "Bearer\u{0}", "B\u{2}arer", "bearer ".dropLast() + "!"] {
            #expect(!isBearer(String(scheme)), "\(scheme)")
        }
    }

    /// The secret is everything after the first space of `Bearer <secret>`, 1 to 256 bytes.
    @Test func theSecretAfterTheScheme() {
        func start(_ value: String) -> Int? { Array(value.utf8).withUnsafeBufferPointer(Authenticator.bearerSecretStart) }
        #expect(start("Bearer tc_abc") == 7)
        #expect(start("bEARER x") == 7)
        #expect(start("Bearer  two-spaces") == 7)  // the secret " two-spaces" is kept as sent
        #expect(start("Bearer " + String(repeating: "a", count: 256)) == 7)
        for value in ["Bearer", "Bearer ", "Basic abc", " Bearer abc", "Bearerabc", "",
                      "Bearer " + String(repeating: "a", count: 257), "Béarer abc"] {
            #expect(start(value) == nil, "\(value)")
        }
    }
}
