import Cryptography
import Foundation

/// The master keys that wrap the namespaces' data keys, read from TEAMCACHE_MASTER_KEY_FILE
/// (never from argv, the environment's value or the database): one key a line, 64 hex digits
/// or base64 of 32 bytes; `#` starts a comment. The first line wraps new data keys; every
/// line unwraps, so a rotation adds the new key first, re-wraps, then drops the old one.
public struct MasterKeys: Sendable {
    public struct Key: Sendable {
        /// A fingerprint stored beside each wrapped data key (not secret: it says which master
        /// key to use, and a wrong file is named before any unwrap is tried).
        public let id: String
        package let bytes: [UInt8]
    }

    /// Every key of the file, in its order (the first is `sealing`).
    public let keys: [Key]
    /// The key new data keys are wrapped with: the file's first.
    public let sealing: Key

    /// Only `parse` makes one, from a file holding at least one key.
    private init(sealing: Key, others: [Key]) {
        self.sealing = sealing
        keys = [sealing] + others
    }

    public enum Failure: Error, CustomStringConvertible, Equatable {
        case unreadable(String)
        case malformed(line: Int)
        case empty

        public var description: String {
            switch self {
            case .unreadable(let path): "TEAMCACHE_MASTER_KEY_FILE: cannot read \(path)"
            case .malformed(let line):
                "TEAMCACHE_MASTER_KEY_FILE: line \(line) is not a key (64 hex digits or base64 of 32 bytes)"
            case .empty: "TEAMCACHE_MASTER_KEY_FILE holds no key"
            }
        }
    }

    /// Parses a key file's text (total: any text is a set of keys or a `Failure`).
    public static func parse(_ text: String) throws(Failure) -> MasterKeys {
        var keys: [Key] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first
                .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
            if line.isEmpty { continue }
            guard let bytes = decode(line) else { throw .malformed(line: index + 1) }
            keys.append(Key(id: fingerprint(bytes), bytes: bytes))
        }
        guard let first = keys.first else { throw .empty }
        return MasterKeys(sealing: first, others: Array(keys.dropFirst()))
    }

    public static func load(path: String) throws(Failure) -> MasterKeys {
        guard let data = FileManager.default.contents(atPath: path), data.count <= 64 * 1024,
              let text = String(data: data, encoding: .utf8) else { throw .unreadable(path) }
        return try parse(text)
    }

    /// A new key line (for `teamcache keys generate`).
    public static func generateLine() -> String { Bytes.hex(Bytes.random(count: AESGCM.keyByteCount)) }

    public func key(id: String) -> Key? { keys.first { $0.id == id } }

    private static func decode(_ line: String) -> [UInt8]? {
        let utf8 = Array(line.utf8)
        if utf8.count == 64, let bytes = Bytes.fromHex(line), bytes.count == 32 { return bytes }
        guard utf8.count <= 64, let data = Data(base64Encoded: line), data.count == 32 else { return nil }
        return Array(data)
    }

    private static func fingerprint(_ key: [UInt8]) -> String {
        "mk-" + Bytes.hex(Array(SHA256.hash(Array("teamcache master key fingerprint".utf8) + key).prefix(8)))
    }
}
