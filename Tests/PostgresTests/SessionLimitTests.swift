import Foundation
import Postgres
import Testing
import TestSupport

/// Every session carries its limits; a URL's own settings are kept beside them.
@Suite struct SessionLimitTests {
    @Test func limitsApplyAndTheURLsOptionsAreKept() throws {
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "options=-c%20search_path%3Dcustom"
        var limits = SessionLimits()
        limits.statementTimeout = 3
        limits.lockTimeout = 1.5
        let connection = try PostgresConnection(url: url, limits: limits)
        func show(_ setting: String) throws -> String? {
            try connection.query("SELECT current_setting($1) AS v", [.text(setting)]).first?.string("v")
        }
        #expect(try show("search_path") == "custom")
        #expect(try show("statement_timeout") == "3s")
        #expect(try show("lock_timeout") == "1500ms")
        #expect(try show("idle_in_transaction_session_timeout") == "10s")
    }

    @Test func aStatementPastItsLimitIsCancelledByTheServer() throws {
        var limits = SessionLimits()
        limits.statementTimeout = 0.2
        let connection = try PostgresConnection(url: TestDatabase.shared.url, limits: limits)
        let started = Date()
        #expect(throws: PostgresError.self) { try connection.execute("SELECT pg_sleep(5)") }
        #expect(Date().timeIntervalSince(started) < 2)
        // The session stays usable: the server ended the statement, not the connection.
        #expect(try connection.query("SELECT 1 AS one").first?.int("one") == 1)
    }

    /// The database client names no product: a session shows the name its limits give, and
    /// none unless given one (migrations keep it when their statement limits are lifted).
    @Test func aSessionShowsTheApplicationNameItsLimitsGive() throws {
        func name(_ limits: SessionLimits) throws -> String? {
            try PostgresConnection(url: TestDatabase.shared.url, limits: limits)
                .query("SELECT current_setting('application_name') AS v").first?.string("v")
        }
        #expect(try name(SessionLimits()) == "")
        var named = SessionLimits()
        named.applicationName = "inventory-service"
        #expect(try name(named) == "inventory-service")
        #expect(try name(named.withoutStatementLimits) == "inventory-service")
    }
}
