"""Canonical JSON, as the server computes it for descriptor keys (README, "Descriptor keys").

The server keys numbers by their text exactly as written in the request (``0.20`` stays
``0.20``). This package writes every request body with the same serializer it keys with, so
the text the server reads is the text the key was computed over. ``RawNumber`` carries a
number's text through unchanged (``loads`` produces them), for descriptors read from JSON.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


class RawNumber(str):
    """A JSON number kept as the text it was written as (``0.20``, ``1e5``)."""

    __slots__ = ()


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(text: str) -> str:
    out = ['"']
    for char in text:
        escaped = _ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _number(value: int | float | Decimal) -> str:
    if isinstance(value, bool):  # bool is an int; never reached (handled first) but explicit
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("JSON has no NaN or infinity")
        return str(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError("JSON has no NaN or infinity")
    return json.dumps(value)


def canonical(value: Any, *, depth: int = 0) -> str:
    """Members sorted by the UTF-8 bytes of their names, no insignificant whitespace,
    minimal string escapes, numbers as given."""
    if depth > 64:
        raise ValueError("JSON nested deeper than 64 levels")
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, RawNumber):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (int, float, Decimal)):
        return _number(value)
    if isinstance(value, dict):
        names = list(value.keys())
        if not all(isinstance(name, str) for name in names):
            raise TypeError("JSON object member names must be strings")
        # Code point order is UTF-8 byte order.
        members = (f"{_string(name)}:{canonical(value[name], depth=depth + 1)}" for name in sorted(names))
        return "{" + ",".join(members) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(item, depth=depth + 1) for item in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


def dumps(value: Any) -> str:
    """The request-body serializer: canonical form (so a key computed here matches)."""
    return canonical(value)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, item in pairs:
        if name in out:
            raise ValueError(f"duplicate member name {name!r}")
        out[name] = item
    return out


def loads(text: str | bytes) -> Any:
    """Parses JSON keeping numbers' text (``RawNumber``) and refusing duplicate names, as the
    server does."""
    return json.loads(text, parse_float=RawNumber, parse_int=RawNumber, parse_constant=_no_constants,
                      object_pairs_hook=_refuse_duplicates)


def _no_constants(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")
