#if canImport(CryptoKit)
import CryptoKit
#else
import Cryptography
#endif

/// What an LLM / AI request is, for caching: the server derives the entry key from it.
///
/// Key derivation (docs/descriptor-keys.md specifies it for clients in any language):
/// 1. `prompt`: CRLF and lone CR become LF, then leading and trailing ASCII whitespace
///    (space, tab, LF, VT, FF) is trimmed. `messages`, `schema`, `params`: canonical JSON.
/// 2. Seven fields in order: the tag `teamcache.descriptor.v1`, `model`, the input kind
///    (`prompt` or `messages`), the input, `schema`, `params`, `version`.
/// 3. Each field is one byte 0x00 when absent (JSON null counts as absent), or 0x01
///    followed by its UTF-8 length as 8 bytes big-endian and the UTF-8 bytes.
/// 4. key = lowercase hex SHA-256 of the concatenation.
public struct Descriptor: Sendable, Equatable {
    public enum Input: Sendable, Equatable {
        case prompt(String)
        case messages(JSONValue)
    }

    public static let tag = "teamcache.descriptor.v1"
    public static let maxNameBytes = 256

    public let model: String
    public let input: Input
    public let schema: JSONValue?
    public let params: JSONValue?
    public let version: String?

    public init(model: String, input: Input, schema: JSONValue? = nil, params: JSONValue? = nil,
                version: String? = nil) {
        self.model = model
        if case .prompt(let text) = input {
            self.input = .prompt(Self.normalise(prompt: text))
        } else {
            self.input = input
        }
        self.schema = schema == .null ? nil : schema
        self.params = params == .null ? nil : params
        self.version = version
    }

    /// Reads the descriptor fields of a request object; other members are the caller's.
    public init(json: JSONValue) throws(DescriptorError) {
        guard let model = json["model"]?.stringValue, !model.isEmpty, model.utf8.count <= Self.maxNameBytes,
              !model.utf8.contains(0) else {
            throw DescriptorError("`model` is required: a non-empty string of at most 256 bytes, without NUL.")
        }
        let prompt = json["prompt"], messages = json["messages"]
        let input: Input
        switch (prompt, messages) {
        case (.some(.string(let text)), nil):
            input = .prompt(text)
        case (nil, .some(.array(let items))):
            guard !items.isEmpty, items.allSatisfy({ if case .object = $0 { true } else { false } }) else {
                throw DescriptorError("`messages` must be a non-empty array of objects.")
            }
            input = .messages(.array(items))
        case (nil, nil), (.some, .some):
            throw DescriptorError("Give exactly one of `prompt` (a string) or `messages` (an array of objects).")
        default:
            throw DescriptorError("`prompt` must be a string and `messages` an array of objects.")
        }
        if let params = json["params"], params != .null {
            guard case .object = params else { throw DescriptorError("`params` must be an object.") }
        }
        var version: String?
        if let value = json["version"], value != .null {
            guard let text = value.stringValue, text.utf8.count <= Self.maxNameBytes, !text.utf8.contains(0) else {
                throw DescriptorError("`version` must be a string of at most 256 bytes, without NUL.")
            }
            version = text
        }
        self.init(model: model, input: input, schema: json["schema"], params: json["params"], version: version)
    }

    /// The entry key: lowercase hex SHA-256 over the length-prefixed fields.
    public var key: String {
        Self.sha256Hex(encodedFields)
    }

    /// The exact bytes hashed for the key (exposed for the worked example in docs/descriptor-keys.md and tests).
    public var encodedFields: [UInt8] {
        let kind: String, text: String
        switch input {
        case .prompt(let prompt): (kind, text) = ("prompt", prompt)
        case .messages(let messages): (kind, text) = ("messages", messages.canonical)
        }
        let fields: [String?] = [Self.tag, model, kind, text, schema?.canonical, params?.canonical, version]
        var out: [UInt8] = []
        for field in fields {
            guard let field else {
                out.append(0)
                continue
            }
            let bytes = Array(field.utf8)
            out.append(1)
            withUnsafeBytes(of: UInt64(bytes.count).bigEndian) { out.append(contentsOf: $0) }
            out.append(contentsOf: bytes)
        }
        return out
    }

