import CLinux
import Foundation

/// Runs a helper program to completion with `posix_spawn` and `waitpid`.
///
/// Foundation's `Process` was seen here to leave its child a zombie and never return from
/// `waitUntilExit` when called off the main thread, so the launcher uses the plain calls.
public enum Subprocess {
    /// Runs `arguments[0]` (an absolute path) from `/` with stdin from /dev/null and
    /// stdout/stderr to `output`; returns the exit status.
    public static func run(_ arguments: [String], output: URL) throws -> Int32 {
        // `env -C /` starts the tool from `/`: PostgreSQL's tools fail in a folder their user cannot read.
        let launcher = "/usr/bin/env"
        let argv = [launcher, "-C", "/"] + arguments
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output.path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else of this process's: a daemon started here (PostgreSQL, PgBouncer) and every
        // backend it forks would hold whatever descriptor was open without close-on-exec (a pipe
        // someone waits on for its end, a file, a socket) for as long as it runs.
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        // The child starts with no signal blocked and the usual dispositions: a process that
        // blocks SIGTERM in its threads (to take it through a signal source) or ignores
        // SIGPIPE would otherwise hand that on, and a daemon started this way (PgBouncer)
        // could then never be stopped with a signal.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), defaults = sigset_t()
        sigemptyset(&none)
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, launcher, &actions, &attributes, cArguments, environ)
        guard spawned == 0 else { throw SubprocessError.spawnFailed(launcher, spawned) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw SubprocessError.waitFailed(errno) }
        }
        // WIFEXITED / WEXITSTATUS are macros: decode the wait status by hand.
        let exited = status & 0x7f == 0
        return exited ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

enum SubprocessError: Error, CustomStringConvertible {
    case spawnFailed(String, Int32)
    case waitFailed(Int32)

    var description: String {
        switch self {
        case .spawnFailed(let path, let code): "could not start \(path) (errno \(code))"
        case .waitFailed(let code): "waitpid failed (errno \(code))"
        }
    }
}
