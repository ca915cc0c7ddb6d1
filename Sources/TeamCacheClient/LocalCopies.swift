import CacheKeys
import Foundation

/// One local copy: a raw entry's body (`raw`) or a descriptor's answer (`lookup`: the
/// response's UTF-8, and its metadata as JSON text). Times are this machine's wall clock
/// (they outlive the process), derived from the service's relative `ttl`.
struct LocalCopy: Sendable {
    enum Kind: String, Sendable { case raw, lookup }

    var kind: Kind
    var etag: String?
    var body: Data
    var contentType: String
    var metadata: String?
    var expiresAt: Double
    var updatedAt: Double
    var staleWhileRevalidate = 0

    /// Bytes a copy costs beyond its body and key (the node, the dictionary slot).
    static let overhead = 200

    func size(key: String) -> Int { body.count + key.utf8.count + (metadata?.utf8.count ?? 0) + Self.overhead }
    func isFresh(_ now: Double) -> Bool { now < expiresAt }
    /// Within `maxStale` seconds past expiry, or the entry's own window.
    func isServable(_ now: Double, maxStale: Int?) -> Bool {
        now < expiresAt + Double(max(maxStale ?? 0, staleWhileRevalidate))
    }
}

/// The copies by (namespace, key): a byte-bounded LRU in memory, over the file when there is
/// one (bounded by the same bytes; the same tables as the Python client's, so either may open
/// it). Not thread-safe: `LocalTier` holds its lock around every call.
final class LocalCopies {
    struct Name: Hashable {
        let namespace: String
        let key: String
    }

    /// A node of the recency list (least recently used first).
    final class Node {
        let name: Name
        var copy: LocalCopy
        var size: Int
        var older: Node?
        var newer: Node?

        init(_ name: Name, _ copy: LocalCopy, _ size: Int) {
            self.name = name
            self.copy = copy
            self.size = size
        }
    }

    let maxBytes: Int
    private var nodes: [Name: Node] = [:]
    private var oldest: Node?
    private var newest: Node?
    private(set) var memoryBytes = 0
    private var file: LocalFile?
    private let path: String?
    /// The outbox was read into memory: from then on memory holds every write not sent.
    private var outboxLoaded = false
    private(set) var fileBytes = 0
    /// The descriptor holding the file's lock (-1: none).
    private var lockFile: Int32 = -1

