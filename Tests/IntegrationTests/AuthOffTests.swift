import CacheCore
import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

@Suite struct AuthOffTests {
    @Test func authOffIsRefusedBeyondLoopback() {
        #expect(throws: ConfigurationError.self) {
            try Configuration.load(environment: ["TEAMCACHE_AUTH": "off", "TEAMCACHE_LISTEN": "0.0.0.0:8080"])
        }
        #expect(throws: Never.self) {
            try Configuration.load(environment: ["TEAMCACHE_AUTH": "off", "TEAMCACHE_LISTEN": "127.0.0.1:8080"])
        }
    }

    @Test func authOffServesWithoutTokens() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        #expect(try service.request("PUT", entryPath(TestService.namespace("open"), "k"), body: [1]).status == 201)
    }
}
