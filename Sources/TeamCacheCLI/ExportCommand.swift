import CacheCore
import Foundation
import TeamCache

enum ExportCommand {
    static let usage = """
        Usage: teamcache export [--namespace NS] [--since RFC3339] [--gzip] [database options] > dump.ndjson

        Writes every entry (of NS; updated at or after --since) to standard output, one JSON
        object a line: the key (or key_base64), the body in its stored encoding (body_base64),
        content type, encoding, ETag, tags, model, version, metadata, tokens, created/updated/
        expires timestamps, stale_until and the hit count. --gzip compresses the stream. Read
        in pages from the database's (namespace, key) index: memory stays flat whatever the
        store's size. Progress goes to standard error. `teamcache import` reads it back.

        Standard error also names the change feed's cursor as the export began: a follower
        that loads this dump follows GET /v1/caches/NS/changes?since=CURSOR from there.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--namespace", "--since"]), switches: ["--gzip"])
        if arguments.switches.contains("--help") {
            print(usage)
            return 0
        }
        let namespace = try arguments.namespace()
        if let since = arguments.values["--since"], DumpedEntry.parseTimestamp(since) == nil {
            throw Arguments.Failure(description: "--since must be an RFC 3339 timestamp, e.g. 2026-01-31T00:00:00Z")
        }
        return try DatabaseSession.with(arguments) { _, pool, configuration in
            let store = try DatabaseSession.store(pool, configuration)
            let output = try DumpOutput(gzip: arguments.switches.contains("--gzip"))
            // Taken before the first page: every change after it is either in the dump or
            // in the feed after it (both, for a change made while exporting: replaying it is
            // idempotent).
            let cursor = try store.feedHead()
            FileHandle.standardError.write(Data("teamcache export: change feed cursor \(cursor)\n".utf8))
            var progress = Progress(verb: "exported")
            try store.export(namespace: namespace, since: arguments.values["--since"]) { entry in
                let line = entry.line()
                try output.write(line)
                progress.count(entries: 1, bytes: line.count)
            }
            try output.finish()
            progress.finish()
            return 0
        }
    }
}

/// Standard output, gzip-compressed or not, written through a buffer.
final class DumpOutput {
    private let gzip: GzipWriter?
    private var buffer: [UInt8] = []

    init(gzip: Bool) throws { self.gzip = gzip ? try GzipWriter() : nil }

    func write(_ bytes: [UInt8]) throws {
        buffer += gzip?.write(bytes) ?? bytes
        if buffer.count >= 1 << 20 { try flush() }
    }

    func finish() throws {
        if let gzip { buffer += gzip.finish() }
        try flush()
    }

    private func flush() throws {
        var offset = 0
        while offset < buffer.count {
            let written = buffer[offset...].withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw Arguments.Failure(description: "standard output: write failed (errno \(errno))")
            }
            offset += written
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