    static let schema = [
        """
        CREATE TABLE IF NOT EXISTS entries (namespace TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, etag TEXT,
            body BLOB NOT NULL, content_type TEXT NOT NULL, metadata TEXT, expires_at REAL NOT NULL,
            updated_at REAL NOT NULL, swr INTEGER NOT NULL, size INTEGER NOT NULL, used_at REAL NOT NULL,
            PRIMARY KEY (namespace, key))
        """,
        "CREATE INDEX IF NOT EXISTS entries_used ON entries (used_at)",
        "CREATE TABLE IF NOT EXISTS feeds (namespace TEXT PRIMARY KEY, cursor TEXT NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL,
            kind TEXT NOT NULL, key TEXT NOT NULL, payload TEXT NOT NULL, base_etag TEXT, written_at REAL NOT NULL,
            size INTEGER NOT NULL)
        """,
    ]

    init(path: String?, maxBytes: Int) throws {
        self.maxBytes = maxBytes
        self.path = path
        guard let path, let lock = Self.own(path) else { return }
        lockFile = lock
        let file = try LocalFile(path: path)
        for statement in Self.schema { try file.run(statement) }
        fileBytes = bounded(try file.run(Self.storedBytes).first?.first?.int)
        self.file = file
    }

    /// The rows' sizes summed without overflowing (`total` is a float; capped below 2^63).
    static let storedBytes = "SELECT CAST(min(total(max(size, 0)), 9.0e18) AS INTEGER) FROM entries"

    /// A byte count read from the file, within 0...maxBytes: the file may come from the other
    /// client, an older build or a corruption, and no size it holds may trap the sums here.
    private func bounded(_ bytes: Int64?) -> Int { Int(min(max(bytes ?? 0, 0), Int64(maxBytes))) }

    /// The file for this tier alone: an exclusive lock on `PATH-lock` (the Python client takes
    /// the same), since two tiers on one file would each send its outbox. nil when another
    /// tier (process) holds it: this one then keeps copies in memory.
    ///
    /// Asked again for up to `lockPatience` before giving up: a lock a closed tier let go may
    /// still be held for a moment by a child process this one is starting (between its fork and
    /// its exec the child holds a copy of every descriptor, `posix_spawn` included, and a lock
    /// goes only with the last copy). A tier reopened then found its own file taken and left
    /// its outbox unread (a CI run's `theOutboxOutlivesTheProcessInTheFile` did).
    private static func own(_ path: String) -> Int32? {
        let descriptor = open(path + "-lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return nil }
        let giveUp = Date().addingTimeInterval(lockPatience)
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, Date() < giveUp else {
                _ = Foundation.close(descriptor)
                return nil
            }
            usleep(10_000)
        }
        return descriptor
    }

    /// How long a tier waits for its file's lock before keeping its copies in memory.
    static let lockPatience: TimeInterval = 0.5

    deinit {
        if lockFile >= 0 { _ = Foundation.close(lockFile) }
        // The list holds each node from both sides: unlinked, so nothing is kept alive.
        while let node = oldest { unlink(node) }
    }

    /// What the copies hold: the larger of memory's and the file's (each is bounded).
    var bytes: Int { max(memoryBytes, fileBytes) }

    func get(_ name: Name) -> LocalCopy? {
        if let node = nodes[name] {
            unlink(node)
            append(node)
            return node.copy
        }
        guard let row = safely({ try $0.run(
            "SELECT kind, etag, body, content_type, metadata, expires_at, updated_at, swr FROM entries "
                + "WHERE namespace = ?1 AND key = ?2", [.text(name.namespace), .text(name.key)]) })?.first,
            row.count == 8, let kind = row[0].text.flatMap(LocalCopy.Kind.init), let body = row[2].blob,
            let expires = row[5].double, let updated = row[6].double else { return nil }
        let copy = LocalCopy(kind: kind, etag: row[1].text, body: body, contentType: row[3].text ?? "",
                             metadata: row[4].text, expiresAt: expires, updatedAt: updated,
                             staleWhileRevalidate: Int(row[7].int ?? 0))
        // Used again: its place in the file's LRU moves (a write on a memory miss only).
        safely { try $0.run("UPDATE entries SET used_at = ?1 WHERE namespace = ?2 AND key = ?3",
                            [.double(Date().timeIntervalSince1970), .text(name.namespace), .text(name.key)]) }
        remember(name, copy)
        return copy
    }

    /// The copy's version and expiry without using it (a change being applied must not pull a
    /// row off the disk, nor move it in the LRU): body and metadata left empty when it is only
    /// on disk.
    func peek(_ name: Name) -> LocalCopy? {
        if let node = nodes[name] { return node.copy }
        guard let row = safely({ try $0.run("SELECT kind, etag, expires_at FROM entries "
                                                + "WHERE namespace = ?1 AND key = ?2",
                                            [.text(name.namespace), .text(name.key)]) })?.first,
              row.count == 3, let kind = row[0].text.flatMap(LocalCopy.Kind.init), let expires = row[2].double
        else { return nil }
        return LocalCopy(kind: kind, etag: row[1].text, body: Data(), contentType: "", expiresAt: expires, updatedAt: 0)
    }

    /// Keeps `copy` (false when too large to keep: over an eighth of the bound).
    @discardableResult
    func put(_ name: Name, _ copy: LocalCopy) -> Bool {
        drop(name)
        let size = copy.size(key: name.key)
        guard size <= maxBytes / 8 else { return false }
        remember(name, copy)
        let written = safely { file in
            try file.run("INSERT OR REPLACE INTO entries VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", [
                .text(name.namespace), .text(name.key), .text(copy.kind.rawValue), copy.etag.map { .text($0) } ?? .null,
                .blob(copy.body), .text(copy.contentType), copy.metadata.map { .text($0) } ?? .null,
                .double(copy.expiresAt), .double(copy.updatedAt), .int(Int64(copy.staleWhileRevalidate)),
                .int(Int64(size)), .double(Date().timeIntervalSince1970),
            ])
        }
        if written != nil {
            fileBytes += min(size, Int.max - fileBytes)
            trimFile()
        }
        return true
    }

    func drop(_ name: Name) {
        if let node = nodes.removeValue(forKey: name) {
            unlink(node)
            memoryBytes -= node.size
        }
        // A SELECT then a DELETE, not DELETE … RETURNING: that needs SQLite 3.35 (Debian 11 and
        // Ubuntu 20.04 ship older), and a delete that fails must not leave the row to come back.
        let size = safely { file -> Int64? in
            let names: [LocalFile.Value] = [.text(name.namespace), .text(name.key)]
            guard let size = try file.run("SELECT size FROM entries WHERE namespace = ?1 AND key = ?2", names)
                .first?.first?.int else { return nil }
            try file.run("DELETE FROM entries WHERE namespace = ?1 AND key = ?2", names)
            return size
        }
        if let size = size ?? nil { fileBytes = max(0, fileBytes - bounded(size)) }
    }

    func dropNamespace(_ namespace: String) {
        for name in nodes.keys where name.namespace == namespace { drop(name) }
        safely { file in
            try file.run("DELETE FROM entries WHERE namespace = ?1", [.text(namespace)])
            try file.run("DELETE FROM feeds WHERE namespace = ?1", [.text(namespace)])
            fileBytes = bounded(try file.run(Self.storedBytes).first?.first?.int)
        }
    }

    func cursor(_ namespace: String) -> String? {
        safely { try $0.run("SELECT cursor FROM feeds WHERE namespace = ?1", [.text(namespace)]).first?.first?.text }
            ?? nil
    }

    func saveCursor(_ namespace: String, _ cursor: String) {
        safely { try $0.run("INSERT OR REPLACE INTO feeds VALUES (?1, ?2)", [.text(namespace), .text(cursor)]) }
    }

    /// Runs `work` on the file. A file that fails (full disk, read-only, corrupt) is given up
    /// for memory alone, as the Python client does: a delete that failed would leave a copy a
    /// change dropped to come back on the next read, and a failing file must never fail the
    /// caller's call. nil: no file, or it failed.
    @discardableResult
    private func safely<T>(_ work: (LocalFile) throws -> T) -> T? {
        guard let file else { return nil }
        do {
            return try work(file)
        } catch {
            file.close()
            self.file = nil
            fileBytes = 0
            setAside()
            return nil
        }
    }

    /// Removes a file given up (best effort): its outbox rows can no longer be deleted as they
    /// are sent, and a restart would send them again (a key deleted since would come back).
    /// Memory holds every write not sent; the file is kept when the outbox was never read.
    private func setAside() {
        guard let path, outboxLoaded else { return }
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    func close() {
        file?.close()
        file = nil
        if lockFile >= 0 { _ = Foundation.close(lockFile) }  // the lock goes with it
        lockFile = -1
    }

    // The outbox's rows, in the Python client's table and JSON payloads.

    func loadOutbox() -> [LocalTier.Queued] {
        let rows = safely {
            try $0.run("SELECT id, namespace, kind, key, payload, base_etag, written_at FROM outbox ORDER BY id")
        }
        if rows != nil { outboxLoaded = true }
        // A key's earlier rows left beside its last (an earlier version replaced them in two
        // steps): the last carries the base they were made over, and sent first they would win.
        let named = (rows ?? []).compactMap(Self.outboxName)
        var last: [Name: Int64] = [:]
        for (id, name, _) in named { last[name] = id }
        let kept = Set(last.values)
        let stale = (rows ?? []).compactMap { $0.first?.int }.filter { !kept.contains($0) }
        if !stale.isEmpty {
            safely { try $0.run("DELETE FROM outbox WHERE id IN (\(stale.map(String.init).joined(separator: ",")))") }
        }
        return named.compactMap { id, name, row in
            guard kept.contains(id), let kind = row[2].text,
                  let payload = row[4].text.flatMap({ try? JSONParser.parse(Array($0.utf8)) }),
                  let written = row[6].double, let write = LocalTier.Queued.Write(kind: kind, payload: payload)
            else { return nil }
            return LocalTier.Queued(id: id, namespace: name.namespace, key: name.key, write: write,
                                    baseETag: row[5].text, writtenAt: written)
        }
    }

    /// An outbox row's id and key, with the row; nil for a row that is not the seven columns
    /// `loadOutbox` selects (every column read after this is inside them).
    private static func outboxName(_ row: [LocalFile.Value]) -> (Int64, Name, [LocalFile.Value])? {
        guard row.count == 7, let id = row[0].int, let namespace = row[1].text, let key = row[3].text else {
            return nil
        }
        return (id, Name(namespace: namespace, key: key), row)
    }

    /// The row's id; 0 when it could not be written (the write waits in memory only). The row
    /// of `replacing` (the key's earlier write) goes in the same transaction: a crash leaves one
    /// of the two, never both (sent in order, the earlier would win and the later be reported
    /// superseded) and never neither.
    func queue(_ item: LocalTier.Queued, replacing: Int64? = nil) -> Int64 {
        safely { file in
            try file.run("BEGIN IMMEDIATE")
            try file.run("INSERT INTO outbox (namespace, kind, key, payload, base_etag, written_at, size) "
                         + "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", [
                .text(item.namespace), .text(item.write.kind), .text(item.key), .text(item.write.payload.serialized),
                item.baseETag.map { .text($0) } ?? .null, .double(item.writtenAt), .int(Int64(item.size)),
            ])
            let id = try file.run("SELECT last_insert_rowid()").first?.first?.int ?? 0
            if let replacing { try file.run("DELETE FROM outbox WHERE id = ?1", [.int(replacing)]) }
            try file.run("COMMIT")
            return id
        } ?? 0
    }

    func unqueue(_ id: Int64) {
        guard id > 0 else { return }
        safely { try $0.run("DELETE FROM outbox WHERE id = ?1", [.int(id)]) }
    }

    private func remember(_ name: Name, _ copy: LocalCopy) {
        if let old = nodes.removeValue(forKey: name) {
            unlink(old)
            memoryBytes -= old.size
        }
        let node = Node(name, copy, copy.size(key: name.key))
        nodes[name] = node
        append(node)
        memoryBytes += node.size
        while memoryBytes > maxBytes, let victim = oldest {
            unlink(victim)
            nodes.removeValue(forKey: victim.name)
            memoryBytes -= victim.size
        }
    }

    /// Deletes the least recently used rows, up to 64 at a time, until the file is within its bound
    /// (a SELECT then a DELETE of the same rows: no RETURNING, as in `drop`).
    private func trimFile() {
        while fileBytes > maxBytes {
            let excess = fileBytes - maxBytes
            let trimmed = safely { file -> (rows: Int, bytes: Int) in
                let rows = try file.run("SELECT rowid, size FROM entries ORDER BY used_at LIMIT 64")
                // The oldest only until the excess is covered: a whole batch would take the copy
                // just written too whenever the file holds fewer than 64 rows.
                var ids: [Int64] = [], sum = 0
                for row in rows {
                    guard let id = row.first?.int else { continue }
                    ids.append(id)
                    sum += min(bounded(row.count == 2 ? row[1].int : nil), Int.max - sum)
                    if sum >= excess { break }
                }
                guard !ids.isEmpty else { return (0, 0) }
                try file.run("DELETE FROM entries WHERE rowid IN (\(ids.map(String.init).joined(separator: ",")))")
                return (ids.count, sum)
            }
            guard let trimmed, trimmed.rows > 0 else {
                fileBytes = 0  // nothing left to trim (or the file was given up)
                return
            }
            fileBytes = max(0, fileBytes - trimmed.bytes)
        }
    }

    private func append(_ node: Node) {
        node.older = newest
        node.newer = nil
        newest?.newer = node
        newest = node
        if oldest == nil { oldest = node }
    }

    private func unlink(_ node: Node) {
        if oldest === node { oldest = node.newer }
        if newest === node { newest = node.older }
        node.older?.newer = node.newer
        node.newer?.older = node.older
        node.older = nil
        node.newer = nil
    }
}
