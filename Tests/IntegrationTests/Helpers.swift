import CacheCore
import Foundation
import TestSupport

/// Parses a JSON response body into a dictionary.
func object(_ response: RawClient.Response) throws -> [String: Any] {
    guard let value = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] else {
        throw CocoaError(.propertyListReadCorrupt)
    }
    return value
}

func randomBytes(_ count: Int) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { raw in
        var offset = 0
        while offset + 8 <= raw.count {
            raw.storeBytes(of: UInt64.random(in: 0...UInt64.max), toByteOffset: offset, as: UInt64.self)
            offset += 8
        }
    }
    return bytes
}

/// A token with every scope on `namespace`, from the shared service.
func writer(_ namespace: String) throws -> String {
    try TestService.shared.token([.read, .write], namespaces: namespace)
}

func entryPath(_ namespace: String, _ key: String) -> String {
    "/v1/caches/\(namespace)/entries/\(key)"
}

func gunzip(_ bytes: [UInt8]) throws -> [UInt8] {
    try Gzip.decompress(bytes, limit: 64 * 1024 * 1024)
}

/// The value of an unlabelled sample in Prometheus text; -1 when it is absent.
func metricSample(_ text: String, _ name: String) -> Double {
    for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
        return Double(line.split(separator: " ")[1]) ?? -1
    }
    return -1
}

/// `text` as a JSON string literal (an ETag carries quotes).
func jsonString(_ text: String) -> String {
    String(decoding: try! JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast().description
}
