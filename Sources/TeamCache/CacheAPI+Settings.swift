import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// `GET | PUT /v1/caches/{ns}/settings` (admin): the namespace's default TTL and byte quota.
extension CacheAPI {
    func getSettings(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        return try guarded(request) {
            .json(200, Self.json(namespace, try store.settings(namespace)).serialized)
        }
    }

    func putSettings(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let json = try RequestParsing.jsonObject(request)
        try RequestParsing.rejectUnknownMembers(json, allowed: ["default_ttl", "max_bytes"])
        let settings = NamespaceSettings(
            defaultTTL: try Self.optionalInteger(json["default_ttl"], name: "default_ttl", 1...policy.maxTTL),
            maxBytes: try Self.optionalInteger(json["max_bytes"], name: "max_bytes", 1...Int.max))
        return try guarded(request) {
            try store.setSettings(namespace, settings)
            tracker.admitNamespace(namespace.name)
            return .json(200, Self.json(namespace, settings).serialized)
        }
    }

    static func json(_ namespace: Namespace, _ settings: NamespaceSettings) -> JSONValue {
        .object([("namespace", .string(namespace.name)),
                 ("default_ttl", settings.defaultTTL.map(JSONValue.int) ?? .null),
                 ("max_bytes", settings.maxBytes.map(JSONValue.int) ?? .null)])
    }
}
