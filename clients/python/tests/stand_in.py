"""Something at the cache's URL that is not a healthy TeamCache: a small HTTP server whose
answer to each request a test decides (``answer(method, path) -> (status, headers, body)``),
after an optional delay, to put a client against a cache that is wrong or sick in one way."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable

Answer = tuple[int, dict[str, str], bytes]


class StandIn:
    def __init__(self, answer: Callable[[str, str], Answer], delay: Callable[[str, str], float] = lambda *_: 0.0):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay(self.command, self.path))
                status, headers, body = answer(self.command, self.path)
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 - http.server's names

            def log_message(self, *_args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A client that gave up on a slow answer closed its end: not an error of the test's.
        self.server.handle_error = lambda *_: None  # type: ignore[method-assign]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
