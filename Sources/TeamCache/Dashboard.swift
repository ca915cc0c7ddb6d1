import Foundation
import HTTPServer

/// The dashboard at `/ui/`: the static files of `ui/` (shipped beside the binary, like
/// `openapi.yaml`), read once at start and served from memory. No build step, no CDN: the
/// page's script and style are files of their own, so the policy below allows nothing
/// inline and nothing from elsewhere. The page reads the API with a token a person pastes.
struct Dashboard: Sendable {
    struct File: Sendable {
        let contentType: String
        let body: [UInt8]
    }

    /// By name (`index.html`, `app.js`, …): one flat folder, so a request names a file or
    /// nothing; no path is ever joined from request bytes.
    let files: [String: File]

    static let types = ["html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
                        "css": "text/css; charset=utf-8", "svg": "image/svg+xml", "txt": "text/plain; charset=utf-8"]
    /// Files of other kinds, and larger ones, are not served (a stray file is not published).
    static let maxFileBytes = 1 << 20

    /// The exact policy the contract names. `default-src 'self'` covers scripts, styles,
    /// images and `connect-src` (the API on the same origin); inline script and style, `eval`
    /// and every other origin are refused by the browser.
    static let securityHeaders = [
        ("Content-Security-Policy", "default-src 'self'"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cache-Control", "no-cache"),
    ]

    /// The files of `folder` (nil or unreadable: none; `/ui/` then says it is not installed).
    static func load(_ folder: URL?) -> Dashboard {
        guard let folder, let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path) else {
            return Dashboard(files: [:])
        }
        var files: [String: File] = [:]
        for name in names {
            guard let type = types[(name as NSString).pathExtension], !name.hasPrefix("."),
                  let body = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path),
                  body.count <= maxFileBytes else { continue }
            files[name] = File(contentType: type, body: Array(body))
        }
        return Dashboard(files: files)
    }

    func routes() -> [Route] {
        [
            Route("GET", "/ui", .inline) { _ in
                HTTPResponse(status: 308, headers: HTTPHeaders([("Location", "/ui/")]), body: [])
            },
            Route("GET", "/ui/", .inline) { request in serve("index.html", request) },
            Route("GET", "/ui/{file}", .inline) { request in serve(String(decoding: request.pathParameters["file"] ?? [], as: UTF8.self), request) },
        ]
    }

    func serve(_ name: String, _ request: HTTPRequest) -> HTTPResponse {
        guard let file = files[name] else {
            let detail = files.isEmpty ? "The dashboard is not installed beside this binary (ui/)." : "No such file."
            return HTTPError(404, detail).response(requestID: request.requestID)
        }
        return HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", file.contentType)] + Self.securityHeaders),
                            body: file.body)
    }
}
