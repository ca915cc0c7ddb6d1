import CacheCore
import CacheStore
import HTTPServer
import Postgres

/// Reading one's own writes through a standby (`TEAMCACHE_READ_DATABASE_URL`): every write
/// answers `TeamCache-Position`, the primary's WAL position after its commit, and a read
/// that sends it back as `TeamCache-Min-Position` is served only by a database that has
/// replayed that far (the standby when it has, else the primary). Without a standby the
/// headers are neither sent nor needed: every read is from the primary.
extension CacheAPI {
    static let positionHeader = "TeamCache-Position"
    static let minPositionHeader = "TeamCache-Min-Position"

    /// Adds the position to a write's 2xx; one that could not be learned is counted.
    func stamp(_ response: inout HTTPResponse, _ position: String?) {
        guard store.tracksPositions, (200..<300).contains(response.status) else { return }
        guard let position else {
            positionsMissing?.inc()
            return
        }
        response.headers.add(Self.positionHeader, position)
    }

    /// For writes that commit on a worker (DELETE, evict): the position now, which is past
    /// their commit. A failure to read it leaves the header out rather than fail the write.
    func stampAfterCommit(_ response: inout HTTPResponse) {
        guard store.tracksPositions else { return }
        stamp(&response, try? store.commitPosition())
    }

    /// The request's `TeamCache-Min-Position`: nil when absent; 400 when it is not a
    /// position as PostgreSQL writes it.
    static func minPosition(_ request: HTTPRequest) throws -> WALPosition? {
        guard let text = request.headers[minPositionHeader] else { return nil }
        guard let position = WALPosition(text.trimmingCharacters(in: .whitespaces)) else {
            throw HTTPError(400, "\(minPositionHeader) must be a WAL position as TeamCache-Position gives it (e.g. 16/B374D848).")
        }
        return position
    }
}
