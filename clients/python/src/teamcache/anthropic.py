"""The descriptor of an Anthropic ``POST /v1/messages`` request, as TeamCache's gateway keys
it (docs/gateway-keys.md): the model; the messages, led by the ``system`` prompt as a
``{"role": "system", "content": …}`` message when there is one; every other member in
``params`` with the endpoint, except those that do not change the answer (``metadata``,
``service_tier``). A streamed call has an entry of its own (``params.stream``)."""

from __future__ import annotations

from typing import Any

from ._json import loads
from ._openai_plan import Plan, is_text
from .keys import DescriptorError, descriptor_key

ENDPOINT = "/v1/messages"
#: Request members that never change the answer, left out of the key.
NOT_IN_KEY = frozenset({"metadata", "service_tier"})


def plan(method: str, path: str, body: bytes) -> Plan | None:
    """The descriptor of a cacheable Messages request, or None to pass it through."""
    if method != "POST" or not path.endswith(ENDPOINT):
        return None
    try:
        request = loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or not is_text(request.get("model")):
        return None
    messages = request.get("messages")
    if not isinstance(messages, list):
        return None
    stream = request.get("stream") is True
    params = {name: value for name, value in request.items()
              if name not in NOT_IN_KEY and name not in ("model", "stream", "messages", "system")}
    params["endpoint"] = ENDPOINT
    if stream:
        params["stream"] = True
    if request.get("system") is not None:
        messages = [{"role": "system", "content": request["system"]}, *messages]
    descriptor: dict[str, Any] = {"model": request["model"], "messages": messages, "params": params}
    try:
        descriptor_key(descriptor)
    except (DescriptorError, TypeError, ValueError):
        return None
    return Plan(ENDPOINT, descriptor, stream)
