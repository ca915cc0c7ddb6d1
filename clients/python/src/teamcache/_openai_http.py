"""What the OpenAI transports do with the HTTP of a call (split from ``openai``): the plan of a
request (its query and beta headers counted), the body sent upstream, a refusal of the usage
member this transport added, and the headers of an answer handed on once read."""

from __future__ import annotations

import dataclasses
import hashlib
from types import ModuleType
from typing import Any

from ._openai_plan import Plan, plan


def _upstream_request(http: ModuleType, request: Any, the_plan: Plan) -> Any:
    """The request as sent upstream: the caller's, or with usage asked for (a new body)."""
    if the_plan.upstream_body is None:
        return request
    headers = [(name, value) for name, value in request.headers.multi_items() if name.lower() != "content-length"]
    return http.Request(request.method, request.url, headers=headers, content=the_plan.upstream_body,
                        extensions=request.extensions)


def _refused_usage(the_plan: Plan, status: int) -> bool:
    """An upstream that rejects `stream_options` (some OpenAI-compatible servers) answered the
    request this transport augmented: it is sent again as the caller sent it."""
    return the_plan.upstream_body is not None and status in (400, 422)


def _names_usage(refusal: bytes) -> bool:
    """Whether a refusal of the augmented request is of its usage member: any other (a bad
    request, a context too long) is the caller's answer, not a reason to call again."""
    return b"stream_options" in refusal or b"include_usage" in refusal


def _refused_as_read(http: ModuleType, response: Any, refusal: bytes) -> Any:
    """The refusal, read already, handed on as the upstream's answer."""
    return http.Response(response.status_code, headers=_decoded(list(response.headers.multi_items())),
                         content=refusal, extensions=response.extensions)


def _storable_type(text: str) -> bool:
    """A media type as the service takes one (CacheCore's ``MediaType.isStorable``): 1 to 256
    bytes with a ``/``, no control character but a tab."""
    data = text.encode(errors="replace")
    return 1 <= len(data) <= 256 and b"/" in data and all(byte >= 0x20 and byte != 0x7F or byte == 0x09
                                                            for byte in data)


def _plan_of(request: Any, body: bytes) -> Plan | None:
    """How ``request`` is cached, or None to pass it through. Its answer can depend on more than
    the body shows: a beta-feature header passes it through, as the gateway does; a query string
    (Azure's ``api-version``, an SDK's ``extra_query``) goes into the key as its SHA-256
    (``params.url_query_sha256``: a query may carry a credential, which no key or queued write
    should hold), so two API versions never share an entry (the gateway does not cache such a
    call at all)."""
    if "openai-beta" in request.headers or "anthropic-beta" in request.headers:
        return None
    the_plan = plan(request.method, request.url.path, body)
    raw = request.url.query
    query = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw or "")
    if the_plan is None or not query:
        return the_plan
    digest = hashlib.sha256(query.encode()).hexdigest()
    descriptor = {**the_plan.descriptor, "params": {**the_plan.descriptor["params"], "url_query_sha256": digest}}
    return dataclasses.replace(the_plan, descriptor=descriptor)


def _decoded(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers of an answer whose body was read, and so decoded: an upstream that compressed
    it although asked for identity would otherwise have it decoded twice (every call failing)."""
    return _without(headers, "content-encoding", "content-length")


def _without_length(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A relayed stream's headers once events may be removed from it."""
    return _without(headers, "content-length")


def _without(headers: list[tuple[str, str]], *names: str) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name.lower() not in names]
