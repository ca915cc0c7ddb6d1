import Foundation
import Locking

/// Credentials the precheck could not verify on the loop (a token not seen yet): verified on
/// a worker before a large body is read, while a small body is charged to the client's
/// unverified share (see `accountBodyBytes`).
extension Connection {
    /// What to do with a request's body, decided on its head.
    enum BodyVerdict {
        /// Refused before a byte of it is read.
        case refuse(HTTPResponse)
        /// Read it (`unverified`: its credentials are not verified yet; a small body).
        case read(unverified: Bool)
        /// A large body whose credentials must be verified first (blocking, on a worker).
        case verifyFirst(@Sendable () throws -> Void)
    }

    func verdict(beforeBody request: HTTPRequest) -> BodyVerdict {
        if let refusal = refusal(beforeBody: request) { return .refuse(refusal) }
        guard let verify = pendingVerification else { return .read(unverified: false) }
        pendingVerification = nil
        let declared = request.headers["Content-Length"].flatMap(Int.init) ?? Int.max
        return declared > loop.context.configuration.unverifiedBodyLimit ? .verifyFirst(verify) : .read(unverified: true)
    }


    /// Verifies on a worker what the precheck could not (a token not seen yet), before a
    /// large body is read: a client with made-up credentials cannot hold body budget for
    /// longer than a lookup takes, nor make the server receive its body at all.
    func startVerifying(_ request: HTTPRequest, _ verify: @escaping @Sendable () throws -> Void,
                                continueExpected: Bool) {
        verifying = true
        // Its body is read only once verified: it is not charged to the unverified share.
        bodyUnverified = false
        let loop = self.loop, this = LoopBound(self, on: loop)
        let accepted = loop.context.workers.submit {
            let outcome = Result { try verify() }
            loop.execute { this.value.finishVerifying(request, outcome, continueExpected: continueExpected) }
        }
        if !accepted {
            finishVerifying(request, .failure(HTTPError(503, "The server is busy; retry shortly.",
                                                        headers: HTTPHeaders([("Retry-After", "1")]))),
                            continueExpected: continueExpected)
        }
    }

    func finishVerifying(_ request: HTTPRequest, _ outcome: Result<Void, any Error>, continueExpected: Bool) {
        verifying = false
        guard !isClosed else { return }
        switch outcome {
        case .success:
            if continueExpected { enqueue(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) }
        case .failure(let error):
            let refusal = (error as? HTTPError)
                ?? HTTPError(503, "The credentials could not be checked now; retry shortly.",
                             headers: HTTPHeaders([("Retry-After", "1")]))
            refuse(request, with: refusal.response(requestID: request.requestID))
            flush()
            if !isClosed {
                updatePhase()
                updateInterest()
            }
            return
        }
        processBuffered()
        updateInterest()
    }

}
