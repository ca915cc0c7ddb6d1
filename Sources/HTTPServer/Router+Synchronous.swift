extension Router {
    /// Routes `request` and runs its handler on the calling thread, as a connection would
    /// (problems become their responses, anything else a 500), without sockets or loops:
    /// how a harness such as the request fuzzer drives parse → route → handler as a whole.
    /// nil for routes that answer through a `Responder` (they need an event loop).
    public func respondSynchronously(to request: HTTPRequest) -> HTTPResponse? {
        switch match(method: request.method, path: request.path) {
        case .found(let route, let parameters):
            request.routeTemplate = route.template
            request.routeID = route.id
            request.pathParameters = parameters
            let handler: HTTPHandler
            switch route.work {
            case .inline(let body), .worker(let body): handler = body
            case .async: return nil
            }
            do {
                return try handler(request)
            } catch let error as HTTPError {
                return error.response(requestID: request.requestID)
            } catch {
                return HTTPError(500, "An unexpected error occurred.").response(requestID: request.requestID)
            }
        case .methodNotAllowed: return HTTPError(405, "Not allowed.").response(requestID: "")
        case .notFound: return HTTPError(404, "No route.").response(requestID: "")
        case .badPath: return HTTPError(400, "Bad path.").response(requestID: "")
        }
    }
}
