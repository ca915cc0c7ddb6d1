import Foundation
import HTTPServer
import Observability
import Postgres

/// `/healthz`, `/readyz`, `/metrics`, `/openapi.yaml`.
struct OperationalRoutes: Sendable {
    let readiness: ReadinessProbe
    let metrics: MetricsRegistry
    let openAPI: [UInt8]
    var dashboard = Dashboard(files: [:])

    /// Built once: the liveness answer is the same every time.
    static let healthy = HTTPResponse.json(200, "{\"status\":\"ok\"}")
    static let readyCurrent = HTTPResponse.json(200, "{\"status\":\"ready\",\"schema\":\"current\"}")

    /// The process is alive and its event loops answer.
    func health(_ request: HTTPRequest) -> HTTPResponse {
        Self.healthy
    }

    /// The database answered within the last second and its migrations are current; 503
    /// otherwise. From the probe's state: answering costs the database nothing.
    func ready(_ request: HTTPRequest) -> HTTPResponse {
        switch readiness.state {
        case .ready(let aheadBy) where aheadBy.isEmpty:
            return Self.readyCurrent
        case .ready(let aheadBy):
            let versions = aheadBy.map(String.init).joined(separator: ",")
            return .json(200, "{\"status\":\"ready\",\"schema\":\"ahead\",\"ahead_by\":[\(versions)]}")
        case .schema(let problem):
            return HTTPError(503, problem).response(requestID: request.requestID)
        case .unreachable:
            return Self.retryShortly("The database did not answer within the last second.", request)
        case .standby:
            return Self.retryShortly("The database reached is a read-only standby; waiting for a primary.", request)
        }
    }

    private static func retryShortly(_ detail: String, _ request: HTTPRequest) -> HTTPResponse {
        var response = HTTPError(503, detail).response(requestID: request.requestID)
        response.headers.add("Retry-After", "1")
        return response
    }

    func prometheus(_ request: HTTPRequest) -> HTTPResponse {
        .text(200, metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    func specification(_ request: HTTPRequest) -> HTTPResponse {
        HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", "application/yaml")]), body: openAPI)
    }
}
