import CacheCore
import Foundation
import Postgres

/// One import's work, shared by `teamcache import` and `POST /v1/caches/{ns}/import`: dump
/// lines in (numbered), committed 500 to a transaction, outcomes and rejections counted.
///
/// `overlapped` (the command line's): a full chunk commits on a background queue while the
/// next one is parsed, one chunk in flight at most (memory: two chunks), the transactions
/// still one after the other in input order. Parsing was a third of an import's time and
/// the database sat idle through it (bench/dump.sh).
public struct DumpImport {
    public let store: any EntryStorage
    public let namespace: Namespace?
    public let conflict: ImportConflictPolicy
    public static let chunkEntries = 500
    public static let chunkBytes = 16 * 1024 * 1024
    /// Rejections listed at most (all are counted).
    public let listed: Int

    private var chunk: [(line: Int, entry: DumpedEntry)] = []
    private var chunkBytes = 0
    public private(set) var outcomes: [ImportOutcome: Int] = [:]
    /// The first `listed` rejections: malformed lines, entries past a cap, entries refused.
    public private(set) var rejections: [(line: Int, reason: String)] = []
    /// Lines not stored for being malformed or refused (store_full is in `outcomes`).
    public private(set) var rejected = 0

    public let overlapped: Bool
    private var inFlight: (lines: [(line: Int, entry: DumpedEntry)], outcomes: Prefetch<[ImportOutcome]>)?

    public init(store: any EntryStorage, namespace: Namespace?, conflict: ImportConflictPolicy, listed: Int = 20,
                overlapped: Bool = false) {
        (self.store, self.namespace, self.conflict, self.listed) = (store, namespace, conflict, listed)
        self.overlapped = overlapped
    }

    /// Takes one line (parsed and checked now); commits when the chunk is full. Throws only
    /// when the database fails (a line's own fault is a rejection).
    public mutating func add(_ line: [UInt8], number: Int) throws {
        do {
            let entry = try DumpedEntry.parse(line, namespace: namespace, policy: store.policy, now: store.clock.now())
            chunk.append((number, entry))
            chunkBytes += entry.body.count
        } catch {
            reject(number, error.reason)
        }
        if chunk.count >= Self.chunkEntries || chunkBytes >= Self.chunkBytes { try dispatch() }
    }

    public mutating func reject(_ number: Int, _ reason: String) {
        rejected += 1
        list(number, reason)
    }

    /// Keeps the `listed` lowest line numbers: a chunk's store_full and refusals are known
    /// only when it commits, which may be after later lines were parsed (and rejected).
    private mutating func list(_ number: Int, _ reason: String) {
        guard rejections.count < listed || number < rejections[rejections.count - 1].line else { return }
        let position = rejections.firstIndex { $0.line > number } ?? rejections.count
        rejections.insert((number, reason), at: position)
        if rejections.count > listed { rejections.removeLast() }
    }

    /// Commits what is queued and waits for every commit in flight: when it returns, every
    /// line added so far is stored, counted or rejected.
    public mutating func commit() throws {
        try dispatch()
        try settle()
    }

    /// Sends the queued chunk to be committed, after the one in flight is settled: in the
    /// background when `overlapped`, else now.
    private mutating func dispatch() throws {
        guard !chunk.isEmpty else { return }
        let taken = chunk
        (chunk, chunkBytes) = ([], 0)
        try settle()
        let (store, conflict, entries) = (store, conflict, taken.map(\.entry))
        inFlight = (taken, Prefetch(inline: !overlapped) { try store.importEntries(entries, policy: conflict) })
        if !overlapped { try settle() }
    }

    /// The chunk in flight waited for and counted; if the server refused a statement (the
    /// whole transaction rolled back), entry by entry, to reject only the one at fault.
    private mutating func settle() throws {
        guard let flight = inFlight else { return }
        inFlight = nil
        let taken = flight.lines
        do {
            record(try flight.outcomes.value(), lines: taken.map(\.line))
        } catch let error as PostgresError where error.kind == .query && !error.isUnavailable {
            for (number, entry) in taken {
                do {
                    record(try store.importEntries([entry], policy: conflict), lines: [number])
                } catch let error as PostgresError where error.kind == .query && !error.isUnavailable {
                    reject(number, "the database refused it (SQLSTATE \(error.sqlState?.code ?? "?"))")
                }
            }
        }
    }

    private mutating func record(_ results: [ImportOutcome], lines: [Int]) {
        for (outcome, number) in zip(results, lines) {
            outcomes[outcome, default: 0] += 1
            if outcome == .storeFull { list(number, "store_full: a byte cap of the store or the namespace (507)") }
        }
    }

    /// `imported 2, unchanged 0, …, rejected 1`.
    public var counts: String {
        ImportOutcome.allCases.map { "\($0.rawValue) \(outcomes[$0, default: 0])" }.joined(separator: ", ")
            + ", rejected \(rejected)"
    }

    /// Rejections (and store_full entries) not listed.
    public var unlisted: Int { rejected + outcomes[.storeFull, default: 0] - rejections.count }
}

