import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer

/// `POST /v1/caches/{ns}/lookup` and `/upsert`: LLM / AI answers keyed by their descriptor.
extension CacheAPI {
    static let descriptorMembers: Set<String> = ["prompt", "messages", "model", "schema", "params", "version"]
    static let lookupMembers = descriptorMembers.union(["max_stale", "refresh", "lease", "wait", "if_none_match"])
    static let upsertMembers = descriptorMembers.union(["response", "metadata", "ttl", "tags", "lease",
                                                        "stale_while_revalidate"])

    /// A descriptor lookup: parsed here; answered once the entry is read (`hitStep`, else a miss).
    func planLookup(_ request: HTTPRequest, _ context: RequestContext) throws -> ReadPlan {
        let namespace = try context.namespace
        let json = try RequestParsing.jsonObject(request)
        try RequestParsing.rejectUnknownMembers(json, allowed: Self.lookupMembers)
        let descriptor = try Self.descriptor(json)
        let maxStale = try Self.optionalInteger(json["max_stale"], name: "max_stale", 0...Int.max)
        guard json["refresh"] == nil || json["refresh"]?.boolValue != nil else {
            throw HTTPError(422, "`refresh` must be a boolean.")
        }
        let asked = try Self.optionalInteger(json["lease"], name: "lease", 1...Lease.maxSeconds)
        let wait = try Self.waitMember(json["wait"])
        // A local copy's ETag: a hit on that very version answers without the response (the
        // caller has it), as a raw GET's `If-None-Match` answers 304.
        let knownETag = try Self.optionalString(json["if_none_match"], name: "if_none_match")
        let key = descriptor.key
        if json["refresh"]?.boolValue == true {
            // A refresh neither takes nor honours a lease: it is the caller's own regeneration.
            tracker.record(.bypass, namespace: namespace.name, at: clock.now())
            return .answer(Self.lookupMiss(key))
        }
        guard let entryKey = EntryKey(Array(key.utf8)) else { throw HTTPError(500, "A derived key was out of range.") }
        let model = descriptor.model
        let holder = context.holder
        let labelled = context.principal.mayWrite(namespace)
        // A lease is the right to fill (see `planGet`): not for a token that cannot write.
        let leaseSeconds = labelled ? asked : nil
        let budget = wait.flatMap { $0 > 0 ? WaitBudget(seconds: $0) : nil }
        let answers = Self.lookupMissAnswers(key: key)
        return .read(namespace, entryKey, standby: leaseSeconds == nil && budget == nil) { [self] entry, mayPark in
            let now = clock.now()
            // The model must match exactly: a defence against collisions and mix-ups.
            let question = HitQuestion(namespace: namespace, key: entryKey, maxStale: maxStale, mayRefresh: labelled,
                                       leaseSeconds: leaseSeconds, holder: holder, collapsed: budget?.waited == true)
            if let answer = try hitStep(entry.flatMap { $0.model == model ? $0 : nil }, question, now: now,
                                        render: { [self] entry, freshness, collapsed, lease in
                                            try lookupHit(entry, key: key, freshness: freshness, collapsed: collapsed,
                                                          now: now, revalidate: lease,
                                                          notModified: knownETag == entry.etag)
                                        }) {
                return answer
            }
            return missStep(namespace, entryKey, lease: leaseSeconds, holder: holder, budget: budget,
                            mayPark: mayPark, request: request, answers: answers, labelled: labelled,
                            filledBy: .model(model))
        }
    }

    /// `wait` of a lookup: a JSON number of seconds, 0 to 60.
    static func waitMember(_ value: JSONValue?) throws -> TimeInterval? {
        guard let value, value != .null else { return nil }
        guard case .number(let text) = value else { throw HTTPError(422, "`wait` must be a number of seconds from 0 to 60.") }
        return try waitSeconds(text, status: 422)
    }

    static func lookupMiss(_ key: String) -> HTTPResponse {
        .json(200, JSONValue.object([("hit", .bool(false)), ("key", .string(key))]).serialized)
    }

    /// A lookup's hit (or stale) answer; `revalidate`: a refresh lease granted with a
    /// stale-while-revalidate answer; `notModified`: the caller holds this version already
    /// (`if_none_match`), so the response and metadata are left out.
    /// `etag`, `ttl` (seconds of freshness left, negative when stale, as `Cache-Status`) and
    /// `stale_while_revalidate` let a client keep the answer in a local tier, relative to its
    /// own clock.
    private func lookupHit(_ entry: StoredEntry, key: String, freshness: Freshness, collapsed: Bool, now: Date,
                           revalidate: Lease?, notModified: Bool) throws -> HTTPResponse {
        let (stale, ttl): (Bool, Int) = switch freshness {
        case .stale(let by), .revalidate(let by): (true, -by)
        case .fresh(let ttl): (false, ttl)
        case .expired: (false, 0)
        }
        var body: [(String, JSONValue)] = [("hit", .bool(true)), ("key", .string(key))]
        if notModified {
            body.append(("not_modified", .bool(true)))
        } else {
            let text = String(decoding: try identityBody(entry), as: UTF8.self)
            body += [("response", .string(text)), ("metadata", try entry.metadata.map { try JSONParser.parse($0) } ?? .null)]
        }
        body += [("age", .int(max(0, Freshness.wholeSeconds(now.timeIntervalSince(entry.updatedAt), up: false)))),
                 ("stale", .bool(stale)), ("etag", .string(entry.etag)), ("ttl", .int(ttl))]
        if entry.staleWhileRevalidate > 0 { body.append(("stale_while_revalidate", .int(entry.staleWhileRevalidate))) }
        let answer = JSONValue.object(body + (collapsed ? [("collapsed", .bool(true))] : [])
          + (revalidate.map { lease in
              [("revalidate", .object([("lease", .string(lease.id)), ("expires_in", .int(lease.expiresIn))]))]
          } ?? []))
        return .json(200, answer.serialized)
    }

