import CLinux
import Foundation
import Glibc
import Locking
import Observability
import Synchronization

/// One epoll loop on its own thread, owning a listening socket (SO_REUSEPORT) and the
/// connections accepted on it.
///
/// Everything but `pending` is touched only by the loop's thread. Other threads (workers
/// finishing a handler, shutdown) hand closures over with `execute`, which wakes the loop
/// through an eventfd.
///
/// Code above the HTTP layer can watch descriptors of its own here (`watch`) and run work
/// at the end of each iteration (`onEachIteration`): that is how a database client sends a
/// batch of reads per iteration and picks up the answers without a thread of its own.
public final class EventLoop: @unchecked Sendable, Reactor {
    // @unchecked: the loop's own state (connections, watchers, hooks, clocks, buffers) is
    // touched only on its thread, as a reactor's is (swift-nio's loops are @unchecked for the
    // same reason); `pending`, the one thing other threads reach, is guarded by `pendingLock`.
    // The types confined to it are not Sendable and cross threads only as `LoopBound`s.
    let context: ServerContext
    /// The loop's position among the server's loops (0-based).
    public let index: Int
    private let epoll: Int32
    private let wakeFD: Int32
    private var listener: Int32
    // Unchecked at run time, as `Connection.parser` is: read on every event and request, on
    // the loop's thread only, and never accessed from inside another access to itself.
    @exclusivity(unchecked) private var connections: [Int32: Connection] = [:]
    private var watchers: [Int32: () -> Void] = [:]
    private var iterationHooks: [() -> Void] = []
    private let pendingLock = NSLock()
    private var pending: [@Sendable () -> Void] = []
    private var draining = false
    private var acceptPaused = false
    private var requestCounter: UInt64 = 0
    /// `<process tag>-<loop>-`: generated ids are this plus a counter in hex.
    private lazy var requestIDPrefix = "\(context.requestIDPrefix)-\(index)-"
    private var dateSecond = 0
    private var nextSweep: UInt64 = 0
    /// Monotonic time of the current loop iteration.
    private(set) var now: UInt64 = monotonicNanoseconds()
    private(set) var date = ""
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    let finished = DispatchSemaphore(value: 0)
    /// This loop's request metrics (summed with the other loops' at scrape time).
    let requestStats = RequestStats()
    /// The loop's thread (`pthread_self`), once it runs; 0 before.
    private let thread = Atomic<UInt>(0)
    /// Access log lines, handed to the log sink in chunks rather than a lock per line.
    @exclusivity(unchecked) private var accessLog = LogLine(capacity: 64 * 1024)
    /// Each route's rendered `"method"` and `"route"` fields, by route id (`accessRoute`).
    @exclusivity(unchecked) private var accessRoutes: [[(method: String, part: LogLine.Part)]] = []

    /// TCP_NODELAY from <netinet/tcp.h> (not in Glibc's module; the value is fixed by Linux's ABI).
    private static let tcpNoDelay: Int32 = 1
    private static let listenerTag: UInt64 = UInt64.max
    private static let wakeTag: UInt64 = UInt64.max - 1
    /// Set in the epoll tag of a watched descriptor (connections carry their bare fd).
    private static let watchedBit: UInt64 = 1 << 40

    init(index: Int, listener: Int32, context: ServerContext) throws {
        self.index = index
        self.listener = listener
        self.context = context
        epoll = try systemCall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        wakeFD = try systemCall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
        try register(listener, tag: Self.listenerTag, events: EPOLLIN.rawValue)
        try register(wakeFD, tag: Self.wakeTag, events: EPOLLIN.rawValue)
        refreshDate()
        ownHandle = ReactorHandle(self)
    }

    /// Held by this loop alone, from the end of `init` (which cannot hand out `self` before)
    /// until it stops running or never will (`releaseHandle`); clients hold it weakly (see
    /// `ReactorHandle`). Loop-confined, like `attach`, the only reader.
    private var ownHandle: ReactorHandle?
    public var handle: ReactorHandle? { ownHandle }

    /// Lets the handle go (it holds the loop): when `run` returns, or for a loop never run.
    func releaseHandle() { ownHandle = nil }

    deinit {
        scratch.deallocate()
        close(epoll)
        close(wakeFD)
    }

    /// Whether the calling thread is the loop's.
    public var inLoop: Bool { thread.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Makes the calling thread the loop's: called once, first thing on the thread that runs it.
    func claimThread() {
        thread.store(UInt(pthread_self()), ordering: .relaxed)
        LoopThreads.markCurrent()
    }

    /// Hands `job` (work that may block, started from this loop) to the server's worker
    /// pool; false when its queue is full.
    public var handOff: @Sendable (_ job: @escaping @Sendable () -> Void) -> Bool {
        let workers = context.workers
        return { job in workers.submit(job) }
    }

    /// Whether the worker pool refuses work now: a request that would hand it work later
    /// is better refused at once (503, nothing done).
    public var workersAreFull: Bool { context.workers.isFull }

    /// Runs `task` on the loop's thread.
    public func execute(_ task: @escaping @Sendable () -> Void) {
        let wasEmpty = pendingLock.withLock {
            pending.append(task)
            return pending.count == 1
        }
        // One wake-up covers every task queued before the loop drains the list.
        if wasEmpty {
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
        }
    }

    /// The loop body; returns once draining has closed every connection.
    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while !(draining && connections.isEmpty) {
            let count = epoll_wait(epoll, &events, Int32(events.count), 250)
            now = monotonicNanoseconds()
            refreshDate()
            if count > 0 {
                for event in events[0..<Int(count)] { handle(event) }
            }
            if now >= nextSweep { sweep() }
            for hook in iterationHooks { hook() }
        }
        flushAccessLog()
        releaseHandle()
        finished.signal()
    }

