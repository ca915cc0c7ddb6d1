import Foundation
import Glibc
@testable import TestSupport
import Testing

/// A test's child server is ready when it says it listens, not when its port accepts a
/// connection: another socket can hold the port it was given, and then the test talks to that
/// socket (see `ChildPort`). And the ports children are given come from where nothing else here
/// binds.
@Suite struct ChildProcessPortTests {
    /// Another process's listener on the child's port: the child cannot bind and exits, and
    /// `listening` says so, at once, though the port accepts connections.
    @Test func aChildWhosePortIsTakenIsNotListening() async throws {
        let port = try ChildPort.next()
        let holder = try ListeningHolder(port: port)
        defer { holder.close() }
        #expect((try? RawClient(port: port, timeout: 1)) != nil, "the holder accepts connections")
        let child = try await offThePool {
            try ServeProcess(database: try TestDatabase.shared.migratedDatabase(prefix: "takenport"), port: port)
        }
        defer { child.stop(SIGKILL) }
        let started = ProcessInfo.processInfo.systemUptime
        #expect(await child.listening(seconds: 30) == false)
        #expect(ProcessInfo.processInfo.systemUptime - started < 25, "it waited for the whole bound")
        let second = try await offThePool { try ServeProcess(prefix: "freeport") }
        defer { second.stop(SIGKILL) }
        #expect(await second.listening(seconds: 30))
    }

    /// The child's output as it may come: the line split over writes, no line at all, and a
    /// descriptor whose read fails (a folder's: EISDIR), which ends the reading without a trap.
    @Test func theAnnouncementIsReadWhateverTheOutputDoes() throws {
        func reader(_ writes: [String]) throws -> Announcement {
            var ends: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
            let announcement = Announcement(reading: ends[0])
            for text in writes {
                _ = Array(text.utf8).withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
                Thread.sleep(forTimeInterval: 0.02)
            }
            close(ends[1])
            return announcement
        }
        func settled(_ announcement: Announcement) {
            for _ in 0..<500 where !announcement.ended { Thread.sleep(forTimeInterval: 0.01) }
        }
        let split = try reader(["noise\nlisten", "ing on http://127.0.0.1:1\n"])
        settled(split)
        #expect(split.listening && !split.gaveUp)
        let silent = try reader(["something else\n"])
        settled(silent)
        #expect(!silent.listening && silent.gaveUp)
        let folder = open("/", O_RDONLY | O_CLOEXEC)
        try #require(folder >= 0)
        let failing = Announcement(reading: folder)
        settled(failing)
        #expect(failing.ended && failing.gaveUp)
    }

    @Test func childPortsAreBelowTheEphemeralRangeFreeAndNeverRepeated() throws {
        let range = ChildPort.candidates()
        let text = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let ephemeralLow = try #require(text.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) })
        #expect(range.upperBound < ephemeralLow && range.lowerBound >= 10000)
        var seen = Set<Int>()
        for _ in 0..<300 {
            let port = try ChildPort.next()
            #expect(range.contains(port) && seen.insert(port).inserted, "\(port)")
        }
        let held = try ListeningHolder(port: try ChildPort.next())
        defer { held.close() }
        #expect(!ChildPort.isFree(held.port))
    }
}

/// A plain listening socket on a given loopback port, as a test's own listener would be.
final class ListeningHolder: Sendable {
    let fd: Int32
    let port: Int

    init(port: Int) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard Loopback.bind(fd, port: port), listen(fd, 16) == 0 else {
            Glibc.close(fd)
            throw RawClient.Failure.connect(errno)
        }
        self.fd = fd
        self.port = port
    }

    func close() { Glibc.close(fd) }
}
