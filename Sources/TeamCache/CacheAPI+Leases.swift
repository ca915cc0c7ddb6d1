import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// Miss leases (single-flight) on lookups, raw GETs, writes and `release`: one caller of a
/// burst is made the filler; the others are told the key is pending and for how long.
extension CacheAPI {
    /// A descriptor miss that asked for a lease: granted, or pending behind a live one.
    func lookupMissWithLease(_ namespace: Namespace, key: String, entryKey: EntryKey, seconds: Int, holder: Int64?,
                             request: HTTPRequest) -> ReadAnswer {
        .blocking { [self] in
            let grant = try guarded(request) {
                try leases.grant(namespace, entryKey, seconds: seconds, holder: holder)
            }
            switch grant {
            case .granted(let lease):
                return .json(200, JSONValue.object([
                    ("hit", .bool(false)), ("key", .string(key)),
                    ("lease", .object([("id", .string(lease.id)), ("expires_in", .int(lease.expiresIn))])),
                ]).serialized)
            case .held(let retryAfter):
                return .json(200, JSONValue.object([
                    ("hit", .bool(false)), ("key", .string(key)), ("pending", .bool(true)),
                    ("retry_after", .int(retryAfter)),
                ]).serialized)
            }
        }
    }

    /// A raw GET miss that asked for a lease: 404 either way, with the lease or `pending`.
    func entryMissWithLease(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?,
                            request: HTTPRequest) -> ReadAnswer {
        .blocking { [self] in
            let grant = try guarded(request) { try leases.grant(namespace, key, seconds: seconds, holder: holder) }
            var problem: HTTPError
            switch grant {
            case .granted(let lease):
                problem = HTTPError(404, "No fresh entry under this key; you hold its lease: fill it.")
                problem.headers.add("Cache-Status", "teamcache; fwd=miss")
                problem.headers.add("TeamCache-Lease", "\(lease.id); expires_in=\(lease.expiresIn)")
                problem.members = [("lease", "\"\(lease.id)\""), ("expires_in", String(lease.expiresIn))]
            case .held(let retryAfter):
                problem = HTTPError(404, "No fresh entry under this key; another caller is filling it.")
                problem.headers.add("Cache-Status", "teamcache; fwd=miss; detail=pending")
                problem.headers.add("Retry-After", String(retryAfter))
                problem.members = [("pending", "true"), ("retry_after", String(retryAfter))]
            }
            return problem.response(requestID: request.requestID)
        }
    }

    /// A lease id from a client: its shape is checked before anything is stored.
    static func leaseID(_ text: String?, _ name: String) throws -> String? {
        guard let text else { return nil }
        guard LeaseStore.isWellFormed(text) else {
            throw HTTPError(400, "`\(name)` is not a lease id (tcl_ and 64 hex digits, as granted).")
        }
        return text
    }

    /// Completes the lease a write carried, once the write is committed. A lease that is
    /// unknown, another token's, expired or handed over is left alone: the write stands.
    func completeLease(_ id: String?, _ write: EntryWrite, outcome: Result<WriteOutcome, any Error>) {
        guard let id, case .success(let stored) = outcome else { return }
        switch stored {
        case .created, .replaced:
            _ = try? leases.complete(write.namespace, write.key, id: id, holder: write.writerTokenID)
        case .preconditionFailed, .storeFull: return
        }
    }

    /// `POST /v1/caches/{ns}/release` `{"key", "lease"}`: the holder gives its lease back
    /// (its call failed), so the next caller can fill the key. 204; 404 for a lease that is
    /// unknown, another token's, or already finished.
    func release(_ request: HTTPRequest, _ principal: Authenticator.Principal) throws -> HTTPResponse {
        let namespace = try RequestParsing.namespace(request)
        let json = try RequestParsing.jsonObject(request)
        try RequestParsing.rejectUnknownMembers(json, allowed: ["key", "lease"])
        guard let text = json["key"]?.stringValue, let key = EntryKey(Array(text.utf8)) else {
            throw HTTPError(422, "`key` must be the key the lease was granted on (1 to 512 bytes of UTF-8).")
        }
        guard let id = try Self.leaseID(json["lease"]?.stringValue, "lease") else {
            throw HTTPError(422, "`lease` must be the id of the lease to give back.")
        }
        let released = try guarded(request) {
            try leases.release(namespace, key, id: id, holder: principal.token?.id)
        }
        guard released else { throw HTTPError(404, "No live lease with this id on this key for this token.") }
        return HTTPResponse(status: 204)
    }
}
