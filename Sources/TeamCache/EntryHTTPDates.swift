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

    /// The entry with its dates formatted, to be kept: every hit on it sends both.
    func withHTTPDates() -> StoredEntry {
        var kept = self
        kept.httpDates = (lastModifiedHeader, expiresHeader)
        return kept
    }
}
