import CacheKeys
import Foundation
import HTTPClient

/// `TEAMCACHE_UPSTREAMS_FILE`: a JSON object of upstreams by name, each
/// `{"url", "kind", "key_file"?, "ca_file"?, "connect_timeout"?, "first_byte_timeout"?,
/// "idle_timeout"?}`, replacing or adding to the defaults (`openai`, `anthropic`). Anything
/// wrong stops the service at start, naming the file, the upstream and the problem.
enum UpstreamsFile {
    static let members: Set<String> = ["url", "kind", "key_file", "ca_file", "connect_timeout",
                                       "first_byte_timeout", "idle_timeout", "total_timeout"]

    typealias Problem = ConfigurationFile.Problem

    /// The defaults, with the file's upstreams over them (nil path: the defaults alone).
    static func load(path: String?) throws -> [String: Upstream] {
        // One context for the system store, shared by the defaults and the file's upstreams
        // without a CA file of their own (it is read once, at start).
        let system: TLSContext
        do { system = try TLSContext(caFile: nil) } catch { throw Problem(description: error.detail) }
        var upstreams = try Upstream.defaults(tls: system)
        guard let path else { return upstreams }
        let entries = try ConfigurationFile.object(at: path, expected: "a JSON object of upstreams by name")
        var contexts: [String: TLSContext] = ["": system]
        for (name, entry) in entries {
            do {
                upstreams[name] = try upstream(name, entry, contexts: &contexts)
            } catch let problem as Problem {
                throw Problem(description: "upstream \"\(name)\": \(problem.description)")
            }
        }
        return upstreams
    }

    private static func upstream(_ name: String, _ entry: JSONValue, contexts: inout [String: TLSContext]) throws
        -> Upstream {
        guard isName(name) else {
            throw Problem(description: "the name must be 1 to 64 of a-z, 0-9, '-', '_' (a path segment)")
        }
        guard case .object(let given) = entry else { throw Problem(description: "must be an object") }
        if let unknown = given.first(where: { !members.contains($0.0) }) {
            throw Problem(description: "has an unknown member \"\(unknown.0)\" (known: \(members.sorted().joined(separator: ", ")))")
        }
        guard let url = entry["url"]?.stringValue else { throw Problem(description: "needs \"url\"") }
        let origin: Origin
        do { origin = try Origin(parsing: url) } catch { throw Problem(description: "\"url\" \(error.description)") }
        guard let kindName = entry["kind"]?.stringValue, let kind = ModelRequest.Kind(rawValue: kindName) else {
            throw Problem(description: "needs \"kind\": \"openai\" or \"anthropic\"")
        }
        var deadlines = ClientDeadlines()
        deadlines.connect = try seconds(entry["connect_timeout"], "connect_timeout", default: deadlines.connect)
        deadlines.firstByte = try seconds(entry["first_byte_timeout"], "first_byte_timeout", default: deadlines.firstByte)
        deadlines.idle = try seconds(entry["idle_timeout"], "idle_timeout", default: deadlines.idle)
        deadlines.total = try seconds(entry["total_timeout"], "total_timeout", default: deadlines.total)
        let key = try entry["key_file"].map { try credential($0) }
        var tls: TLSContext?
        if origin.secure {
            let caFile = try entry["ca_file"].map { value -> String in
                guard let path = value.stringValue, !path.isEmpty else { throw Problem(description: "\"ca_file\" must be a path") }
                return path
            }
            let cacheKey = caFile ?? ""
            if let known = contexts[cacheKey] {
                tls = known
            } else {
                do { tls = try TLSContext(caFile: caFile) } catch { throw Problem(description: error.detail) }
                contexts[cacheKey] = tls
            }
        } else if entry["ca_file"] != nil {
            throw Problem(description: "\"ca_file\" is only for an https \"url\"")
        }
        return Upstream(name: name, origin: origin, kind: kind, key: key, tls: tls, deadlines: deadlines)
    }

    static func isName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count) && name.utf8.allSatisfy {
            ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
                || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
        }
    }

    private static func seconds(_ value: JSONValue?, _ name: String, default fallback: Double) throws -> Double {
        guard let value else { return fallback }
        guard case .number(let text) = value, let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
            throw Problem(description: "\"\(name)\" must be a number of seconds above 0 and at most 86400")
        }
        return seconds
    }

    /// The key in `key_file`: one line of printable ASCII (it goes into a header).
    private static func credential(_ value: JSONValue) throws -> String {
        guard let path = value.stringValue, !path.isEmpty else { throw Problem(description: "\"key_file\" must be a path") }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Problem(description: "\"key_file\" \(path) cannot be read")
        }
        let key = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !key.isEmpty, key.utf8.count <= 4096, key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Problem(description: "\"key_file\" \(path) must hold one key of printable ASCII without spaces")
        }
        return key
    }
}
