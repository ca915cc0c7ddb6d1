import Foundation
import TeamCache
import TestSupport

/// A fake model upstream (`clients/python/tests/fake_upstream.py`, a child process) and the
/// upstreams file that points gateway tests at it: `local` (OpenAI-shaped, base `/v1`),
/// `claude` (Anthropic-shaped, no base path), `keyed` (as `local`, with a server-held key),
/// `raw` (the fake's root, short deadlines: the `/_test/…` shapes), `down` (nothing listens).
final class GatewayHarness: @unchecked Sendable {
    // @unchecked: set in init, only read after.
    static let serverKey = "sk-server-held-0123456789"
    let upstream: FakeUpstream
    let file: String

    init(tls ca: ThrowawayCA? = nil) throws {
        upstream = try FakeUpstream(tls: ca.map { ($0.serverCertificate, $0.serverKey) })
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("teamcache-gw-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let keyFile = folder.appendingPathComponent("key").path
        try (Self.serverKey + "\n").write(toFile: keyFile, atomically: true, encoding: .utf8)
        let port = upstream.port
        var upstreams: [String: Any]
        if let ca {
            upstreams = [
                "secure": ["url": "https://localhost:\(port)/v1", "kind": "openai", "ca_file": ca.caCertificate],
                // The system store does not know the throwaway CA.
                "untrusted": ["url": "https://localhost:\(port)/v1", "kind": "openai"],
                // The certificate names localhost, not the address.
                "wrongname": ["url": "https://127.0.0.1:\(port)/v1", "kind": "openai", "ca_file": ca.caCertificate],
            ]
        } else {
            upstreams = [
                "local": ["url": "http://127.0.0.1:\(port)/v1", "kind": "openai"],
                "claude": ["url": "http://127.0.0.1:\(port)", "kind": "anthropic"],
                "keyed": ["url": "http://127.0.0.1:\(port)/v1", "kind": "openai", "key_file": keyFile],
                "keyedclaude": ["url": "http://127.0.0.1:\(port)", "kind": "anthropic", "key_file": keyFile],
                "raw": ["url": "http://127.0.0.1:\(port)", "kind": "openai", "first_byte_timeout": 0.5,
                        "idle_timeout": 0.5],
                "down": ["url": "http://127.0.0.1:1/v1", "kind": "openai", "connect_timeout": 1],
                "impatient": ["url": "http://127.0.0.1:\(port)/v1", "kind": "openai", "first_byte_timeout": 2],
            ]
        }
        file = folder.appendingPathComponent("upstreams.json").path
        try JSONSerialization.data(withJSONObject: upstreams).write(to: URL(fileURLWithPath: file))
    }

    /// A service (auth on) whose gateway knows these upstreams.
    func service(_ tune: @escaping (inout Configuration) -> Void = { _ in }) throws -> TestService {
        let upstreams = try Configuration.load(environment: ["TEAMCACHE_UPSTREAMS_FILE": file]).upstreams
        return try TestService { configuration in
            configuration.upstreams = upstreams
            tune(&configuration)
        }
    }

    /// Every call the upstream has received, each as the fake recorded it.
    func calls() throws -> [[String: Any]] {
        let client = try RawClient(port: upstream.port, timeout: 10)
        let answer = try client.request("GET", "/_test/calls")
        return try JSONSerialization.jsonObject(with: Data(answer.body)) as? [[String: Any]] ?? []
    }

    /// How many calls carried `marker` in their prompt.
    func count(_ marker: String) throws -> Int {
        try calls().filter { ($0["text"] as? String)?.contains(marker) == true }.count
    }

    /// The last call whose prompt carried `marker`.
    func call(_ marker: String) throws -> [String: Any]? {
        try calls().last { ($0["text"] as? String)?.contains(marker) == true }
    }
}

/// Chat completion bodies with a unique prompt (so tests sharing an upstream count apart).
enum ModelBodies {
    static func chat(_ prompt: String, stream: Bool = false, model: String = "gpt-4o-mini") -> String {
        "{\"model\":\"\(model)\",\(stream ? "\"stream\":true," : "")\"messages\":[{\"role\":\"user\",\"content\":\"\(prompt)\"}]}"
    }

    static func messages(_ prompt: String, stream: Bool = false) -> String {
        "{\"model\":\"claude-test\",\"max_tokens\":64,\(stream ? "\"stream\":true," : "")"
            + "\"system\":\"be brief\",\"messages\":[{\"role\":\"user\",\"content\":\"\(prompt)\"}]}"
    }

    static func unique(_ word: String) -> String { "\(word) \(UUID().uuidString.prefix(8))" }
}

/// A streamed answer read part by part, each with when it arrived.
struct StreamedAnswer {
    let head: RawClient.Response
    var parts: [(bytes: [UInt8], at: Date)] = []
    var body: [UInt8] { parts.flatMap(\.bytes) }
    var text: String { String(decoding: body, as: UTF8.self) }

    /// When the answer so far first held `marker`.
    func arrival(of marker: String) -> Date? {
        var seen: [UInt8] = []
        for part in parts {
            seen += part.bytes
            if String(decoding: seen, as: UTF8.self).contains(marker) { return part.at }
        }
        return nil
    }

    /// Sends `body` to `path` and reads the answer (chunked: chunk by chunk; else whole).
    static func read(port: Int, _ path: String, method: String = "POST", headers: [(String, String)],
                     body: String) throws -> StreamedAnswer {
        let client = try RawClient(port: port, timeout: 30)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(body.utf8.count)\r\n\r\n"
        try client.send(head + body)
        let answer = try client.readHead()
        var streamed = StreamedAnswer(head: answer)
        if answer.header("Transfer-Encoding") == "chunked" {
            while let part = try client.readChunk() { streamed.parts.append((part, Date())) }
        } else if let length = answer.header("Content-Length").flatMap(Int.init) {
            var bytes: [UInt8] = []
            while bytes.count < length { bytes += try client.readSome() }
            streamed.parts.append((bytes, Date()))
        }
        return streamed
    }
}
