import Foundation
import Locking
import Testing
import TestSupport

/// A `2xx` on a write means the row is committed: the writer's next read sees it, whichever
/// loop, connection or group commit served either.
@Suite struct ReadYourWriteTests {
    @Test func everyAcknowledgedPutIsReadBackAtOnce() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("ryw")
        let failures = Locked<[String]>([])
        let port = service.port
        DispatchQueue.concurrentPerform(iterations: 16) { writer in
            guard let client = try? RawClient(port: port, timeout: 10) else { return }
            for round in 0..<150 {
                let path = entryPath(namespace, "w\(writer)-\(round)") + "?ttl=60"
                let body = Array("\(writer)-\(round)".utf8)
                guard let put = try? client.request("PUT", path, body: body), put.status == 201 else {
                    failures.withLock { $0.append("put \(writer)-\(round)") }
                    continue
                }
                let get = try? client.request("GET", entryPath(namespace, "w\(writer)-\(round)"))
                if get?.status != 200 || get?.body != body {
                    failures.withLock { $0.append("get \(writer)-\(round): \(get?.status ?? -1) \(get?.header("Cache-Status") ?? "")") }
                }
            }
        }
        #expect(failures.value.isEmpty, "\(failures.value.count) failures: \(failures.value.prefix(5))")
    }
}
