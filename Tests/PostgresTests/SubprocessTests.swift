import Foundation
import Glibc
@testable import Postgres
import Testing

/// What a program `Subprocess` starts inherits: its three standard descriptors, nothing else.
/// The embedded PostgreSQL is such a program, and it and every backend it forks once held a pipe
/// of the process that started it (a `teamcache serve` started from a shell: the shell's job pipe,
/// in every backend), which then never ended for whoever read it.
@Suite struct SubprocessTests {
    @Test func aSpawnedProgramInheritsOnlyItsStandardDescriptors() throws {
        var ends: [Int32] = [-1, -1]
        try #require(pipe(&ends) == 0)  // not close-on-exec, like Foundation's Pipe
        defer { ends.forEach { _ = close($0) } }
        let output = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("subprocess-\(UUID()).out")
        defer { try? FileManager.default.removeItem(at: output) }
        // `test` is the shell's own: /proc/self is the spawned shell.
        let script = "echo out; echo err >&2; test ! -e /proc/self/fd/\(ends[0]) && test ! -e /proc/self/fd/\(ends[1])"
        let status = try Subprocess.run(["/bin/sh", "-c", script], output: output)
        #expect(status == 0, "the child held the pipe's descriptors \(ends)")
        #expect(try String(contentsOf: output, encoding: .utf8) == "out\nerr\n")
    }
}
