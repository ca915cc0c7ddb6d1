import CacheCore
import Foundation
import Postgres

/// One import's work, shared by `teamcache import` and `POST /v1/caches/{ns}/import`: dump
/// lines in (numbered), committed 500 to a transaction, outcomes and rejections counted.
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

    public init(store: any EntryStorage, namespace: Namespace?, conflict: ImportConflictPolicy, listed: Int = 20) {
        (self.store, self.namespace, self.conflict, self.listed) = (store, namespace, conflict, listed)
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
        if chunk.count >= Self.chunkEntries || chunkBytes >= Self.chunkBytes { try commit() }
    }

    public mutating func reject(_ number: Int, _ reason: String) {
        rejected += 1
        list(number, reason)
    }

    private mutating func list(_ number: Int, _ reason: String) {
        if rejections.count < listed { rejections.append((number, reason)) }
    }

    /// Commits what is queued in one transaction; if the server refuses a statement (the
    /// whole transaction rolled back), entry by entry, to reject only the one at fault.
    public mutating func commit() throws {
        guard !chunk.isEmpty else { return }
        let taken = chunk
        (chunk, chunkBytes) = ([], 0)
        do {
            record(try store.importEntries(taken.map(\.entry), policy: conflict), lines: taken.map(\.line))
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
