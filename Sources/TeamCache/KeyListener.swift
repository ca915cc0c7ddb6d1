import CacheCore
import CacheStore
import Cryptography
import Foundation
import HTTPServer
import Postgres

/// The process's one `LISTEN teamcache_keys` connection (migration 0007's notifications),
/// non-blocking and driven by the first event loop's epoll like the batched reads; it
/// reconnects by itself. Each notification drops its key (or namespace; `*`: everything)
/// from the near-cache and the held-lease memory, then wakes its waiters. While it is down,
/// waiters re-check on their own every second; when it comes back, every waiter re-checks
/// at once, since notifications may have been missed meanwhile.
///
/// A connection can die without saying so (a half-open socket after a failover, a NAT that
/// forgot it, a pooler that drops LISTEN). So the listener proves itself: every second it
/// notifies a heartbeat of its own through its own connection, under the statement deadline
/// (a dead socket fails it, and the connection is replaced), and the near-cache serves only
/// while heartbeats come back (`NearCache.confirmLive`).
final class KeyListener: @unchecked Sendable {
    // @unchecked: made before its loop exists and closed after it stopped (by the service,
    // which holds it), it is used in between only by that loop: `attach` runs on the loop's
    // thread before it serves, and its connection and `nextBeat` are touched from the loop's
    // iteration hook only. (A `LoopBound` cannot hold it: it has no loop when it is made.)
    static let channel = "teamcache_keys"
    public static let applicationName = "teamcache-listen"

    private let connection: LoopConnection
    private let waiters: Waiters
    private let leases: LeaseStore?
    private let near: NearCache?
    /// This process's heartbeat payload: `~` and a random token (no namespace has a `~`).
    private let heartbeat = "~" + Bytes.hex(Bytes.random(count: 8))
    static let beatSQL = "SELECT pg_notify($1, $2)"
    static let beatInterval: TimeInterval = 1
    /// How long the near-cache may serve after a heartbeat came back.
    static let liveFor: TimeInterval = 3
    /// Loop-confined: when the next heartbeat is due (loop nanoseconds).
    private var nextBeat: UInt64 = 0

    init(url: String, limits: SessionLimits, waiters: Waiters, leases: LeaseStore? = nil, near: NearCache? = nil) {
        // Named apart, for pg_stat_activity.
        var configuration = LoopConnection.Configuration(
            url: url, overrides: ["application_name": Self.applicationName],
            statements: [(Self.beatSQL, like: [.text(""), .text("")])])
        configuration.setup = ["LISTEN \(Self.channel)"]
        configuration.limits = limits
        connection = LoopConnection(configuration)
        self.waiters = waiters
        self.leases = leases
        self.near = near
    }

    /// Starts listening from `loop` (on its thread, before it serves).
    func attach(to loop: EventLoop) {
        let waiters = self.waiters, connection = self.connection, leases = self.leases, near = self.near
        let heartbeat = self.heartbeat
        connection.onNotification = { channel, payload in
            guard channel == Self.channel else { return }
            if payload == heartbeat {
                near?.confirmLive(for: Self.liveFor)
                return
            }
            if payload == "*" {
                // A TRUNCATE (migration 0010): everything changed.
                near?.invalidateAll()
                leases?.forgetHeld(namespace: nil, key: nil)
                waiters.wakeAll(final: false)
                return
            }
            guard let (namespace, key) = Self.parse(payload) else { return }
            leases?.forgetHeld(namespace: namespace, key: key)
            // Before waking: a woken waiter's read must not be answered by the replaced entry.
            near?.invalidate(namespace, key)
            waiters.wake(namespace: namespace, key: key)
        }
        connection.onOpenChange = { open in
            // Off while notifications cannot arrive; on again once a heartbeat comes back.
            if !open { near?.disable() }
            waiters.setListener(up: open)
            if open { leases?.forgetHeld(namespace: nil, key: nil) }
            // Down: the waiters parked until their deadline, counting on a notification that
            // can no longer come, re-check now and park again for a second at most while it
            // is down. Up: any notification may have been missed meanwhile.
            waiters.wakeAll(final: false)
        }
        connection.attach(to: loop)
        loop.onEachIteration { [self] in
            connection.connectIfDue()
            connection.checkDeadline()
            beatIfDue(loop.nanoseconds)
        }
    }

    /// Sends the next heartbeat when one is due and the connection is free (on the loop).
    private func beatIfDue(_ now: UInt64) {
        guard now >= nextBeat, connection.isIdle else { return }
        nextBeat = now + UInt64(Self.beatInterval * 1e9)
        // Its answer is nothing to act on: the notification it sends is the proof, and a
        // failure (past the deadline) has already replaced the connection.
        connection.send(Self.beatSQL, [.text(Self.channel), .text(heartbeat)]) { _ in }
    }

    /// Stops listening (once the loop has stopped).
    func close() { connection.close() }

    /// `<namespace>/<key as hex>` (or `<namespace>/` for all its keys); nil when malformed.
    static func parse(_ payload: String) -> (String, [UInt8]?)? {
        let bytes = Array(payload.utf8)
        guard let slash = bytes.firstIndex(of: UInt8(ascii: "/")), slash > 0 else { return nil }
        let namespace = String(decoding: bytes[..<slash], as: UTF8.self)
        let hex = bytes[(slash + 1)...]
        if hex.isEmpty { return (namespace, nil) }
        guard hex.count % 2 == 0 else { return nil }
        var key: [UInt8] = []
        key.reserveCapacity(hex.count / 2)
        var index = hex.startIndex
        while index < hex.endIndex {
            guard let high = nibble(hex[index]), let low = nibble(hex[index + 1]) else { return nil }
            key.append(high << 4 | low)
            index += 2
        }
        return (namespace, key)
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
