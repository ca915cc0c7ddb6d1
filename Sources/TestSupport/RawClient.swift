import Foundation
import Glibc

/// A blocking TCP client for tests that need exact bytes on the wire (pipelining, slow
/// clients, malformed requests), with a receive timeout so a test can never hang.
public final class RawClient {
    public let fd: Int32
    private var buffer: [UInt8] = []

    public struct Response {
        public let status: Int
        public let headers: [(String, String)]
        public let body: [UInt8]

        public func header(_ name: String) -> String? {
            headers.first(where: { $0.0.lowercased() == name.lowercased() })?.1
        }

        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public enum Failure: Error {
        case connect(Int32)
        case closed
        case timeout
        case malformed(String)
    }

    /// `from`: a loopback source address (127.x.y.z) to connect from, so one test can act as
    /// many clients.
    /// `receiveBuffer`: the socket's receive buffer in bytes (set before connecting, so the
    /// window is small from the start), for a client that reads slowly.
    public init(port: Int, timeout: TimeInterval = 5, from source: String? = nil, receiveBuffer: Int? = nil) throws {
        // The socket is made and connected before `fd` is set: a throw then leaves no object
        // whose deinit would close the number again. (It did: a failed connect closed its fd,
        // then deinit closed the same number once more, by then reused by another thread's
        // socket, often the in-process server's side of a new connection, which its client
        // saw closed before any answer. Under load, about one request in 12,000.)
        fd = try Self.connected(port: port, from: source, receiveBuffer: receiveBuffer)
        setTimeout(timeout)
    }

    private static func connected(port: Int, from source: String?, receiveBuffer: Int?) throws -> Int32 {
        // Close-on-exec: a test that spawns a process (pg_ctl starting a cluster) would otherwise
        // hand it this socket, and the connection would outlive its client, still counted.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure.connect(errno) }
        if var bytes = receiveBuffer.map(Int32.init) {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, socklen_t(MemoryLayout<Int32>.size))
        }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                let code = errno
                Glibc.close(fd)
                throw Failure.connect(code)
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw Failure.connect(code)
        }
        return fd
    }

    deinit { Glibc.close(fd) }

    /// Hangs up as a client that goes away does (the descriptor itself is closed at deinit:
    /// closing it here could close a number another thread has been given since).
    public func hangUp() {
        var abort = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
        shutdown(fd, Int32(SHUT_RDWR))
    }

    public func setTimeout(_ seconds: TimeInterval) {
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// One request on this (kept-alive) connection, and its response.
    public func request(_ method: String, _ path: String, headers: [(String, String)] = [],
                        body: [UInt8] = []) throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "PUT" || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        try send(Array((head + "\r\n").utf8) + body)
        return try readResponse(head: method == "HEAD")
    }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // A signal (SIGCHLD from another test's child process) interrupts, it does not close.
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw Failure.closed }
            offset += written
        }
    }

    /// Reads one response (Content-Length framed, or until close). `head` skips the body.
    public func readResponse(head: Bool = false) throws -> Response {
        let response = try readHead()
        let (status, headers) = (response.status, response.headers)
        let lengthText = headers.first(where: { $0.0.lowercased() == "content-length" })?.1
        if head || status == 204 || status == 304 || status < 200 {
            return Response(status: status, headers: headers, body: [])
        }
        if let lengthText, let length = Int(lengthText) {
            while buffer.count < length { try fill() }
            let body = Array(buffer[..<length])
            buffer.removeFirst(length)
            return Response(status: status, headers: headers, body: body)
        }
        while (try? fill()) != nil {}
        defer { buffer = [] }
        return Response(status: status, headers: headers, body: buffer)
    }

    /// Reads a response's head alone (status and fields); its body stays to be read, with
    /// `readChunk` for a chunked one or `readSome` for one delimited by the close.
    public func readHead() throws -> Response {
        let headEnd = try readUntil([13, 10, 13, 10])
        let headText = String(decoding: buffer[..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd + 4)
        var lines = headText.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw Failure.malformed(headText) }
        let headers = lines.compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return Response(status: status, headers: headers, body: [])
    }

    /// The next chunk of a chunked body; nil for the last (empty) chunk, whose end is read too.
    public func readChunk() throws -> [UInt8]? {
        let lineEnd = try readUntil([13, 10])
        let sizeText = String(decoding: buffer[..<lineEnd], as: UTF8.self)
        guard let size = Int(sizeText.split(separator: ";").first ?? "", radix: 16) else {
            throw Failure.malformed("chunk size \(sizeText)")
        }
        buffer.removeFirst(lineEnd + 2)
        while buffer.count < size + 2 { try fill() }
        let data = Array(buffer[..<size])
        guard buffer[size] == 13, buffer[size + 1] == 10 else { throw Failure.malformed("chunk end") }
        buffer.removeFirst(size + 2)
        return size == 0 ? nil : data
    }

    /// Whatever bytes come next (at least one): what is buffered, else one read.
    public func readSome() throws -> [UInt8] {
        if buffer.isEmpty { try fill() }
        defer { buffer = [] }
        return buffer
    }

    /// Everything until the connection ends, and how it ended: `reset` true for a reset
    /// (ECONNRESET), false for an orderly close (EOF); throws on a timeout.
    public func readUntilEnd() throws -> (bytes: [UInt8], reset: Bool) {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count > 0 {
                buffer.append(contentsOf: chunk[..<count])
                continue
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && errno == EAGAIN { throw Failure.timeout }
            defer { buffer = [] }
            return (buffer, count < 0 && errno == ECONNRESET)
        }
    }

    /// True when the server has closed the connection (EOF within the timeout).
    public func isClosedByPeer() -> Bool {
        var byte: UInt8 = 0
        var count = recv(fd, &byte, 1, 0)
        while count < 0 && errno == EINTR { count = recv(fd, &byte, 1, 0) }
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    private func readUntil(_ marker: [UInt8]) throws -> Int {
        var searchFrom = 0
        while true {
            if buffer.count >= marker.count {
                for index in searchFrom...(buffer.count - marker.count)
                where buffer[index..<index + marker.count].elementsEqual(marker) {
                    return index
                }
                searchFrom = buffer.count - marker.count + 1
            }
            try fill()
        }
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var count = recv(fd, &chunk, chunk.count, 0)
        // A signal (SIGCHLD from another test's child process) interrupts, it does not close.
        while count < 0 && errno == EINTR { count = recv(fd, &chunk, chunk.count, 0) }
        if count == 0 { throw Failure.closed }
        if count < 0 { throw errno == EAGAIN ? Failure.timeout : Failure.closed }
        buffer.append(contentsOf: chunk[..<count])
    }
}
