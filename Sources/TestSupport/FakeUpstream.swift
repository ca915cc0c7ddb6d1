import Foundation
import Glibc

/// `clients/python/tests/fake_upstream.py` as a child process: an OpenAI- and Anthropic-shaped
/// upstream (and the plain shapes `/_test/…`), over plain HTTP or TLS. It serves until its
/// standard input closes, so it goes when the test process does, whatever way that ends.
public final class FakeUpstream: @unchecked Sendable {
    // @unchecked: its members are set in init and only read after (the process is signalled
    // and waited for in deinit alone).
    public let process = Process()
    public let port: Int
    private let input = Pipe()

    /// Starts it; with `tls`, it serves that certificate and key.
    public init(tls: (certificate: String, key: String)? = nil) throws {
        let script = TestPaths.repository.appendingPathComponent("clients/python/tests/fake_upstream.py").path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script] + (tls.map { ["--tls-cert", $0.certificate, "--tls-key", $0.key] } ?? [])
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = input
        process.standardError = FileHandle.nullDevice
        try process.run()
        // "port N\n", within a few seconds.
        var line = [UInt8]()
        let deadline = Date().addingTimeInterval(10)
        while !line.contains(UInt8(ascii: "\n")) && Date() < deadline {
            let data = output.fileHandleForReading.availableData
            if data.isEmpty { break }
            line += data
        }
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("port "), let port = Int(text.dropFirst(5)) else {
            process.terminate()
            throw RawClient.Failure.malformed("the fake upstream did not start: \(text)")
        }
        self.port = port
    }

    deinit {
        try? input.fileHandleForWriting.close()
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// A certificate authority made for one test run with the `openssl` command, and a server
/// certificate it signed for `localhost` (and nothing else: not 127.0.0.1).
public struct ThrowawayCA: Sendable {
    public let directory: URL
    public var caCertificate: String { directory.appendingPathComponent("ca.pem").path }
    public var serverCertificate: String { directory.appendingPathComponent("server.pem").path }
    public var serverKey: String { directory.appendingPathComponent("server.key").path }

    public init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("teamcache-ca-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let extensions = directory.appendingPathComponent("server.ext")
        try "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
            .write(to: extensions, atomically: true, encoding: .utf8)
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=TeamCache throwaway test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "server.ext"],
        ]
        for step in steps {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["openssl"] + step
            process.currentDirectoryURL = directory
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                throw RawClient.Failure.malformed("openssl \(step[0]) failed (\(process.terminationStatus))")
            }
        }
    }
}
