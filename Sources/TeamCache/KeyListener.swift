import CacheCore
import Foundation
import HTTPServer
import Postgres

/// The process's one `LISTEN teamcache_keys` connection (migration 0007's notifications),
/// non-blocking and driven by the first event loop's epoll like the batched reads; it
/// reconnects by itself. Each notification wakes the waiters of its key (or namespace).
/// While it is down, waiters re-check on their own every second; when it comes back, every
/// waiter re-checks at once, since notifications may have been missed meanwhile.
final class KeyListener: @unchecked Sendable {
    // @unchecked: `connection` is confined to the loop it is attached to.
    static let channel = "teamcache_keys"

    private let connection: LoopConnection
    private let waiters: Waiters
    private let leases: LeaseStore?
    private let near: NearCache?

    init(url: String, limits: SessionLimits, waiters: Waiters, leases: LeaseStore? = nil, near: NearCache? = nil) {
        var configuration = LoopConnection.Configuration(url: url, statements: [])
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
        connection.onNotification = { channel, payload in
            guard channel == Self.channel, let (namespace, key) = Self.parse(payload) else { return }
            leases?.forgetHeld(namespace: namespace, key: key)
            // Before waking: a woken waiter's read must not be answered by the replaced entry.
            near?.invalidate(namespace, key)
            waiters.wake(namespace: namespace, key: key)
        }
        connection.onOpenChange = { open in
            // Off while notifications cannot arrive; empty when they can again (some were missed).
            near?.setEnabled(open)
            waiters.setListener(up: open)
            if open {
                leases?.forgetHeld(namespace: nil, key: nil)
                waiters.wakeAll(final: false)
            }
        }
        connection.attach(to: loop)
        loop.onEachIteration { connection.connectIfDue() }
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
