import CacheKeys
import Foundation

/// Writes made while the service cannot be reached: kept in a bounded outbox (in the file when
/// there is one, in the Python client's table and format) and sent when it answers again. Each key waits
/// once, as its last write, over the version the first was made over. Sent as made when the
/// key still holds that version; otherwise the later write wins (by time), and the meeting is
/// reported (`conflicts`, `onConflict`), never lost silently.
extension LocalTier {
    /// A queued write that met a version it had not seen, or that the service refused:
    /// `overwrote`, `superseded`, or `refused (STATUS)`.
    public struct OutboxConflict: Sendable, Equatable {
        public let namespace: String
        public let key: String
        public let outcome: String
        public let writtenAt: Double
    }

    struct Queued: Sendable {
        enum Write: Sendable {
            case put(body: Data, contentType: String, ttl: Int?, tags: [String])
            case upsert(Descriptor, ModelAnswer, ttl: Int?, tags: [String], staleWhileRevalidate: Int?)

            var kind: String {
                if case .put = self { "put" } else { "upsert" }
            }

            /// As the Python client writes it (a put's body as Latin-1 text: bytes kept as they are).
            var payload: JSONValue {
                switch self {
                case .put(let body, let contentType, let ttl, let tags):
                    .object([("body", .string(String(decoding: body.map { UInt16($0) }, as: UTF16.self))),
                             ("content_type", .string(contentType)), ("ttl", ttl.map { .int($0) } ?? .null),
                             ("tags", .array(tags.map(JSONValue.string))), ("stale_while_revalidate", .null)])
                case .upsert(let descriptor, let answer, let ttl, let tags, let window):
                    .object([("descriptor", .object(descriptor.jsonMembers)), ("response", .string(answer.response)),
                             ("metadata", answer.metadata ?? .null), ("ttl", ttl.map { .int($0) } ?? .null),
                             ("tags", .array(tags.map(JSONValue.string))),
                             ("stale_while_revalidate", window.map { .int($0) } ?? .null)])
                }
            }

            init?(kind: String, payload: JSONValue) {
                let ttl = payload["ttl"]?.integerValue
                var tags: [String] = []
                if case .array(let items)? = payload["tags"] { tags = items.compactMap(\.stringValue) }
                switch kind {
                case "put":
                    guard let text = payload["body"]?.stringValue,
                          text.unicodeScalars.allSatisfy({ $0.value < 256 }) else { return nil }
                    self = .put(body: Data(text.unicodeScalars.map { UInt8($0.value) }),
                                contentType: payload["content_type"]?.stringValue ?? "application/octet-stream",
                                ttl: ttl, tags: tags)
                case "upsert":
                    guard let json = payload["descriptor"], let descriptor = try? Descriptor(json: json),
                          let response = payload["response"]?.stringValue else { return nil }
                    let metadata = payload["metadata"].flatMap { $0 == .null ? nil : $0 }
                    self = .upsert(descriptor, ModelAnswer(response: response, metadata: metadata), ttl: ttl,
                                   tags: tags, staleWhileRevalidate: payload["stale_while_revalidate"]?.integerValue)
                default: return nil
                }
            }
        }

        var id: Int64 = 0
        let namespace: String
        let key: String
        let write: Write
        let baseETag: String?
        let writtenAt: Double
        var size: Int {
            switch write {
            case .put(let body, _, _, _): body.count + key.utf8.count
            case .upsert(_, let answer, _, _, _): answer.response.utf8.count + key.utf8.count
            }
        }
    }

    static let outboxMax = 1000
    static let outboxMaxBytes = 16 * 1024 * 1024

    /// Keeps a write for later; false when it cannot be (the outbox full, or a namespace not
    /// known to be keepable: an encrypted one's plaintext would wait in the file).
    func queue(_ namespace: String, _ key: String, _ write: Queued.Write, copy: LocalCopy) -> Bool {
        state.withLock { state in
            follow(namespace, in: &state)
            guard !state.stopped, state.feeds[namespace]?.allowed == true else { return false }
            let earlier = state.outbox.firstIndex { $0.namespace == namespace && $0.key == key }
            let base = earlier.map { state.outbox[$0].baseETag }
                ?? state.copies.get(.init(namespace: namespace, key: key))?.etag
            var item = Queued(namespace: namespace, key: key, write: write, baseETag: base,
                              writtenAt: Date().timeIntervalSince1970)
            let others = state.outbox.enumerated().filter { $0.offset != earlier }.map(\.element)
            guard others.count < Self.outboxMax,
                  others.reduce(item.size, { $0 + $1.size }) <= Self.outboxMaxBytes else { return false }
            // The new row and the earlier one's removal in one transaction (`LocalCopies.queue`).
            let replaced = earlier.map { state.outbox[$0].id }
            item.id = state.copies.queue(item, replacing: replaced)
            if let earlier { state.outbox.remove(at: earlier) }
            state.outbox.append(item)
            // Read back by this client while offline (never as the service's own version).
            state.copies.put(.init(namespace: namespace, key: key), copy)
            return true
        }
    }

