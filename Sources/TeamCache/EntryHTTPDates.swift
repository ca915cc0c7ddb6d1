import CacheCore
import HTTPServer

/// An entry's `Last-Modified` and `Expires` as HTTP dates: kept with a near-cache copy
/// (`StoredEntry.httpDates`, written once at admit), else formatted when answered.
extension StoredEntry {
    var lastModifiedHeader: String {
        httpDates?.lastModified ?? HTTPDate.format(unixSeconds: Int(updatedAt.timeIntervalSince1970))
    }

    var expiresHeader: String {
        httpDates?.expires ?? HTTPDate.format(unixSeconds: Int(expiresAt.timeIntervalSince1970))
    }

    /// The entry with its dates formatted and its own fields rendered, to be kept: every hit
    /// on it sends them.
    func withHTTPDates() -> StoredEntry {
        var kept = self
        kept.httpDates = (lastModifiedHeader, expiresHeader)
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
        headers.add("Last-Modified", lastModifiedHeader)
        headers.add("Expires", expiresHeader)
        headers.add("Vary", "Accept-Encoding")
    }
}
