"""A small OpenAI-compatible upstream for the tests: ``/v1/chat/completions``, ``/v1/responses``
and ``/v1/embeddings``, streamed and not, counting its calls. Prompts steer it:
"fail" answers 500, "slow" takes 300 ms, "gate" streams its first chunk and then waits for
``gate`` to be set before the rest, "cut" ends a stream after its first chunk."""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


class Upstream:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with owner.lock:
                    owner.calls.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                text = json.dumps(body.get("messages") or body.get("input"))
                if "fail" in text:
                    return self._json(500, {"error": {"message": "upstream broke", "type": "server_error"}})
                if "slow" in text:
                    time.sleep(0.3)
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
                    "usage": USAGE})

            def _json(self, status: int, document: dict) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, payload: str) -> None:
                data = payload.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, responses: bool, text: str, body: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
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
                    payloads = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
                self._chunk(payloads[0])
                if "cut" in text:
                    self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = True
                    return
                if "gate" in text:
                    owner.gate.wait(10)
                for payload in payloads[1:]:
                    self._chunk(payload)
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, path_suffix: str = "") -> int:
        with self.lock:
            return sum(call["path"].endswith(path_suffix) for call in self.calls)

    def close(self) -> None:
        self.server.shutdown()