    /// The first 200 characters of the prompt, or of the last user message's text (NUL,
    /// which a database text column cannot hold, shown as U+FFFD).
    public var promptDigest: String { Self.digest(of: digestSource) }

    /// The most bytes a prompt digest keeps: 200 characters can be any length (one character
    /// may carry a million combining marks), and nothing else bounds what is stored beside a
    /// 1-byte body, nor what a listing or an export page holds of it.
    public static let maxDigestBytes = 800

    /// `text`'s first 200 characters, NUL shown as U+FFFD, cut to `maxDigestBytes` on a
    /// Unicode scalar's boundary: what every writer (and an import) keeps of a prompt.
    public static func digest(of text: String) -> String {
        var scalars = String.UnicodeScalarView()
        var bytes = 0
        for scalar in String(text.prefix(200)).unicodeScalars {
            let kept = scalar == "\u{0}" ? "\u{FFFD}" : scalar
            bytes += String(kept).utf8.count
            guard bytes <= maxDigestBytes else { break }
            scalars.append(kept)
        }
        return String(scalars)
    }

    private var digestSource: String {
        switch input {
        case .prompt(let text): return text
        case .messages(.array(let items)):
            let userText = items.reversed().first(where: { $0["role"]?.stringValue == "user" })?["content"]?.stringValue
            return userText ?? JSONValue.array(items).canonical
        case .messages: return ""
        }
    }

    /// CRLF and CR → LF, then trim ASCII whitespace at both ends.
    public static func normalise(prompt: String) -> String {
        let unified = prompt.replacingAll("\r\n", with: "\n").replacingAll("\r", with: "\n")
        let whitespace: Set<Unicode.Scalar> = [" ", "\t", "\n", "\u{0B}", "\u{0C}"]
        var scalars = Substring(unified).unicodeScalars[...]
        while let first = scalars.first, whitespace.contains(first) { scalars.removeFirst() }
        while let last = scalars.last, whitespace.contains(last) { scalars.removeLast() }
        return String(String.UnicodeScalarView(scalars))
    }
}

/// A descriptor that cannot be used (answered with 422).
extension Descriptor {
    /// Lowercase hex SHA-256: CryptoKit on Apple platforms (an iOS app has no OpenSSL to link),
    /// OpenSSL's EVP through `Cryptography` elsewhere.
    static func sha256Hex(_ bytes: [UInt8]) -> String {
        #if canImport(CryptoKit)
        let hex = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        for byte in CryptoKit.SHA256.hash(data: bytes) {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
        #else
        return Bytes.hex(Cryptography.SHA256.hash(bytes))
        #endif
    }
}

public struct DescriptorError: Error, Equatable, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
}

extension String {
    /// Replaces every occurrence of `target` (Unicode scalar comparison, so "\r\n" is not
    /// a single Character that hides a lone "\r").
    func replacingAll(_ target: String, with replacement: String) -> String {
        let source = Array(unicodeScalars), pattern = Array(target.unicodeScalars)
        var out = String.UnicodeScalarView()
        var index = 0
        while index < source.count {
            if index + pattern.count <= source.count && Array(source[index..<index + pattern.count]) == pattern {
                out.append(contentsOf: replacement.unicodeScalars)
                index += pattern.count
            } else {
                out.append(source[index])
                index += 1
            }
        }
        return String(out)
    }
}

extension Descriptor {
    /// The descriptor as request members (for clients sending it to the server).
    public var jsonMembers: [(String, JSONValue)] {
        var members: [(String, JSONValue)] = [("model", .string(model))]
        switch input {
        case .prompt(let text): members.append(("prompt", .string(text)))
        case .messages(let messages): members.append(("messages", messages))
        }
        if let schema { members.append(("schema", schema)) }
        if let params { members.append(("params", params)) }
        if let version { members.append(("version", .string(version))) }
        return members
    }
}
