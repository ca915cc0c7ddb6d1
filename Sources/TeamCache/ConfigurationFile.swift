import CacheKeys
import Foundation

/// A JSON file a setting names (the upstreams, the prices): read whole at start, at most
/// 1 MiB, its top level an object. Its problems are said in words that follow the file's
/// path in the start's error ("… this one is larger than 1 MiB").
enum ConfigurationFile {
    struct Problem: Error, CustomStringConvertible {
        let description: String
    }

    /// The file's top-level members; `expected` says what it should have been when it is not an object.
    static func object(at path: String, expected: String) throws -> [(String, JSONValue)] {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw Problem(description: "cannot be read (\(error.localizedDescription))")
        }
        guard data.count <= 1 << 20 else { throw Problem(description: "is larger than 1 MiB") }
        guard case .object(let members)? = try? JSONParser.parse(Array(data)) else {
            throw Problem(description: "is not \(expected)")
        }
        return members
    }
}
