import CacheCore
import CacheKeys
import CacheStore
import Foundation
import Postgres
import TeamCache

enum ImportCommand {
    static let usage = """
        Usage: teamcache import [--namespace NS] [--on-conflict skip|replace|newer] [database options] < dump.ndjson[.gz]

        Reads a dump (`teamcache export`'s lines, gzip or not: detected) from standard input
        and stores each entry exactly as dumped (timestamps, window and hit count included),
        500 entries to a transaction. --namespace puts every entry into NS. An entry already
        stored under its key is kept (skip, the default), overwritten (replace), or
        overwritten when the dump's is newer (newer); one that already is the dump's entry is
        left alone, so importing a dump twice changes nothing the second time.

        A malformed line is reported with its number and skipped whole, never half-stored;
        the byte caps apply (an entry past one is reported as store_full). Progress goes to
        standard error, then a summary. Lines from other tools may leave out etag,
        identity_size, encoding, content_type and the timestamps, and give `body` as text.

        Exit status 0 once the whole input was read (rejected lines included), 1 when the
        import stopped (the database went away: running it again is safe).

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--namespace", "--on-conflict"]), switches: [])
        if arguments.switches.contains("--help") {
            print(usage)
            return 0
        }
        let namespace = try arguments.namespace()
        let conflictText = arguments.values["--on-conflict"] ?? "skip"
        guard let conflict = ImportConflictPolicy(rawValue: conflictText) else {
            throw Arguments.Failure(description: "--on-conflict must be skip, replace or newer")
        }
        return try DatabaseSession.with(arguments) { _, pool, configuration in
            var run = ImportRun(store: try DatabaseSession.store(pool, configuration), namespace: namespace,
                                conflict: conflict)
            return try run.readAll()
        }
    }
}

/// One import from standard input: lines in, `DumpImport` commits them, a summary out.
struct ImportRun {
    private var work: DumpImport
    private var progress: Progress

    init(store: EntryStore, namespace: Namespace?, conflict: ImportConflictPolicy) {
        work = DumpImport(store: store, namespace: namespace, conflict: conflict, overlapped: true)
        progress = Progress(verb: "read", unit: "lines", total: Self.inputSize())
    }

    /// Reads standard input to its end; the exit status.
    mutating func readAll() throws -> Int32 {
        var lines = try DumpLines(maxLine: work.store.policy.maxBodyBytes * 2 + (1 << 20))
        do {
            while let (number, line) = try lines.next() {
                guard let line else {
                    work.reject(number, "line longer than the body limit allows")
                    continue
                }
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: "\r") }) {
                    continue
                }
                // Every exported line ends in a newline: a last one without it that is not
                // whole JSON is where a cut dump stopped, not a bad line of a complete dump.
                if lines.unterminated, (try? JSONParser.parse(line)) == nil {
                    throw DumpInputError(description: "standard input ends in the middle of line \(number) (cut short?)")
                }
                try work.add(line, number: number)
                progress.count(entries: 1, bytes: line.count, done: lines.consumed)
            }
            try work.commit()
        } catch let error as PostgresError where error.isUnavailable {
            summary(stopped: "the database is unavailable (\(error)); running the same import again is safe")
            return 1
        } catch let error as DumpInputError {
            // What was read whole is still stored; the summary says where it stopped.
            try work.commit()
            summary(stopped: "\(error.description) after line \(lines.number); running the import again is safe")
            return 1
        }
        summary(stopped: nil)
        return 0
    }

    private func summary(stopped: String?) {
        progress.finish(extra: "; \(work.counts)")
        for (number, reason) in work.rejections { printError("  line \(number): \(reason)") }
        if work.unlisted > 0 { printError("  … and \(work.unlisted) more") }
        if let stopped { printError("import stopped: \(stopped)") }
    }

    /// Standard input's size when it is a regular file (for the ETA).
    private static func inputSize() -> Int? {
        var info = stat()
        guard fstat(0, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size > 0 else { return nil }
        return Int(info.st_size)
    }
}

/// Why standard input could not be read to its end.
struct DumpInputError: Error, CustomStringConvertible {
    let description: String
}

/// Standard input as numbered lines (gzip detected by its magic bytes and inflated as it
/// streams). A line longer than `maxLine` comes back as nil (and is skipped to its end)
/// rather than buffered whole; inflated bytes are taken a piece at a time, so a gzip bomb
/// never holds more than a line's limit and a piece.
struct DumpLines {
    private let maxLine: Int
    private var gzip: GzipReader?
    private var decided = false
    private var pending: [UInt8] = []
    private var start = 0
    private(set) var number = 0
    private var overlong = false
    private var inputEnded = false
    /// Bytes read from standard input so far.
    private(set) var consumed = 0
    /// The line last returned was the input's end, without a newline after it.
    private(set) var unterminated = false

    init(maxLine: Int) throws { self.maxLine = maxLine }

    mutating func next() throws -> (Int, [UInt8]?)? {
        while true {
            if let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let tooLong = overlong || newline - start > maxLine
                let line = tooLong ? nil : Array(pending[start..<newline])
                start = newline + 1
                number += 1
                overlong = false
                return (number, line)
            }
            if pending.count - start > maxLine {
                // Too long: drop what is buffered and skip to its newline.
                overlong = true
                pending.removeAll(keepingCapacity: true)
                start = 0
            }
            if inputEnded && gzip.map({ !$0.hasOutput }) ?? true {
                // A gzip stream must end whole: a cut one would otherwise end in half a line.
                if let gzip, !gzip.ended { throw DumpInputError(description: "standard input: the gzip stream is truncated") }
                guard start < pending.count || overlong else { return nil }
                let line = overlong ? nil : Array(pending[start...])
                (pending, start, overlong) = ([], 0, false)
                number += 1
                unterminated = true
                return (number, line)
            }
            try fill()
        }
    }

    /// More bytes into `pending`: an inflated piece if the gzip reader has one, else a read.
    private mutating func fill() throws {
        if start > 0 {
            pending.removeSubrange(..<start)
            start = 0
        }
        if let gzip {
            let piece = try inflate(gzip)
            if !piece.isEmpty {
                pending += piece
                return
            }
            if inputEnded {
                // Nothing more will come: the stream must have ended whole.
                guard gzip.ended else { throw DumpInputError(description: "standard input: the gzip stream is truncated") }
                return
            }
        }
        guard !inputEnded else { return }
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        let count = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
        if count < 0 {
            if errno == EINTR { return }
            throw DumpInputError(description: "standard input: read failed (errno \(errno))")
        }
        consumed += count
        chunk.removeSubrange(count...)
        if count == 0 { inputEnded = true }
        if !decided {
            // gzip's magic, 1f 8b: decided on two bytes (or the end), however the reads split.
            pending += chunk
            guard pending.count >= 2 || inputEnded else { return }
            decided = true
            if pending.starts(with: [0x1f, 0x8b]) {
                let reader = try DumpInputError.wrap { try GzipReader() }
                reader.feed(pending)
                pending = []
                gzip = reader
            }
        } else if let gzip {
            gzip.feed(chunk)
        } else {
            pending += chunk
        }
    }

    private func inflate(_ gzip: GzipReader) throws -> [UInt8] {
        try DumpInputError.wrap { try gzip.read() }
    }
}

extension DumpInputError {
    static func wrap<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch { throw DumpInputError(description: "standard input: not a valid gzip stream") }
    }
}
