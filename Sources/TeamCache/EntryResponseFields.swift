import CacheCore
import HTTPServer

/// An entry's own answer fields: rendered once for a near-cache copy (`responseFields`,
/// at admit), else written field by field when answered.
extension StoredEntry {
    /// The entry with its own fields rendered, to be kept: every hit on it sends them.
    func withResponseFields() -> StoredEntry {
        var kept = self
        var fields = HTTPHeaders(capacity: 5)
        addOwnFields(to: &fields)
        kept.responseFields = fields.wireForm
        return kept
    }

    /// The fields an answer from this entry carries whatever the request: its type, ETag and
    /// dates, and that it varies by `Accept-Encoding`.
    func addOwnFields(to headers: inout HTTPHeaders) {
        headers.add("Content-Type", contentType)
        headers.add("ETag", etag)
        headers.add("Last-Modified", HTTPDate.format(unixSeconds: Int(updatedAt.timeIntervalSince1970)))
        headers.add("Expires", HTTPDate.format(unixSeconds: Int(expiresAt.timeIntervalSince1970)))
        headers.add("Vary", "Accept-Encoding")
    }
}
