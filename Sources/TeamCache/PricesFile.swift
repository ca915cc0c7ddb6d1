import CacheCore
import CacheKeys
import Foundation

/// `TEAMCACHE_PRICES_FILE`: `{"currency": "USD", "prices": [{"model": "gpt-4o-mini*",
/// "input": 0.15, "output": 0.6}, …]}`, prices per million tokens (`PriceTable`). TeamCache
/// ships only an example (`deploy/prices.example.json`): prices are someone else's facts,
/// and they change.
enum PricesFile {
    typealias Problem = ConfigurationFile.Problem

    static func load(path: String) throws -> (PriceTable, currency: String) {
        let members = try ConfigurationFile.object(at: path, expected: "a JSON object with \"prices\"")
        if let unknown = members.first(where: { !["currency", "prices"].contains($0.0) }) {
            throw Problem(description: "has an unknown member \"\(unknown.0)\" (known: currency, prices)")
        }
        let object = JSONValue.object(members)
        let currency = object["currency"]?.stringValue ?? "USD"
        guard (1...8).contains(currency.utf8.count), currency.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) else {
            throw Problem(description: "\"currency\" must be a code such as USD or EUR")
        }
        do {
            return (try PriceTable.parse(object["prices"] ?? .null), currency)
        } catch let invalid as PriceTable.Invalid {
            throw Problem(description: invalid.message)
        }
    }
}
