import CacheCore
import Foundation
import HTTPServer
import Locking
import Observability

/// Requests parked until their key changes, their lease's holder is done, or their time runs
/// out: a lookup or GET with `wait` that would be a miss while another caller fills the key.
///
/// A parked request is a closure and a timer entry on its connection's event loop: it holds
/// no worker, no database connection and no loop time. It is woken by the key listener (a
/// committed change to the key, or its lease ending, on any replica), by its own re-check
/// time (its deadline, the lease's expiry, or every second while the listener is down), or
/// at shutdown; waking runs its read again on its loop.
final class Waiters: Sendable {
    /// One parked request. Confined to its loop (not `Sendable`): the shared table holds it as
    /// a `LoopBound`, and a wake-up runs it through its loop's `execute`.
    final class Waiter {
        let namespace: String
        let key: [UInt8]
        let loop: EventLoop
        /// Runs the request's read again; `final`: it may not park again (time is up, or
        /// the service is stopping), so it answers now.
        /// Dropped once run (or cancelled): a done waiter left in a timer heap holds nothing.
        var retry: ((_ final: Bool) -> Void)?
        var done = false

        init(namespace: String, key: [UInt8], loop: EventLoop, retry: @escaping (Bool) -> Void) {
            (self.namespace, self.key, self.loop, self.retry) = (namespace, key, loop, retry)
        }
    }

    /// The key a waiter parks on to wake at a change of any key of its namespace (no entry
    /// has an empty key).
    static let anyKey: [UInt8] = []

    /// How often a waiter re-checks while the listener is down (notifications may be lost).
    static let fallbackRecheck: TimeInterval = 1

    /// A parked waiter as the shared table holds it: its loop (to run it there) and itself.
    struct Parked {
        let loop: EventLoop
        let waiter: LoopBound<Waiter>
    }

    /// What every loop shares, only inside `state`'s lock.
    struct State {
        var byKey: [String: [[UInt8]: [ObjectIdentifier: Parked]]] = [:]
        var count = 0
        var closing = false
        var listenerIsUp = false
        /// Wake-ups. A request notes their count before it reads; if its key was woken after
        /// that (a fill that landed between its read and its parking), it reads again instead
        /// of parking, so no notification is lost in that gap.
        var wakes = RecentChanges()
        /// One timer heap per event loop, by loop index (each used on its loop only).
        var timers: [Int: LoopBound<WaiterTimers>] = [:]

        /// Takes every parked waiter out of the table.
        mutating func takeAll() -> [Parked] {
            let all = byKey.values.flatMap { $0.values.flatMap(\.values) }
            byKey = [:]
            count = 0
            return all
        }
    }

    let capacity: Int
    private let state = Locked(State())
    private let outcomes: CounterFamily?

    init(capacity: Int, metrics: MetricsRegistry?) {
        self.capacity = capacity
        outcomes = metrics?.counter(MetricCatalogue.waitsTotal)
        guard let metrics else { return }
        let parked = metrics.gauge(MetricCatalogue.waiters)
        let up = metrics.gauge(MetricCatalogue.notifyListenerUp)
        metrics.addCollector { [weak self] in
            guard let self else { return }
            let (waiting, listening) = state.withLock { ($0.count, $0.listenerIsUp) }
            parked.set([], Double(waiting))
            up.set([], listening ? 1 : 0)
        }
    }

    /// Gives `loop` its timer heap (on the loop's thread, before it serves).
    func attach(to loop: EventLoop) {
        let heap = WaiterTimers()
        let bound = LoopBound(heap, on: loop)
        state.withLock { $0.timers[loop.index] = bound }
        // The loop unowned: the hook is stored in the loop, and a strong capture kept every
        // loop alive for ever (a cycle), after its server and application had gone.
        loop.onEachIteration { [weak self, unowned loop] in self?.fireDue(heap, now: loop.nanoseconds) }
    }

    var listenerUp: Bool { state.withLock { $0.listenerIsUp } }

    /// Whether any key of `namespace` may have changed after `since` (a count noted earlier).
    func changed(_ namespace: String, since: UInt64) -> Bool {
        state.withLock { $0.wakes.changed(namespace, Self.anyKey, since: since) }
    }

    /// How long from now a waiter may sleep before it must re-check by itself.
    func recheckDelay(untilDeadline deadline: TimeInterval) -> TimeInterval {
        listenerUp ? deadline : min(deadline, Self.fallbackRecheck)
    }

    /// The wake-up count now: note it before reading a key that may be parked on.
    var now: UInt64 { state.withLock { $0.wakes.count } }

    /// Parks a request on `loop` (call on that loop's thread) until woken or `at`
    /// (monotonic nanoseconds). `.full` when it may not park (full, or stopping): answer
    /// now; `.wokenMeanwhile` when its key was woken since `since`: read again now.
    enum Parking { case parked(Waiter), full, wokenMeanwhile }

