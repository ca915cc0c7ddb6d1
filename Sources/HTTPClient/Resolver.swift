import Dispatch
import Foundation
import Glibc
import Locking

/// Host names to addresses, off the event loops: `getaddrinfo` blocks, so it runs on a
/// small queue of its own, one lookup per name at a time however many calls ask, and its
/// answers are kept for `lifetime` seconds (upstreams are a handful of names).
final class Resolver: Sendable {
    typealias Completion = @Sendable (Result<[SocketAddress], HTTPClientError>) -> Void

    private struct Cached {
        var addresses: [SocketAddress]
        var expires: UInt64
    }

    private struct State {
        var cache: [String: Cached] = [:]
        var inFlight: [String: [Completion]] = [:]
    }

    private let state = Locked(State())
    private let lifetime: UInt64
    /// At most this many lookups block threads at once.
    private let slots = DispatchSemaphore(value: 4)
    private let queue = DispatchQueue(label: "teamcache.dns", attributes: .concurrent)

    init(lifetime: Double = 30) {
        self.lifetime = UInt64(lifetime * 1e9)
    }

    /// Calls `completion` (on a resolver thread, or at once from the cache) with the
    /// addresses of `host`:`port`.
    func resolve(_ host: String, port: Int, now: UInt64, _ completion: @escaping Completion) {
        if let literal = SocketAddress.literal(host, port: port) {
            completion(.success([literal]))
            return
        }
        let key = "\(host):\(port)"
        enum Step { case cached([SocketAddress]), joined, start }
        let step = state.withLock { state -> Step in
            if let cached = state.cache[key], cached.expires > now { return .cached(cached.addresses) }
            if state.inFlight[key] != nil {
                state.inFlight[key]!.append(completion)
                return .joined
            }
            state.inFlight[key] = [completion]
            return .start
        }
        switch step {
        case .cached(let addresses): completion(.success(addresses))
        case .joined: break
        case .start:
            queue.async { [self] in
                slots.wait()
                let result = Self.lookUp(host, port: port)
                slots.signal()
                let waiting = state.withLock { state -> [Completion] in
                    if case .success(let addresses) = result {
                        state.cache[key] = Cached(addresses: addresses, expires: monotonicNow() + lifetime)
                    }
                    return state.inFlight.removeValue(forKey: key) ?? []
                }
                for waiter in waiting { waiter(result) }
            }
        }
    }

    private static func lookUp(_ host: String, port: Int) -> Result<[SocketAddress], HTTPClientError> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            return .failure(HTTPClientError(.dns, "\(host) did not resolve: \(String(cString: gai_strerror(status)))"))
        }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let current = node {
            if let address = current.pointee.ai_addr, Int(current.pointee.ai_addrlen) <= MemoryLayout<sockaddr_storage>.size {
                var entry = SocketAddress()
                entry.length = current.pointee.ai_addrlen
                withUnsafeMutableBytes(of: &entry.storage) {
                    $0.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(entry.length)))
                }
                addresses.append(entry)
            }
            node = current.pointee.ai_next
        }
        guard !addresses.isEmpty else { return .failure(HTTPClientError(.dns, "\(host) has no addresses")) }
        return .success(addresses)
    }
}

/// Monotonic nanoseconds (the loops' clock).
func monotonicNow() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
