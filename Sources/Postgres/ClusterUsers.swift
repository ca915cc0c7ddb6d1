import Foundation

/// Which processes use an embedded cluster, kept by the kernel: each holds a shared `flock`
/// on `users.lock` for as long as it uses the cluster, and the last one out stops it. A
/// process that dies (even by SIGKILL) lets go of its lock with its last descriptor, so
/// there is nothing to clean up and nothing to adopt.
///
/// Starting and stopping are serialised by an exclusive lock on `start.lock`, so a process
/// that is joining cannot be stopped under: a CLI command that started the cluster and ends
/// while a server has joined leaves it running for the server.
struct ClusterUsers {
    /// How long a start or stop waits for another process's start or stop.
    static let wait: TimeInterval = 120

    let folder: URL
    private var users: Int32 = -1

    init(folder: URL) { self.folder = folder }

    /// Runs `body` (which starts the cluster if needed) as a new user of the cluster.
    mutating func join(_ body: () throws -> Void) throws {
        let start = try Self.lock(folder.appendingPathComponent("start.lock"), LOCK_EX)
        defer { close(start) }
        users = try Self.lock(folder.appendingPathComponent("users.lock"), LOCK_SH)
        do { try body() } catch {
            close(users)
            users = -1
            throw error
        }
    }

    /// Leaves; calls `stopCluster` when no other process uses the cluster.
    mutating func leave(_ stopCluster: () -> Void) {
        guard users >= 0 else { return }
        guard let start = try? Self.lock(folder.appendingPathComponent("start.lock"), LOCK_EX) else {
            close(users)
            users = -1
            return
        }
        defer { close(start) }
        // Exclusive succeeds only if no other process holds its shared lock: we were the last.
        let last = flock(users, LOCK_EX | LOCK_NB) == 0
        if last { stopCluster() }
        close(users)
        users = -1
    }

    /// Opens `file` (0600, no symlinks) and takes `operation` on it, polling so the wait has
    /// a deadline.
    private static func lock(_ file: URL, _ operation: Int32) throws -> Int32 {
        let descriptor = open(file.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw EmbeddedPostgresError.lockFailed(file.path) }
        let deadline = Date().addingTimeInterval(wait)
        while flock(descriptor, operation | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, Date() < deadline else {
                close(descriptor)
                throw EmbeddedPostgresError.lockFailed(file.path)
            }
            usleep(20_000)
        }
        return descriptor
    }
}