    public var outboxCount: Int { state.withLock { $0.outbox.count } }
    public var conflicts: [OutboxConflict] { state.withLock { $0.conflicts } }

    /// Sends what waits, oldest first, until the service fails to answer (then next round).
    /// One round at a time: another caller's round running, the background's returns at once,
    /// and `flush`'s (`waitForRunning`) waits for it and then sends what is left, so what waited
    /// when it was called has been tried when it returns.
    func sendOutbox(waitForRunning: Bool = false) async {
        while !sending.withLock({ busy -> Bool in
            if busy { return false }
            busy = true
            return true
        }) {
            guard waitForRunning, !Task.isCancelled, !state.withLock({ $0.stopped }) else { return }
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        defer { sending.withLock { $0 = false } }
        while let (item, client) = state.withLock({ state in
            state.outbox.first.flatMap { item in state.client.map { (item, $0) } }
        }) {
            let copy: LocalCopy?
            do {
                copy = try await Self.send(item, client) { outcome in self.conflict(item, outcome) }
            } catch let error as TeamCacheClientError {
                if case .problem(let status, _, _) = error, ![401, 403, 408, 425, 429].contains(status), status < 500 {
                    conflict(item, "refused (\(status))")
                    copy = nil
                } else {
                    return  // unreachable, overloaded or refusing the token: next round
                }
            } catch {
                return
            }
            state.withLock { state in
                if state.outbox.first?.writtenAt == item.writtenAt && state.outbox.first?.key == item.key
                    && state.outbox.first?.id == item.id {
                    state.outbox.removeFirst()
                }
                state.copies.unqueue(item.id)
                if copy == nil { state.copies.drop(.init(namespace: item.namespace, key: item.key)) }
            }
            if let copy { wrote(item.namespace, item.key, copy) }
        }
    }

    private func conflict(_ item: Queued, _ outcome: String) {
        state.withLock { state in
            state.conflicts.append(OutboxConflict(namespace: item.namespace, key: item.key, outcome: outcome,
                                                  writtenAt: item.writtenAt))
            if state.conflicts.count > 1000 { state.conflicts.removeFirst() }
        }
    }

    private static func send(_ item: Queued, _ client: TeamCacheClient,
                             conflict: (String) -> Void) async throws -> LocalCopy? {
        switch item.write {
        case .put(let body, let contentType, let ttl, let tags):
            let result: WriteResult
            do {
                result = try await client.remotePut(namespace: item.namespace, key: item.key, body: body,
                                                    contentType: contentType, ttl: ttl, tags: tags,
                                                    condition: item.baseETag.map { ("If-Match", $0) } ?? ("If-None-Match", "*"))
            } catch TeamCacheClientError.problem(status: 412, _, _) {
                guard try await theirsIsEarlier(item, client) else {
                    conflict("superseded")
                    return nil
                }
                conflict("overwrote")
                result = try await client.remotePut(namespace: item.namespace, key: item.key, body: body,
                                                    contentType: contentType, ttl: ttl, tags: tags)
            }
            return result.expiresAt.flatMap(TeamCacheClient.instant).map {
                LocalCopy(kind: .raw, etag: result.etag, body: body, contentType: contentType, expiresAt: $0,
                          updatedAt: Date().timeIntervalSince1970)
            }
        case .upsert(let descriptor, let answer, let ttl, let tags, let window):
            let current = try await client.fetchLookup(namespace: item.namespace, descriptor, maxStale: Int(Int32.max),
                                                       refresh: false, lease: nil, wait: nil)
            if case .hit(_, _, let age, _) = current.result, current.etag != item.baseETag {
                if Date().timeIntervalSince1970 - Double(age) > item.writtenAt {
                    conflict("superseded")
                    return nil
                }
                conflict("overwrote")
            }
            let result = try await client.remoteUpsert(namespace: item.namespace, descriptor, answer: answer, ttl: ttl,
                                                       tags: tags, lease: nil, staleWhileRevalidate: window)
            return result.expiresAt.flatMap(TeamCacheClient.instant).map {
                LocalCopy(kind: .lookup, etag: result.etag, body: Data(answer.response.utf8), contentType: "text/plain",
                          metadata: answer.metadata?.serialized, expiresAt: $0, updatedAt: Date().timeIntervalSince1970,
                          staleWhileRevalidate: window ?? 0)
            }
        }
    }

    /// Whether the key's current version was written before `item` (by its Last-Modified).
    private static func theirsIsEarlier(_ item: Queued, _ client: TeamCacheClient) async throws -> Bool {
        guard case .entry(let entry) = try await client.fetchEntry(namespace: item.namespace, key: item.key,
                                                                   maxStale: Int(Int32.max)) else { return true }
        return Date().timeIntervalSince1970 - Double(entry.age) <= item.writtenAt
    }
}
