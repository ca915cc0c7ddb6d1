import CacheCore
import Foundation

/// Flags of one command: `--name value`, `--name=value`, or a bare switch.
struct Arguments {
    var values: [String: String] = [:]
    var switches: Set<String> = []
    var positional: [String] = []

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Parses `words`; `valued` flags take a value, `switches` do not; anything else is an error,
    /// and so is a bare word past the first `positional` (an ignored word once turned
    /// `export team-a` into an export of every namespace, and `--scopes read, write` into read).
    init(_ words: [String], valued: Set<String>, switches allowed: Set<String>, positional maximum: Int = 0) throws {
        var index = 0
        while index < words.count {
            let word = words[index]
            index += 1
            guard word.hasPrefix("--") else {
                positional.append(word)
                continue
            }
            let parts = word.split(separator: "=", maxSplits: 1).map(String.init)
            let name = parts[0]
            if allowed.contains(name) || name == "--help" {
                guard parts.count == 1 else { throw Failure(description: "\(name) takes no value") }
                switches.insert(name)
            } else if valued.contains(name) {
                if parts.count == 2 {
                    values[name] = parts[1]
                } else if index < words.count {
                    values[name] = words[index]
                    index += 1
                } else {
                    throw Failure(description: "\(name) needs a value")
                }
            } else {
                throw Failure(description: "unknown option \(name)")
            }
        }
        if positional.count > maximum {
            throw Failure(description: "unexpected argument '\(positional[maximum])' (options take the form --name value)")
        }
    }
}

/// Writes to standard error (fd 2) without the Swift 6-unsafe `stderr` global.
func printError(_ text: String) {
    let line = text + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}

/// The flags every command that reaches the database takes.
let databaseFlags: Set<String> = ["--database-url", "--data-dir", "--migrations-dir", "--log-level"]

extension Arguments {
    /// `--namespace NS`, checked as the API checks a namespace (nil when not given).
    func namespace() throws -> Namespace? {
        try values["--namespace"].map { text in
            guard let namespace = Namespace(text) else { throw Failure(description: "invalid namespace \(text)") }
            return namespace
        }
    }
}