    private func handle(_ event: epoll_event) {
        let tag = event.data.u64
        switch tag {
        case Self.listenerTag: acceptConnections()
        case Self.wakeTag: runPending()
        case _ where tag & Self.watchedBit != 0:
            watchers[Int32(truncatingIfNeeded: tag & ~Self.watchedBit)]?()
        default:
            guard let connection = connections[Int32(truncatingIfNeeded: tag)] else { return }
            // An error or hang-up is reported even while the connection is not read from (a
            // backlog, a full pipeline): with nothing to read it would come back every turn.
            if event.events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 && !connection.isReading {
                connection.close(reason: "hang-up while not reading")
                return
            }
            if event.events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue | EPOLLRDHUP.rawValue) != 0 {
                connection.onReadable()
            }
            if !connection.isClosed && event.events & EPOLLOUT.rawValue != 0 { connection.onWritable() }
        }
    }

    private func runPending() {
        var counter: UInt64 = 0
        _ = read(wakeFD, &counter, 8)
        let tasks = pendingLock.withLock {
            let taken = pending
            pending.removeAll(keepingCapacity: true)
            return taken
        }
        for task in tasks { task() }
    }

    private func acceptConnections() {
        while listener >= 0 {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let fd = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    accept4(listener, $0, &length, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
                }
            }
            if fd < 0 {
                switch errno {
                case EINTR, ECONNABORTED: continue
                case EAGAIN: return
                default:
                    // EMFILE and friends: stop accepting until the next sweep, or the
                    // level-triggered listener would spin the loop.
                    context.failures.log(.warn, "accept failed", kind: "accept \(errno)", [("errno", .int(Int(errno)))])
                    pauseAccepting()
                    return
                }
            }
            let peer = Self.peerAddress(address)
            if let refusal = context.admitConnection(from: peer) {
                Connection.refuse(fd, refusal)
                continue
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), Self.tcpNoDelay, &one, socklen_t(MemoryLayout<Int32>.size))
            if var bytes = Int32(exactly: context.configuration.socketSendBuffer), bytes > 0 {
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, socklen_t(MemoryLayout<Int32>.size))
            }
            let connection = Connection(fd: fd, loop: self, peer: peer)
            do {
                try register(fd, tag: UInt64(fd), events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
                connections[fd] = connection
            } catch {
                close(fd)
                context.connectionClosed(from: peer)
            }
        }
    }

    /// The client's IPv4 address as text (the listeners are IPv4), for per-client limits.
    private static func peerAddress(_ address: sockaddr_in) -> String {
        var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        var raw = address.sin_addr
        guard inet_ntop(AF_INET, &raw, &text, socklen_t(text.count)) != nil else { return "" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private func pauseAccepting() {
        guard !acceptPaused, listener >= 0 else { return }
        acceptPaused = true
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, listener, nil)
    }

    func register(_ fd: Int32, tag: UInt64, events: UInt32) throws {
        var event = epoll_event()
        event.events = events
        event.data.u64 = tag
        try systemCall("epoll_ctl(ADD)") { epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) }
    }

    func modify(_ fd: Int32, events: UInt32) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = UInt64(fd)
        _ = epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event)
    }

    // MARK: Descriptors and hooks of other layers (loop thread only)

    /// Calls `callback` whenever `fd` is readable (or, with `writable`, writable), or has
    /// an error or hang-up. Watching a watched descriptor again changes its interest.
    public func watch(_ fd: Int32, writable: Bool, _ callback: @escaping () -> Void) {
        let events = EPOLLIN.rawValue | (writable ? EPOLLOUT.rawValue : 0)
        var event = epoll_event()
        event.events = events
        event.data.u64 = Self.watchedBit | UInt64(UInt32(bitPattern: fd))
        let operation = watchers[fd] == nil ? EPOLL_CTL_ADD : EPOLL_CTL_MOD
        watchers[fd] = callback
        if epoll_ctl(epoll, operation, fd, &event) != 0 {
            context.logger.warn("epoll_ctl failed for a watched descriptor", [("errno", .int(Int(errno)))])
        }
    }

    /// Stops watching `fd`; call before closing it.
    public func unwatch(_ fd: Int32) {
        guard watchers.removeValue(forKey: fd) != nil else { return }
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
    }

    /// Runs `hook` at the end of every iteration, after the iteration's events (and at
    /// least every 250 ms when idle).
    public func onEachIteration(_ hook: @escaping () -> Void) {
        iterationHooks.append(hook)
    }

    /// Monotonic nanoseconds at the start of the current iteration.
    public var nanoseconds: UInt64 { now }

    /// Forgets a closed connection (its fd was already removed from epoll by close()).
    func forget(_ connection: Connection) {
        if connections[connection.fd] === connection { connections[connection.fd] = nil }
        context.connectionClosed(from: connection.peer)
    }

    // MARK: Requests

    var isDraining: Bool { draining }

    /// A request id: the client's `X-Request-Id` when it is short and plain, else a new one.
    func requestID(for request: HTTPRequest) -> RequestID {
        if let given = request.headers["X-Request-Id"], (1...128).contains(given.utf8.count),
           given.utf8.allSatisfy({ HTTPHeadParser.isTokenByte($0) || $0 == UInt8(ascii: ":") }) {
            return RequestID(given)
        }
        requestCounter &+= 1
        return RequestID(prefix: requestIDPrefix, number: requestCounter)
    }

    /// The access log line and the metrics of a finished request.
    func record(method: String, routeID: Int, route: String, status: Int, bytes: Int, seconds: Double,
                requestID: RequestID) {
        requestStats.observe(route: routeID, method: method, status: status, seconds: seconds)
        guard LogSink.shared.level <= .info else { return }
        // What repeats is rendered once (the head, the keys, a route's method and template):
        // field by field, the line was a sixth of a near-cache hit's instructions (callgrind).
        let known = accessRoute(method: method, routeID: routeID, route: route)
        // One access to the line for all of it: each mutating call on the loop's property was
        // an exclusivity check of its own.
        AccessLine.write(into: &accessLog, method: method, route: route, known: known, status: status,
                         bytes: bytes, microseconds: Int(seconds * 1e6), requestID: requestID)
        if accessLog.count > 32 * 1024 { flushAccessLog() }
    }

    /// A matched route's `"method"` and `"route"` fields, rendered the first time each method
    /// is answered there (its own, and HEAD for a GET route). Unmatched, where any token may
    /// come as a method, and past four methods a route, they are written field by field: the
    /// memory stays bounded whatever clients send.
    private func accessRoute(method: String, routeID: Int, route: String) -> LogLine.Part? {
        guard routeID >= 0 else { return nil }
        if routeID >= accessRoutes.count {
            guard routeID < 4096 else { return nil }
            accessRoutes.append(contentsOf: repeatElement([], count: routeID + 1 - accessRoutes.count))
        }
        if let known = accessRoutes[routeID].first(where: { $0.method == method }) { return known.part }
        guard accessRoutes[routeID].count < 4 else { return nil }
        let part = LogLine.tokenFields(["method": method, "route": route])
        accessRoutes[routeID].append((method, part))
        return part
    }

    private func flushAccessLog() {
        if !accessLog.isEmpty { LogSink.shared.write(accessLog.take()) }
    }

    // MARK: Time

    private func refreshDate() {
        let second = time(nil)
        if second != dateSecond {
            dateSecond = second
            date = HTTPDate.format(unixSeconds: second)
        }
    }

    /// Closes connections past their deadline and hands on the access log; runs every 250 ms.
    private func sweep() {
        nextSweep = now + 250_000_000
        flushAccessLog()
        MemoryReturn.trimIfDue(now: now)
        if acceptPaused && listener >= 0 {
            acceptPaused = false
            try? register(listener, tag: Self.listenerTag, events: EPOLLIN.rawValue)
        }
        for connection in Array(connections.values) { connection.checkDeadline(now: now) }
    }

    // MARK: Shutdown

    /// Stops accepting, closes idle connections and lets busy ones finish their request.
    func beginDraining() {
        draining = true
        closeListener()
        for connection in Array(connections.values) { connection.drain() }
    }

    /// Stops accepting: the listening socket is closed (once).
    func closeListener() {
        guard listener >= 0 else { return }
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, listener, nil)
        close(listener)
        listener = -1
    }

    /// Closes every connection now (the grace period is over).
    func closeAll() {
        draining = true
        for connection in Array(connections.values) { connection.close(reason: "shutdown") }
    }

    func remove(_ fd: Int32) {
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
    }
}

/// The access line's parts that never change, rendered once.
enum AccessLine {
    static let head = LogLine.head(.info, component: "http", message: "request")
    static let status = LogLine.key("status")
    static let bytes = LogLine.key("bytes")
    static let duration = LogLine.key("duration_us")
    static let requestID = LogLine.key("request_id")

    static func write(into line: inout LogLine, method: String, route: String, known: LogLine.Part?, status: Int,
                      bytes: Int, microseconds: Int, requestID: RequestID) {
        line.begin(head)
        // Method and id are HTTP tokens and the route a template: nothing in them needs escaping.
        if let known {
            line.append(known)
        } else {
            line.field("method", token: method)
            line.field("route", token: route)
        }
        line.field(Self.status, status)
        line.field(Self.bytes, bytes)
        line.field(duration, microseconds)
        line.field(Self.requestID, token: requestID.head, hex: requestID.number)
        line.end()
    }
}
