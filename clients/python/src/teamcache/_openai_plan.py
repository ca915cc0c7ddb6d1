"""What an OpenAI-shaped request is cached under (``plan``): the descriptor built from its
members, as ``teamcache.openai``'s docstring and docs/gateway-keys.md describe; the gateway
builds the same (the vectors in tests/vectors/gateway_keys.json pin both)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._json import RawNumber, dumps, loads
from .keys import DescriptorError, descriptor_key, normalise_prompt

ENDPOINTS = ("/chat/completions", "/responses", "/embeddings", "/completions")
#: Request members that never change the answer, left out of the key. Not for ``/responses``:
#: a Responses object echoes each of them, so one caller's ``user`` or ``metadata`` would reach
#: another in a hit.
NOT_IN_KEY = frozenset({"user", "safety_identifier", "metadata", "store", "prompt_cache_key",
                        "prompt_cache_retention", "service_tier"})


@dataclass(frozen=True)
class Plan:
    """How one upstream request is cached."""

    endpoint: str
    descriptor: dict[str, Any]
    stream: bool
    #: The body to send upstream when it differs from the caller's (usage asked for a stream).
    upstream_body: bytes | None = None

    @property
    def key(self) -> str:
        return descriptor_key(self.descriptor)

    @property
    def strips_usage(self) -> bool:
        """The usage-only event was asked for by this transport, not the caller: removed."""
        return self.upstream_body is not None


def plan(method: str, path: str, body: bytes) -> Plan | None:
    """The descriptor of a cacheable request, or None to pass it through untouched. The
    gateway builds the same (docs/gateway-keys.md; the vectors in tests/vectors/gateway_keys.json
    pin both): numbers keep the text they were sent with, as the server's keys do."""
    endpoint = next((name for name in ENDPOINTS if path.endswith(name)), None)
    if method != "POST" or endpoint is None:
        return None
    try:
        request = loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or not is_text(request.get("model")) or truthy(request.get("background")):
        return None
    if endpoint == "/responses" and _server_state(request):
        return None
    stream = request.get("stream") is True
    ignored = NOT_IN_KEY if endpoint != "/responses" else frozenset()
    params = {name: value for name, value in request.items() if name not in ignored and name != "model"}
    params["endpoint"] = endpoint
    params.pop("stream", None)
    if stream:
        params["stream"] = True
    else:
        params.pop("stream_options", None)
    descriptor: dict[str, Any] = {"model": request["model"]}
    if endpoint == "/chat/completions":
        descriptor["messages"] = params.pop("messages", None)
        schema = None if stream else params.pop("response_format", None)
    else:
        name = "prompt" if endpoint == "/completions" else "input"
        value = params.pop(name, None)
        # A string the key's normalising would change (whitespace at its ends, a CR) is kept
        # as sent: "hello\n" and "hello" are different inputs to a model.
        if is_text(value) and normalise_prompt(value) == value:
            descriptor["prompt"] = value
        elif endpoint == "/responses" and isinstance(value, list) and all(isinstance(v, dict) for v in value):
            descriptor["messages"] = value
        elif value is not None:
            descriptor["messages"] = [{name: value}]
        schema = None
        text = params.get("text")
        if endpoint == "/responses" and not stream and isinstance(text, dict) and "format" in text:
            rest = {name: item for name, item in text.items() if name != "format"}
            schema = text["format"]
            if rest:
                params["text"] = rest
            else:
                params.pop("text")
    if schema is not None:
        descriptor["schema"] = schema
    descriptor["params"] = params
    try:
        descriptor_key(descriptor)
    except (DescriptorError, TypeError, ValueError):
        return None
    asks_usage = stream and endpoint == "/chat/completions"
    return Plan(endpoint, descriptor, stream, _with_usage(request) if asks_usage else None)


def _server_state(request: dict[str, Any]) -> bool:
    """Whether a Responses request's answer depends on state the server keeps and changes: a
    ``conversation`` (each call adds to it, and a hit would skip that), or a ``prompt`` template
    without a ``version`` (its current version)."""
    prompt = request.get("prompt")
    return request.get("conversation") is not None or (isinstance(prompt, dict) and prompt.get("version") is None)


def is_text(value: Any) -> bool:
    """A JSON string (``loads`` keeps numbers as ``RawNumber``, a ``str`` too)."""
    return isinstance(value, str) and not isinstance(value, RawNumber)


def truthy(value: Any) -> bool:
    """Python's truth of a JSON value, with numbers read as numbers (``0`` is false)."""
    if isinstance(value, RawNumber):
        return float(value) != 0
    return bool(value)


def _with_usage(request: dict[str, Any]) -> bytes | None:
    """The streamed chat request asking for usage, or None when the caller asked already."""
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    asked = dict(request)
    asked["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return dumps(asked).encode()
