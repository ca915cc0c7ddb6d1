import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// Reading the parts of a request the cache routes share, each failure a 4xx problem.
enum RequestParsing {
    static func namespace(_ request: HTTPRequest) throws -> Namespace {
        guard let namespace = request.pathParameters["ns"].flatMap(Namespace.init) else {
            throw HTTPError(400, "The namespace must match ^[a-z0-9][a-z0-9._-]{0,63}$.", title: "Invalid namespace")
        }
        return namespace
    }

    static func key(_ request: HTTPRequest) throws -> EntryKey {
        guard let key = request.pathParameters["key"].flatMap(EntryKey.init) else {
            throw HTTPError(400, "The key must be 1 to 512 bytes after percent-decoding, without NUL.",
                            title: "Invalid key")
        }
        return key
    }

    static func query(_ request: HTTPRequest) throws -> [String: String] {
        guard let items = request.queryItems else { throw HTTPError(400, "The query string is malformed.") }
        return items
    }

    /// An integer query parameter within `range`, or nil when absent.
    static func integer(_ name: String, in items: [String: String], _ range: ClosedRange<Int>) throws -> Int? {
        guard let text = items[name] else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw HTTPError(400, "`\(name)` must be an integer from \(range.lowerBound) to \(range.upperBound).")
        }
        return value
    }

    /// The body as a JSON object; 400 when it is not one. The declared Content-Type is not
    /// enforced: `curl -d` sends form encoding, and the body's syntax is what matters.
    static func jsonObject(_ request: HTTPRequest) throws -> JSONValue {
        let value: JSONValue
        do {
            value = try JSONParser.parse(request.body)
        } catch let failure as JSONParser.Failure {
            throw HTTPError(400, "The body is not valid JSON: \(failure.description).", title: "Malformed JSON")
        }
        guard case .object = value else { throw HTTPError(400, "The body must be a JSON object.") }
        return value
    }

    /// Refuses members outside `allowed`: a misspelt field must not silently change what happens.
    static func rejectUnknownMembers(_ object: JSONValue, allowed: Set<String>, status: Int = 422) throws {
        guard case .object(let members) = object else { return }
        if let unknown = members.first(where: { !allowed.contains($0.0) }) {
            throw HTTPError(status, "Unknown member `\(unknown.0)`; allowed: \(allowed.sorted().joined(separator: ", ")).")
        }
    }

    /// `Cache-Tag` or a `tags` array: each tag 1 to 128 bytes, at most 64.
    static func tags(_ values: [String]) throws -> [String] {
        guard values.count <= 64 else { throw invalidTags }
        return Array(Set(try values.map(tag))).sorted()
    }

    /// One tag: 1 to 128 bytes, without NUL.
    static func tag(_ value: String) throws -> String {
        guard (1...128).contains(value.utf8.count), !value.utf8.contains(0) else { throw invalidTags }
        return value
    }

    private static var invalidTags: HTTPError {
        HTTPError(400, "Tags: at most 64, each 1 to 128 bytes, without NUL.", title: "Invalid tags")
    }
}
