import Foundation
import HTTPServer
import Observability
import Postgres

/// `/healthz`, `/readyz`, `/metrics`, `/openapi.yaml`.
struct OperationalRoutes: Sendable {
    let pool: ConnectionPool
    let migrations: MigrationRunner
    let metrics: MetricsRegistry
    let openAPI: [UInt8]

    /// Built once: the liveness answer is the same every time.
    static let healthy = HTTPResponse.json(200, "{\"status\":\"ok\"}")

    /// The process is alive and its event loops answer.
    func health(_ request: HTTPRequest) -> HTTPResponse {
        Self.healthy
    }

    /// The database answers and its migrations are current; 503 otherwise.
    func ready(_ request: HTTPRequest) -> HTTPResponse {
        do {
            try pool.withConnection { try migrations.requireCurrent(on: $0) }
            return .json(200, "{\"status\":\"ready\"}")
        } catch let error as MigrationError {
            return HTTPError(503, error.description).response(requestID: request.requestID)
        } catch {
            var response = HTTPError(503, "The database is unreachable.").response(requestID: request.requestID)
            response.headers.add("Retry-After", "1")
            return response
        }
    }

    func prometheus(_ request: HTTPRequest) -> HTTPResponse {
        .text(200, metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    func specification(_ request: HTTPRequest) -> HTTPResponse {
        HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", "application/yaml")]), body: openAPI)
    }
}
