"""A cached result as the text stored for it and back (``_encode`` / ``_decode``), and the
options that say how (``Options``): JSON, pydantic models and dataclasses of a declared type,
or the caller's own codec. Split from ``_cached``, which decides when to look and to store."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .models import Lookup

logger = logging.getLogger("teamcache")


def _unstorable(error: Exception) -> None:
    _warn_once(f"encode:{type(error).__name__}",
               "TeamCache could not store a result (encode, usage or the write failed): %r", error)


@dataclass
class Options:
    ttl: int | None = None
    tags: tuple[str, ...] = ()
    lease: int | None = 60
    wait: float = 30
    stale_on_error: int | None = None
    stale_while_revalidate: int | None = None
    refresh: bool = False
    encode: Callable[[Any], str] | None = None
    decode: Callable[[str], Any] | None = None
    usage: Callable[[Any], Mapping[str, Any]] | None = None
    #: The type a pydantic or dataclass result decodes into (a decorated function's return
    #: annotation when not given).
    result_type: Any = None


_warned_unencodable: set[str] = set()


def _type_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _encode(options: Options, result: Any) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = dict(options.usage(result)) if options.usage else {}
    if options.encode is not None:
        return options.encode(result), metadata
    if isinstance(result, str):
        return result, metadata
    typed = (hasattr(result, "model_dump") and hasattr(type(result), "model_validate")) or (
        dataclasses.is_dataclass(result) and not isinstance(result, type))
    if typed and options.result_type is None:
        # It could not be decoded (the type is never read from the shared cache): not stored.
        _warn_once(f"untyped:{_type_name(type(result))}",
                   "TeamCache does not store a %s without a declared type: annotate the decorated function's "
                   "return, or pass result_type=", _type_name(type(result)))
        raise TypeError("a pydantic model or dataclass result needs its declared type to be cached")
    if hasattr(result, "model_dump") and hasattr(type(result), "model_validate"):
        metadata["codec"] = "pydantic"
        metadata["type"] = _type_name(type(result))
        return json.dumps(result.model_dump(mode="json")), metadata
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        metadata["codec"] = "dataclass"
        metadata["type"] = _type_name(type(result))
        return json.dumps(dataclasses.asdict(result)), metadata
    metadata["codec"] = "json"
    try:
        return json.dumps(result), metadata
    except (TypeError, ValueError):
        name = _type_name(type(result))
        if name not in _warned_unencodable:
            _warned_unencodable.add(name)
            logger.warning("TeamCache cannot store results of type %s (not JSON, pydantic or a dataclass): "
                           "pass encode= and decode= to cached(); calls go on uncached", name)
        raise


_UNDECODABLE = object()


def _decode(options: Options, lookup: Lookup) -> Any:
    """The stored answer as the caller's value; ``_UNDECODABLE`` when it cannot be read (a
    corrupt or foreign entry), which the caller treats as a miss."""
    text = lookup.response or ""
    codec = (lookup.metadata or {}).get("codec")
    try:
        if options.decode is not None:
            return options.decode(text)
        if codec == "json":
            if isinstance(options.result_type, type) and options.result_type not in (dict, list, str, int, float):
                return _UNDECODABLE  # not the declared type: a foreign entry under this key
            return json.loads(text)
        if codec in ("pydantic", "dataclass"):
            kind = options.result_type
            # The type comes from the caller, never from the shared entry, and must be the one stored.
            if not isinstance(kind, type) or _type_name(kind) != (lookup.metadata or {}).get("type"):
                logger.warning("TeamCache entry %s holds a %s; pass result_type= (or annotate the function's return) "
                               "to decode it; calling instead", lookup.key[:12], (lookup.metadata or {}).get("type"))
                return _UNDECODABLE
            data = json.loads(text)
            model: Any = kind  # a pydantic model class (checked by the stored type's name above)
            return model.model_validate(data) if codec == "pydantic" else kind(**data)
    except Exception as error:  # noqa: BLE001 - an entry this cannot read is a miss
        logger.warning("TeamCache entry %s could not be decoded; calling instead: %r", lookup.key[:12], error)
        return _UNDECODABLE
    return text


_warned: set[str] = set()


def _warn_once(kind: str, message: str, *args: Any) -> None:
    if kind not in _warned:
        _warned.add(kind)
        logger.warning(message, *args)
    else:
        logger.debug(message, *args)
