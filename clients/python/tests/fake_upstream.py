"""A small OpenAI- and Anthropic-compatible upstream for the tests: ``/v1/chat/completions``,
``/v1/responses``, ``/v1/embeddings``, ``/v1/completions`` and Anthropic's ``/v1/messages``,
streamed and not, recording its calls (path, body, headers). Prompts steer it:
"fail" answers 500, "busy" 429, "slow" takes 300 ms, "drip" streams its events 250 ms apart,
"hold" streams its first event and then waits 5 s before the rest,
"gate" streams its first chunk and then waits for ``gate`` to be set before the rest, "cut"
ends a stream after its first chunk, "broken200" answers a chat 200 with an error document (a
stream: its first chunk, an error event in vLLM's shape, then ``[DONE]``, as that server does),
"accepted202" answers a chat 202, "gzipped" compresses a chat's answer whatever was asked,
"stall" answers after 3 s, "nousage" refuses a request with ``stream_options`` (400) as some
OpenAI-compatible servers do, "badrequest" answers 400.

It also serves the plain HTTP shapes the Swift HTTP client's tests need (``GET /_test/...``),
and runs on its own, plain and over TLS, for those tests and the benches:
``python3 fake_upstream.py [--port N] [--tls-cert F --tls-key F]`` prints ``port N`` and serves
until its standard input closes; ``GET /_test/calls`` answers the calls recorded so far."""

from __future__ import annotations

import gzip
import http.server
import json
import ssl
import sys
import threading
import time
import urllib.parse
from typing import Any

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


class Upstream:
    def __init__(self, port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Head and body are written apart: without TCP_NODELAY the body waits for the
            # client's delayed ACK (~40 ms), which benches would read as the upstream's time.
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                if self.path == "/_test/calls":
                    with owner.lock:
                        data = json.dumps(owner.calls).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                _test_shape(self, owner)

            def do_HEAD(self) -> None:
                _test_shape(self, owner)

            def do_POST(self) -> None:
                if self.path.startswith("/_test/"):
                    return _test_shape(self, owner)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                text = json.dumps(body.get("messages") or body.get("input") or body.get("prompt"))
                with owner.lock:
                    owner.calls.append({"path": self.path, "body": body, "text": text,
                                        "auth": self.headers.get("Authorization"),
                                        "headers": {k.lower(): v for k, v in self.headers.items()}})
                if "nousage" in text and "stream_options" in body:
                    return self._json(400, {"error": {"message": "Unrecognized request argument supplied: "
                                                                 "stream_options", "type": "invalid_request_error"}})
                if "badrequest" in text:
                    return self._json(400, {"error": {"message": "too many messages", "type": "invalid_request_error"}})
                if "broken200" in text and not body.get("stream"):
                    return self._json(200, {"error": {"message": "engine broke", "type": "server_error"}})
                if "accepted202" in text:
                    return self._json(202, {"id": "chatcmpl-2", "object": "chat.completion", "created": 1,
                                            "model": body["model"], "choices": [], "usage": USAGE})
                if "fail" in text:
                    return self._json(500, {"error": {"message": "upstream broke", "type": "server_error"}})
                if "busy" in text:
                    return self._json(429, {"error": {"message": "slow down", "type": "rate_limit"}})
                if "slow" in text:
                    time.sleep(0.3)
                if "stall" in text:
                    time.sleep(3)
                if self.path.endswith("/messages"):
                    return self._anthropic(text, body)
                if self.path.endswith("/completions") and not self.path.endswith("/chat/completions"):
                    return self._json(200, {
                        "id": "cmpl-1", "object": "text_completion", "created": 1, "model": body["model"],
                        "choices": [{"text": "Hello", "index": 0, "finish_reason": "stop", "logprobs": None}],
                        "usage": USAGE})
                if self.path.endswith("/embeddings"):
                    return self._json(200, {"object": "list", "model": body["model"],
                                            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                                            "usage": {"prompt_tokens": 3, "total_tokens": 3}})
                responses = self.path.endswith("/responses")
                if body.get("stream"):
                    return self._stream(responses, text, body)
                if responses:
                    return self._json(200, {
                        "id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
                        "model": body["model"], "output": [{
                            "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": "Hello from responses", "annotations": []}]}],
                        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                        "usage": {"input_tokens": 5, "output_tokens": 4, "total_tokens": 9,
                                  "input_tokens_details": {"cached_tokens": 0},
                                  "output_tokens_details": {"reasoning_tokens": 0}}})
                return self._json(200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "Hello there"}}],
                    "usage": USAGE}, gzipped="gzipped" in text)

            def _anthropic(self, text: str, body: dict) -> None:
                message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                           "content": [{"type": "text", "text": "Hello there"}], "stop_reason": "end_turn",
                           "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 6}}
                if not body.get("stream"):
                    return self._json(200, message)
                start = dict(message, content=[], stop_reason=None, usage={"input_tokens": 12, "output_tokens": 1})
                events = [
                    {"type": "message_start", "message": start},
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}},
                    {"type": "content_block_stop", "index": 0},
                    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                     "usage": {"output_tokens": 6}},
                    {"type": "message_stop"},
                ]
                self._send_events(text, [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events])

            def _json(self, status: int, document: dict, gzipped: bool = False) -> None:
                data = json.dumps(document).encode()
                if gzipped:
                    data = gzip.compress(data)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if gzipped:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("X-Upstream-Account", "org-of-this-caller")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, payload: str) -> None:
                data = payload.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, responses: bool, text: str, body: dict) -> None:
                if responses:
                    events = [
                        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                         "content_index": 0, "delta": "Hel", "sequence_number": 1, "logprobs": []},
                        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                         "content_index": 0, "delta": "lo", "sequence_number": 2, "logprobs": []},
                        {"type": "response.completed", "sequence_number": 3, "response": {
                            "id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
                            "model": body["model"], "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
                            "tools": [], "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
                                                   "input_tokens_details": {"cached_tokens": 0},
                                                   "output_tokens_details": {"reasoning_tokens": 0}}}},
                    ]
                    payloads = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
                else:
                    words = ["Hel", "lo", " there"]
                    chunks = [{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                               "model": body["model"],
                               "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
                              for word in words]
                    chunks[-1]["choices"][0]["finish_reason"] = "stop"
                    if (body.get("stream_options") or {}).get("include_usage"):
                        chunks.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                                       "model": body["model"], "choices": [], "usage": USAGE})
                    if "broken200" in text:
                        # vLLM's shape of an error: no `error` member, `object: "error"`.
                        chunks = [chunks[0], {"object": "error", "message": "engine broke", "type": "server_error",
                                              "code": 500}]
                    payloads = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
                self._send_events(text, payloads)

            def _send_events(self, text: str, payloads: list[str]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("X-Upstream-Account", "org-of-this-caller")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._chunk(payloads[0])
                if "cut" in text:
                    self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = True
                    return
                if "gate" in text:
                    owner.gate.wait(10)
                if "hold" in text:
                    time.sleep(5)
                for payload in payloads[1:]:
                    if "drip" in text:
                        time.sleep(0.25)
                    self._chunk(payload)
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *_: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 1024  # bursts of connections, as the tests and benches make
            daemon_threads = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, path_suffix: str = "") -> int:
        with self.lock:
            return sum(call["path"].endswith(path_suffix) for call in self.calls)

    def close(self) -> None:
        self.server.shutdown()