    func park(namespace: String, key: [UInt8], since: UInt64, loop: EventLoop, at: UInt64,
              retry: @escaping (_ final: Bool) -> Void) -> Parking {
        let waiter = Waiter(namespace: namespace, key: key, loop: loop, retry: retry)
        let parked = Parked(loop: loop, waiter: LoopBound(waiter, on: loop))
        var woken = false
        let capacity = self.capacity
        let heap: LoopBound<WaiterTimers>? = state.withLock { state in
            guard !state.closing, state.count < capacity, let heap = state.timers[loop.index] else { return nil }
            if state.wakes.changed(namespace, key, since: since) {
                woken = true
                return nil
            }
            state.byKey[namespace, default: [:]][key, default: [:]][ObjectIdentifier(waiter)] = parked
            state.count += 1
            return heap
        }
        if woken { return .wokenMeanwhile }
        guard let heap else { return .full }
        heap.value.push(at, waiter)
        return .parked(waiter)
    }

    /// Drops a parked waiter whose client went away (on its loop): it never runs.
    func cancel(_ waiter: Waiter) {
        guard !waiter.done else { return }
        waiter.done = true
        waiter.retry = nil
        remove(waiter)
        count("disconnected")
    }

    /// Wakes the waiters of one key (nil: of the whole namespace), on their loops.
    func wake(namespace: String, key: [UInt8]?) {
        let woken: [Parked] = state.withLock { state in
            state.wakes.record(namespace, key)
            guard var keys = state.byKey[namespace] else { return [] }
            var taken: [Parked] = []
            if let key {
                taken = keys.removeValue(forKey: key).map { Array($0.values) } ?? []
                // Waiters on the whole namespace (the change feed's) wake at any of its keys.
                taken += keys.removeValue(forKey: Self.anyKey).map { Array($0.values) } ?? []
            } else {
                taken = keys.values.flatMap(\.values)
                keys = [:]
            }
            state.byKey[namespace] = keys.isEmpty ? nil : keys
            state.count -= taken.count
            return taken
        }
        run(woken, final: false)
    }

    /// Wakes every waiter: they re-check (the listener reconnected and may have missed
    /// notifications), or answer now when `final` (the service is stopping).
    func wakeAll(final: Bool) {
        let woken: [Parked] = state.withLock { state in
            if final { state.closing = true }
            // Everything may have changed (the listener was away): nothing noted before counts.
            state.wakes.recordEverything()
            return state.takeAll()
        }
        run(woken, final: final)
    }

    /// Runs waiters taken out of the table, each on its own loop.
    private func run(_ woken: [Parked], final: Bool) {
        for parked in woken {
            let waiter = parked.waiter
            parked.loop.execute { [self] in fire(waiter.value, final: final, removed: true) }
        }
    }

    func setListener(up: Bool) {
        state.withLock { $0.listenerIsUp = up }
    }

    func count(_ outcome: String) { outcomes?.inc([outcome]) }

    /// Runs a waiter once (on its loop); a timer or a wake-up that comes second does nothing.
    private func fire(_ waiter: Waiter, final: Bool, removed: Bool) {
        guard !waiter.done, let retry = waiter.retry else { return }
        waiter.done = true
        waiter.retry = nil
        if !removed { remove(waiter) }
        retry(final)
    }

    private func remove(_ waiter: Waiter) {
        let (namespace, key, id) = (waiter.namespace, waiter.key, ObjectIdentifier(waiter))
        state.withLock { state in
            guard state.byKey[namespace]?[key]?.removeValue(forKey: id) != nil else { return }
            state.count -= 1
            if state.byKey[namespace]?[key]?.isEmpty == true { state.byKey[namespace]?[key] = nil }
            if state.byKey[namespace]?.isEmpty == true { state.byKey[namespace] = nil }
        }
    }

    /// Re-runs the waiters on `heap` whose time has come (their read decides whether the
    /// time is really up or they park again).
    private func fireDue(_ heap: WaiterTimers, now: UInt64) {
        while let waiter = heap.popDue(now) {
            fire(waiter, final: false, removed: false)
        }
    }
}

/// A loop's parked waiters by re-check time: a binary min-heap, so a loop iteration looks at
/// the earliest only, however many are parked.
final class WaiterTimers {
    private var heap: [(at: UInt64, waiter: Waiters.Waiter)] = []
    /// Woken and dropped waiters stay in the heap until their time; when it has grown to
    /// this, they are swept out (amortised O(1) per push), so churn cannot grow it unbounded.
    private var compactAt = 1024

    var count: Int { heap.count }

    func push(_ at: UInt64, _ waiter: Waiters.Waiter) {
        if heap.count >= compactAt { compact() }
        heap.append((at, waiter))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].at < heap[parent].at else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Keeps the waiters not yet run, in heap order again.
    private func compact() {
        heap = heap.filter { !$0.waiter.done }.sorted { $0.at < $1.at }  // a sorted array is a heap
        compactAt = max(1024, heap.count * 2)
    }

    /// The earliest waiter due by `now` that has not run yet; nil when none is due.
    func popDue(_ now: UInt64) -> Waiters.Waiter? {
        while let first = heap.first, first.at <= now {
            let last = heap.removeLast()
            if !heap.isEmpty {
                heap[0] = last
                var parent = 0
                while true {
                    let left = 2 * parent + 1, right = left + 1
                    var smallest = parent
                    if left < heap.count && heap[left].at < heap[smallest].at { smallest = left }
                    if right < heap.count && heap[right].at < heap[smallest].at { smallest = right }
                    if smallest == parent { break }
                    heap.swapAt(parent, smallest)
                    parent = smallest
                }
            }
            if !first.waiter.done { return first.waiter }
        }
        return nil
    }
}
