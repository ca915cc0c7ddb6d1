import Glibc

/// A system user's ids, looked up with `getpwnam_r`: `getpwnam` answers in one static buffer
/// per process, and two threads preparing clusters at once read each other's lookups (a test
/// run once chowned a cluster's log to `list`, the passwd line the other thread was parsing).
public struct SystemAccount: Sendable, Equatable {
    public let uid: uid_t
    public let gid: gid_t

    /// The account named `name`, or nil when there is none (or the lookup fails).
    public static func named(_ name: String) -> SystemAccount? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        let status = getpwnam_r(name, &entry, &buffer, buffer.count, &found)
        guard status == 0, found != nil else { return nil }
        return SystemAccount(uid: entry.pw_uid, gid: entry.pw_gid)
    }

    /// The account PostgreSQL runs as when this process is root.
    public static var postgres: SystemAccount? { named("postgres") }
}