def _test_shape(handler: http.server.BaseHTTPRequestHandler, owner: Upstream) -> None:
    """``/_test/length?size=N``, ``/_test/chunks?n=N&gap_ms=M&size=S``, ``/_test/close?size=N``
    (HTTP/1.0 style, the end marked by closing), ``/_test/echo`` (the request as JSON),
    ``/_test/status?code=N``, ``/_test/slow_head?ms=M``, ``/_test/stall?ms=M`` (a head, one
    chunk, then silence)."""
    url = urllib.parse.urlsplit(handler.path)
    query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
    size = int(query.get("size", "10"))
    length = int(handler.headers.get("Content-Length", "0") or "0")
    body = handler.rfile.read(length) if length else b""
    with owner.lock:
        owner.calls.append({"path": handler.path, "body": None, "auth": handler.headers.get("Authorization")})
    head_only = handler.command == "HEAD"

    def send(status: int, data: bytes, extra: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if not head_only:
            handler.wfile.write(data)

    def chunk(data: bytes) -> None:
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()

    if url.path == "/_test/length":
        send(200, bytes(ord("a") + i % 26 for i in range(size)))
    elif url.path == "/_test/echo":
        send(200, json.dumps({"method": handler.command, "path": handler.path,
                              "headers": [[k, v] for k, v in handler.headers.items()],
                              "body": body.decode("latin-1")}).encode(), {"Content-Type": "application/json"})
    elif url.path == "/_test/status":
        send(int(query.get("code", "500")), b"status body")
    elif url.path == "/_test/slow_head":
        time.sleep(int(query.get("ms", "0")) / 1000)
        send(200, b"late")
    elif url.path == "/_test/close":
        handler.close_connection = True
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"c" * size)
        handler.wfile.flush()
    elif url.path in ("/_test/chunks", "/_test/stall"):
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        count = int(query.get("n", "3"))
        for index in range(count):
            chunk(f"{index:0{size}d}".encode())
            if url.path == "/_test/stall":
                time.sleep(int(query.get("ms", "2000")) / 1000)
            elif index < count - 1:
                time.sleep(int(query.get("gap_ms", "0")) / 1000)
        handler.wfile.write(b"0\r\n\r\n")
    else:
        send(404, b"no such test shape")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    arguments = parser.parse_args()
    context = None
    if arguments.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(arguments.tls_cert, arguments.tls_key)
    upstream = Upstream(arguments.port, context)
    print(f"port {upstream.port}", flush=True)
    sys.stdin.read()  # serve until the parent goes away
