import CacheKeys
import Foundation

/// What tokens cost, so hits can be counted in money: model names or `*` globs with a price
/// per million input and output tokens. The server's comes from `TEAMCACHE_PRICES_FILE`; a
/// namespace may have its own (the settings route), looked at first. TeamCache ships no
/// prices: a price is a fact about someone else's bill, and it changes.
public struct PriceTable: Sendable, Equatable {
    public struct Price: Sendable, Equatable {
        /// A model name as entries carry it (`model`), or a glob (`gpt-4o-mini*`).
        public var model: String
        /// Per million tokens, in the table's currency.
        public var input: Double
        public var output: Double

        public init(model: String, input: Double, output: Double) {
            self.model = model
            self.input = input
            self.output = output
        }
    }

    /// Most prices in one table, the longest model pattern and the most `*` in one: a price is
    /// looked for once per (namespace, model), by a scan of the globs, and that scan is bounded.
    public static let maxPrices = 200
    public static let maxModelBytes = 200
    public static let maxStars = 4
    /// The most tokens of one kind a hit is priced for, and the most one hit may save
    /// (1,000 units of the currency): an entry's token counts are its writer's word, and a
    /// sum of absurd ones must not wrap.
    public static let maxPricedTokens = 1 << 32
    public static let maxNanosPerHit = 1_000_000_000_000
    /// The largest price per million tokens taken (far above any model's; keeps sums in range).
    public static let maxPrice = 1_000_000.0

    public var prices: [Price]

    public init(_ prices: [Price] = []) { self.prices = prices }

    public var isEmpty: Bool { prices.isEmpty }

    /// The price of `model`: its exact name if listed, else the first glob (in the table's
    /// order) that matches it.
    public func price(for model: String) -> Price? {
        prices.first { $0.model == model } ?? prices.first { $0.model.contains("*") && Glob.matches($0.model, model) }
    }

    /// What `input` and `output` tokens cost at `price`, in billionths of the currency
    /// (rounded; a price per million tokens is a thousand billionths per token per unit).
    public static func nanos(_ price: Price, input: Int, output: Int) -> Int {
        let input = Double(min(max(input, 0), maxPricedTokens)), output = Double(min(max(output, 0), maxPricedTokens))
        let value = (input * price.input + output * price.output) * 1000
        return Int(min(value, Double(maxNanosPerHit)).rounded())
    }

    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// `[{"model": "gpt-4o-mini*", "input": 0.15, "output": 0.6}, …]`: unknown members, a
    /// model named twice, a negative or non-finite price are refused (a typo must not price
    /// every hit at zero unnoticed).
    public static func parse(_ json: JSONValue) throws -> PriceTable {
        guard case .array(let items) = json else { throw Invalid(message: "prices must be an array.") }
        guard items.count <= maxPrices else { throw Invalid(message: "at most \(maxPrices) prices.") }
        var prices: [Price] = []
        var seen = Set<String>()
        for (index, item) in items.enumerated() {
            guard case .object(let members) = item else { throw Invalid(message: "prices[\(index)] must be an object.") }
            if let unknown = members.first(where: { !["model", "input", "output"].contains($0.0) }) {
                throw Invalid(message: "prices[\(index)] has an unknown member \"\(unknown.0)\".")
            }
            guard let model = item["model"]?.stringValue, !model.isEmpty, model.utf8.count <= maxModelBytes,
                  !model.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }),
                  model.utf8.filter({ $0 == UInt8(ascii: "*") }).count <= maxStars else {
                throw Invalid(message: "prices[\(index)].model must be a model name or glob of 1 to \(maxModelBytes) "
                              + "bytes with at most \(maxStars) `*`.")
            }
            guard seen.insert(model).inserted else { throw Invalid(message: "prices[\(index)]: \(model) is listed twice.") }
            prices.append(Price(model: model, input: try amount(item["input"], "prices[\(index)].input"),
                                output: try amount(item["output"], "prices[\(index)].output")))
        }
        return PriceTable(prices)
    }

    private static func amount(_ value: JSONValue?, _ name: String) throws -> Double {
        guard case .number(let text) = value, let amount = Double(text), amount.isFinite,
              (0...maxPrice).contains(amount) else {
            throw Invalid(message: "\(name) must be a price per million tokens from 0 to \(Int(maxPrice)).")
        }
        return amount
    }

    public var json: JSONValue {
        .array(prices.map { .object([("model", .string($0.model)), ("input", .double($0.input)),
                                     ("output", .double($0.output))]) })
    }
}

/// The prices in force: the server's table and each namespace's own, with what each model
/// resolved to remembered (a hit prices its model with one dictionary lookup, not a scan of
/// globs). The access tracker keeps it under a lock of its own, not the counts' lock.
public struct PriceBook: Sendable {
    public var server: PriceTable
    public private(set) var namespaces: [String: PriceTable] = [:]
    /// (namespace, model) → price; emptied whenever a table changes, and when it grows past
    /// `memoLimit` (model names come from entries: a bound, not a trust).
    private var memo: [String: [String: PriceTable.Price?]] = [:]
    private var memoCount = 0
    static let memoLimit = 10_000

    public init(server: PriceTable = PriceTable()) { self.server = server }

    /// No price anywhere: every hit saves 0 (checked before the book is locked).
    public var isEmpty: Bool { server.isEmpty && namespaces.isEmpty }

    /// Replaces every namespace's own table (from the periodic refresh, or one change).
    public mutating func setNamespaces(_ tables: [String: PriceTable]) {
        guard tables != namespaces else { return }
        namespaces = tables
        memo = [:]
        memoCount = 0
    }

    public mutating func setNamespace(_ namespace: String, _ table: PriceTable?) {
        var tables = namespaces
        tables[namespace] = table.flatMap { $0.isEmpty ? nil : $0 }
        setNamespaces(tables)
    }

    /// What a hit on an entry of `model` with these tokens saved, in billionths; 0 without a price.
    public mutating func nanos(namespace: String, model: String?, input: Int, output: Int) -> Int {
        guard let model, input > 0 || output > 0, !isEmpty else { return 0 }
        if let known = memo[namespace]?[model] { return known.map { PriceTable.nanos($0, input: input, output: output) } ?? 0 }
        let price = namespaces[namespace]?.price(for: model) ?? server.price(for: model)
        if memoCount >= Self.memoLimit {
            memo = [:]
            memoCount = 0
        }
        memo[namespace, default: [:]][model] = .some(price)
        memoCount += 1
        return price.map { PriceTable.nanos($0, input: input, output: output) } ?? 0
    }
}