    /// Answered once the write is committed, without holding a worker meanwhile (see `commit`).
    func upsert(_ request: HTTPRequest, _ context: RequestContext,
                _ answer: @escaping Responder.Answer) throws -> HTTPResponse? {
        let namespace = try context.namespace
        let json = try RequestParsing.jsonObject(request)
        try RequestParsing.rejectUnknownMembers(json, allowed: Self.upsertMembers)
        let descriptor = try Self.descriptor(json)
        guard let text = json["response"]?.stringValue, !text.isEmpty else {
            throw HTTPError(422, "`response` must be a non-empty string: an empty answer is never cached.")
        }
        guard text.utf8.count <= policy.maxBodyBytes else {
            throw HTTPError(413, "`response` is larger than \(policy.maxBodyBytes) bytes; nothing was stored.")
        }
        if descriptor.schema != nil && (try? JSONParser.parse(text)) == nil {
            throw HTTPError(422, "With a `schema`, `response` must be valid JSON: a broken answer is never cached.")
        }
        let contentType = descriptor.schema != nil ? "application/json" : "text/plain; charset=utf-8"
        let body = StoredBody.fromIdentity(Array(text.utf8), contentType: contentType, policy: policy)
        var write = EntryWrite(namespace: namespace, key: EntryKey(Array(descriptor.key.utf8))!, body: body,
                               contentType: contentType)
        write.model = descriptor.model
        write.version = descriptor.version
        write.promptDigest = descriptor.promptDigest
        write.ttlSeconds = try Self.optionalInteger(json["ttl"], name: "ttl", 1...policy.maxTTL)
        write.staleWhileRevalidate = try Self.optionalInteger(json["stale_while_revalidate"],
                                                              name: "stale_while_revalidate", 0...Self.maxWindow(policy)) ?? 0
        write.tags = try Self.tags(json["tags"])
        try Self.applyMetadata(json["metadata"], to: &write)
        write.writerTokenID = context.holder
        let lease = try Self.leaseID(try Self.optionalString(json["lease"], name: "lease"), "lease")
        commit(write, location: nil, lease: lease, request: request, offLoop: context.offLoop, answer: answer)
        return nil
    }

    static func optionalString(_ value: JSONValue?, name: String) throws -> String? {
        guard let value, value != .null else { return nil }
        guard let text = value.stringValue else { throw HTTPError(422, "`\(name)` must be a string.") }
        return text
    }

    static func descriptor(_ json: JSONValue) throws -> Descriptor {
        do {
            return try Descriptor(json: json)
        } catch {
            throw HTTPError(422, error.message, title: "Invalid descriptor")
        }
    }

    static func optionalInteger(_ value: JSONValue?, name: String, _ range: ClosedRange<Int>) throws -> Int? {
        guard let value, value != .null else { return nil }
        guard let number = value.integerValue, range.contains(number) else {
            throw HTTPError(422, "`\(name)` must be an integer from \(range.lowerBound) to \(range.upperBound).")
        }
        return number
    }

    private static func tags(_ value: JSONValue?) throws -> [String] {
        guard let value, value != .null else { return [] }
        guard case .array(let items) = value else { throw HTTPError(422, "`tags` must be an array of strings.") }
        let strings = items.compactMap(\.stringValue)
        guard strings.count == items.count else { throw HTTPError(422, "`tags` must be an array of strings.") }
        return try RequestParsing.tags(strings)
    }

    /// `metadata`: an object whose `input_tokens` / `output_tokens` count the tokens a hit saves.
    private static func applyMetadata(_ value: JSONValue?, to write: inout EntryWrite) throws {
        guard let value, value != .null else { return }
        guard case .object = value else { throw HTTPError(422, "`metadata` must be an object.") }
        guard value.isStorable else {
            throw HTTPError(422, "`metadata` cannot hold NUL (U+0000) in strings or numbers beyond double range.")
        }
        write.inputTokens = try optionalInteger(value["input_tokens"], name: "metadata.input_tokens", 0...Int(Int32.max))
            ?? 0
        write.outputTokens = try optionalInteger(value["output_tokens"], name: "metadata.output_tokens",
                                                 0...Int(Int32.max)) ?? 0
        if let reason = value["finish_reason"], reason != .null, reason.stringValue == nil {
            throw HTTPError(422, "`metadata.finish_reason` must be a string.")
        }
        // The gateway answers a hit with it: see `MediaType`.
        if let type = value["content_type"], type != .null, !(type.stringValue.map(MediaType.isStorable) ?? false) {
            throw HTTPError(422, "`metadata.content_type` must be a media type of at most 256 bytes "
                + "without control characters.")
        }
        write.metadata = value.serialized
    }
}
