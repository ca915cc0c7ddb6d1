"""What an upstream answer holds for the cache: its usage (tokens, finish reason), whether a
recorded stream completed, and the filter that drops a usage-only event the caller did not
ask for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


class UsageFilter:
    """Drops the usage-only event (``choices: []`` with ``usage``) from a chat completion
    stream, keeping its usage: the caller did not ask for it. Events are passed on whole, as
    soon as each is complete."""

    #: Held at most while looking for an event's end; past it the stream passes unfiltered.
    LIMIT = 1 << 20

    def __init__(self) -> None:
        self.buffer = b""
        self.usage: dict[str, Any] = {}
        self.passing = False

    def feed(self, chunk: bytes) -> bytes:
        if self.passing:
            return chunk
        self.buffer += chunk
        out = []
        while True:
            # Events end with a blank line, in any of SSE's line endings.
            ends = [(found, len(mark)) for mark in (b"\r\n\r\n", b"\n\n", b"\r\r")
                    if (found := self.buffer.find(mark)) >= 0]
            if not ends:
                break
            end, width = min(ends)
            event, self.buffer = self.buffer[:end + width], self.buffer[end + width:]
            if not self._usage_only(event):
                out.append(event)
        if len(self.buffer) > self.LIMIT:
            self.passing, rest, self.buffer = True, self.buffer, b""
            out.append(rest)
        return b"".join(out)

    def finish(self) -> bytes:
        rest, self.buffer = self.buffer, b""
        # Only a remainder that is one usage-only event (and nothing else) is dropped.
        single = rest.count(b"data:") == 1
        return b"" if single and self._usage_only(rest) else rest

    def _usage_only(self, event: bytes) -> bool:
        for line in event.decode(errors="replace").splitlines():
            if not line.startswith("data:"):
                continue
            try:
                document = json.loads(line[5:].strip())
            except ValueError:
                return False
            if isinstance(document, dict) and document.get("choices") == [] and isinstance(document.get("usage"), dict):
                self.usage = _usage(document)
                return True
        return False


def _usage(document: Any) -> dict[str, Any]:
    """input/output tokens and the finish reason from an upstream answer (or stream event)."""
    out: dict[str, Any] = {}
    if not isinstance(document, dict):
        return out
    usage = document.get("usage")
    if isinstance(usage, dict):
        inputs = usage.get("prompt_tokens", usage.get("input_tokens"))
        outputs = usage.get("completion_tokens", usage.get("output_tokens", 0))
        if isinstance(inputs, int):
            out["input_tokens"] = inputs
        if isinstance(outputs, int):
            out["output_tokens"] = outputs
    choices = document.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and choices[0].get("finish_reason"):
        out["finish_reason"] = str(choices[0]["finish_reason"])
    if isinstance(document.get("status"), str) and document.get("object") == "response":
        out["finish_reason"] = document["status"]
    return out


def _events(text: str) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream."""
    for line in text.splitlines():
        if line.startswith("data:"):
            yield line[5:].strip()


#: Events and answers that report a failure, not an answer: never stored, even when the
#: stream then ends with ``[DONE]`` (some OpenAI-compatible servers send an error event and
#: then close the stream as usual). The gateway applies the same rules (StreamRecorder,
#: AnswerFailure).
_FAILED_TYPES = frozenset({"error", "response.failed", "response.cancelled"})
_UNFINISHED_STATUSES = frozenset({"failed", "cancelled", "queued", "in_progress"})


def is_failure(document: Any) -> bool:
    """Whether an answer or stream event reports a failure rather than an answer."""
    if not isinstance(document, dict):
        return False
    if document.get("error") is not None or document.get("object") == "error":
        return True
    kind, status = document.get("type"), document.get("status")
    if isinstance(kind, str) and kind in _FAILED_TYPES:
        return True
    return document.get("object") == "response" and isinstance(status, str) and status in _UNFINISHED_STATUSES


def stream_outcome(endpoint: str, text: str) -> tuple[bool, dict[str, Any]]:
    """Whether a recorded stream completed (and reported no failure), and its usage."""
    complete, failed, metadata = False, False, {}
    for data in _events(text):
        if data == "[DONE]":
            complete = True
            continue
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        failed = failed or is_failure(event)
        if endpoint == "/responses" and event.get("type") in ("response.completed", "response.incomplete"):
            # An answer cut by its token limit is complete, as a chat's `length` is.
            complete = True
            metadata.update(_usage(event.get("response")))
        else:
            metadata.update(_usage(event))
    return complete and not failed, metadata
