import Foundation
import Locking
@testable import Observability
import Testing

/// The sink's writer: every line arrives whole and in order, to a regular file (written in
/// one piece a batch) and to a pipe (in pieces the pipe has room for).
@Suite struct LogSinkTests {
    /// 6,000 numbered lines, ~300 KB: several batches, each past a pipe's 4 KiB pieces.
    private func lines() -> [[UInt8]] {
        (0..<6000).map { Array("{\"line\":\($0),\"pad\":\"\(String(repeating: "x", count: 30 + $0 % 40))\"}\n".utf8) }
    }

    @Test func aRegularFileGetsEveryLineInOrder() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sink-\(UUID().uuidString)").path
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        try #require(fd >= 0)
        defer { close(fd); unlink(path) }
        #expect(LogSink.Target(fd).isRegularFile)
        let sink = LogSink()
        sink.configure(level: .info, fd: fd)
        let sent = lines()
        for (index, line) in sent.enumerated() { sink.write(line, urgent: index % 1000 == 999) }
        sink.flush()
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(sent.joined()))
        #expect(sink.droppedLines == 0)
    }

    /// A descriptor that refuses every write (here: opened read-only): the lines are counted as
    /// dropped, by the sink that dropped them.
    @Test func linesAnOutputRefusesAreCountedAsDropped() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sink-\(UUID().uuidString)").path
        try #require(FileManager.default.createFile(atPath: path, contents: nil))
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd); unlink(path) }
        let sink = LogSink()
        sink.configure(level: .info, fd: fd)
        for line in lines().prefix(3) { sink.write(line) }
        sink.flush()
        #expect(sink.droppedLines == 3)
    }

    @Test func aPipeGetsEveryLineInOrder() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let finished = Locked(false)
        defer {
            // The write end first: the reader then meets the end of the pipe and stops before
            // its descriptor is closed (and its number given to another test's file).
            close(ends[1])
            let deadline = Date().addingTimeInterval(10)
            while !finished.withLock({ $0 }) && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
            close(ends[0])
        }
        #expect(!LogSink.Target(ends[1]).isRegularFile)
        let received = Locked<[UInt8]>([])
        let readEnd = ends[0]
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                if count <= 0 {
                    finished.withLock { $0 = true }
                    return
                }
                received.withLock { $0.append(contentsOf: buffer[..<count]) }
            }
        }
        reader.start()
        let sink = LogSink()
        sink.configure(level: .info, fd: ends[1])
        let sent = lines()
        for line in sent { sink.write(line) }
        sink.flush(timeout: 10)
        let expected = Array(sent.joined())
        let deadline = Date().addingTimeInterval(10)
        while received.withLock({ $0.count }) < expected.count && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(received.withLock { $0 } == expected)
    }
}
