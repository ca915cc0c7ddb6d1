"""Descriptor keys, computed exactly as the server does (README, "Descriptor keys")."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ._json import canonical

TAG = "teamcache.descriptor.v1"
_WHITESPACE = " \t\n\x0b\x0c"
_MAX_NAME_BYTES = 256


class DescriptorError(ValueError):
    """A descriptor the server would refuse (422)."""


def normalise_prompt(prompt: str) -> str:
    """CRLF and lone CR become LF; leading and trailing ASCII whitespace is trimmed."""
    return prompt.replace("\r\n", "\n").replace("\r", "\n").strip(_WHITESPACE)


def _name(value: Any, member: str, required: bool) -> str | None:
    if value is None and not required:
        return None
    if (not isinstance(value, str) or (required and not value) or "\0" in value
            or len(value.encode()) > _MAX_NAME_BYTES):
        need = "a non-empty string" if required else "a string"
        raise DescriptorError(f"`{member}` must be {need} of at most 256 bytes, without NUL")
    return value


def fields(descriptor: Mapping[str, Any]) -> list[str | None]:
    """The fields hashed for the key, in order (absent ones as None)."""
    model = _name(descriptor.get("model"), "model", required=True)
    prompt, messages = descriptor.get("prompt"), descriptor.get("messages")
    if (prompt is None) == (messages is None):
        raise DescriptorError("give exactly one of `prompt` (a string) or `messages` (an array of objects)")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise DescriptorError("`prompt` must be a string")
        kind, text = "prompt", normalise_prompt(prompt)
    else:
        if not isinstance(messages, (list, tuple)) or not messages or not all(isinstance(m, dict) for m in messages):
            raise DescriptorError("`messages` must be a non-empty array of objects")
        kind, text = "messages", canonical(messages)
    params = descriptor.get("params")
    if params is not None and not isinstance(params, dict):
        raise DescriptorError("`params` must be an object")
    schema = descriptor.get("schema")
    version = _name(descriptor.get("version"), "version", required=False)
    return [TAG, model, kind, text, None if schema is None else canonical(schema),
            None if params is None else canonical(params), version]


def encoded_fields(descriptor: Mapping[str, Any]) -> bytes:
    """The exact bytes hashed: each field as 0x00 when absent, else 0x01, its UTF-8 length as
    8 bytes big-endian, and its bytes."""
    out = bytearray()
    for field in fields(descriptor):
        if field is None:
            out.append(0)
            continue
        data = field.encode()
        out.append(1)
        out += len(data).to_bytes(8, "big")
        out += data
    return bytes(out)


def descriptor_key(descriptor: Mapping[str, Any]) -> str:
    """The entry key of a descriptor: lowercase hex SHA-256 of its encoded fields."""
    return hashlib.sha256(encoded_fields(descriptor)).hexdigest()
