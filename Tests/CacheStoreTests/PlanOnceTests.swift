import CacheCore
@testable import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// The statements that take arrays (a write group's rows, a read batch's keys) are planned
/// once per session, however small their groups. PostgreSQL planned them anew for every
/// group or batch of fewer than ~10 (their generic plans, blind to the arrays' lengths,
/// estimated dearer than those groups' own plans): 0.5-1 ms a write group, ~70 µs a read
/// batch, under a light load. A write group is now a call of `tc_write_group`, which keeps one
/// generic plan (migration 0019); the reader's sessions are set to keep theirs.
@Suite struct PlanOnceTests {
    /// Twelve one-write groups on one connection: after PostgreSQL's first five, the
    /// statement the service prepared runs a generic plan (its own view of the session's
    /// prepared statements says so). The statement as it was sent before showed twelve
    /// custom plans here.
    @Test func smallGroupsAreNotPlannedEachTime() throws {
        let own = try OwnDatabase(prefix: "groupplan", maxConnections: 1)  // every group on one session
        defer { own.pool.closeIdle() }
        let (pool, store) = (own.pool, own.store)
        let namespace = try #require(Namespace("planned"))
        for index in 0..<12 {
            let write = EntryWrite(namespace: namespace, key: try #require(EntryKey(Array("key-\(index)".utf8))),
                                   body: StoredBody.fromIdentity(Array("body \(index)".utf8), contentType: "text/plain",
                                                                 policy: store.policy),
                                   contentType: "text/plain")
            let outcomes = try EntryGroupWrite.run([write], createOnly: false, store: store)
            guard outcomes.count == 1, case .created = outcomes[0] else {
                Issue.record("write \(index) answered \(outcomes)")
                return
            }
        }
        let plans = try pool.withConnection { connection in
            try connection.query("""
                SELECT generic_plans, custom_plans FROM pg_prepared_statements
                WHERE statement = $1
                """, [.text(EntryGroupWrite.statement)]).first
        }
        let row = try #require(plans, "the group statement is not prepared on the pool's connection")
        let (generic, custom) = (try row.int("generic_plans") ?? 0, try row.int("custom_plans") ?? 0)
        #expect(generic >= 6 && custom <= 5, "generic plans \(generic), custom plans \(custom)")
    }

    /// The function holds its statement to a generic plan (the setting is the function's own:
    /// the session's other statements keep PostgreSQL's choice), and replaces the columns an
    /// import's chunk replaces: its copy of that list is the one `EntryGroupWrite` keeps.
    @Test func theFunctionKeepsOnePlanAndReplacesWhatAnImportReplaces() throws {
        let connection = try OwnDatabase(prefix: "groupfn").connect()
        let row = try #require(try connection.query("""
            SELECT array_to_string(proconfig, ',') AS config, pg_get_functiondef(oid) AS definition
            FROM pg_proc WHERE proname = 'tc_write_group'
            """).first, "no tc_write_group")
        #expect(try row.string("config") == "plan_cache_mode=force_generic_plan")
        let definition = try #require(try row.string("definition"))
        let squeezed = definition.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for assignment in EntryGroupWrite.replacedColumns.split(separator: ",") {
            let wanted = assignment.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            #expect(squeezed.contains(wanted), "tc_write_group does not set \(wanted)")
        }
        // The setting is the function's: after a call, the session's own is what it was.
        let before = try #require(try connection.query("SELECT current_setting('plan_cache_mode') AS mode").first)
        try connection.query(EntryGroupWrite.statement, [
            .textArray(["planned"]), .bytesArray([Array("k".utf8)]), .bytesArray([Array("v".utf8)]),
            .textArray(["identity"]), .textArray(["text/plain"]), .intArray([1]), .textArray(["\"e\""]),
            .optionalTextArray([nil]), .optionalTextArray([nil]), .optionalTextArray([nil]), .textArray(["[]"]),
            .optionalTextArray([nil]), .intArray([0]), .intArray([0]), .optionalIntArray([nil]),
            .optionalIntArray([nil]), .null, .int(60), .int(0), .double(1), .bool(false), .intArray([0]),
        ])
        let after = try #require(try connection.query("SELECT current_setting('plan_cache_mode') AS mode").first)
        #expect(try after.string("mode") == before.string("mode"))
    }

    /// Twelve one-key read batches on a session set up as the reader's sessions are (their
    /// setup statements, then their batch statement): after PostgreSQL's first five, the batch
    /// runs a generic plan. Without the setup, twelve custom plans. Behind a transaction pooler
    /// the setup is empty: a `SET` there would reach other clients' sessions.
    @Test func oneKeyReadBatchesAreNotPlannedEachTime() throws {
        let connection = try OwnDatabase(prefix: "readplan").connect()
        let session = EntryReadBatcher.session(url: TestDatabase.shared.url, timeout: 2, limits: SessionLimits(),
                                               standby: false)
        for sql in session.setup { try connection.execute(sql) }
        let batch = try #require(session.statements.first)
        #expect(batch.sql == EntryReadBatcher.selectBatch)
        for index in 0..<12 {
            try connection.query(batch.sql, [.textArray(["planned"]), .bytesArray([Array("key-\(index)".utf8)])])
        }
        let row = try #require(try connection.query("""
            SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1
            """, [.text(EntryReadBatcher.selectBatch)]).first, "the batch statement was not prepared")
        let (generic, custom) = (try row.int("generic_plans") ?? 0, try row.int("custom_plans") ?? 0)
        #expect(generic >= 6 && custom <= 5, "generic plans \(generic), custom plans \(custom)")
        var pooled = SessionLimits()
        pooled.transactionPooler = true
        #expect(EntryReadBatcher.session(url: TestDatabase.shared.url, timeout: 2, limits: pooled, standby: false)
            .setup.isEmpty)
    }
}
