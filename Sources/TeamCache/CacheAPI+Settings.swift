import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// `GET | PUT /v1/caches/{ns}/settings` (admin): the namespace's default TTL, byte quota
/// and prices of its own.
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
        try RequestParsing.rejectUnknownMembers(json, allowed: ["default_ttl", "max_bytes", "prices"])
        let settings = NamespaceSettings(
            defaultTTL: try Self.optionalInteger(json["default_ttl"], name: "default_ttl", 1...policy.maxTTL),
            maxBytes: try Self.optionalInteger(json["max_bytes"], name: "max_bytes", 1...Int.max),
            prices: try Self.prices(json["prices"]))
        return try guarded(request) {
            try store.setSettings(namespace, settings)
            tracker.admitNamespace(namespace.name)
            // In force on this replica at once, on the others at their next namespace refresh.
            tracker.setNamespacePrices(namespace.name, settings.prices)
            return .json(200, Self.json(namespace, settings).serialized)
        }
    }

    static func json(_ namespace: Namespace, _ settings: NamespaceSettings) -> JSONValue {
        .object([("namespace", .string(namespace.name)),
                 ("default_ttl", settings.defaultTTL.map(JSONValue.int) ?? .null),
                 ("max_bytes", settings.maxBytes.map(JSONValue.int) ?? .null),
                 ("prices", settings.prices?.json ?? .null)])
    }

    /// A namespace's own price table; absent or null: none (the server's prices apply).
    static func prices(_ value: JSONValue?) throws -> PriceTable? {
        guard let value, value != .null else { return nil }
        do {
            let table = try PriceTable.parse(value)
            return table.isEmpty ? nil : table
        } catch let invalid as PriceTable.Invalid {
            throw HTTPError(422, invalid.message)
        }
    }
}
