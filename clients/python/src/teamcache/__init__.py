"""TeamCache for Python: a client for the shared response cache, ``cached`` (one model call
per burst), an OpenAI SDK transport (``teamcache.openai``) and a LangChain cache
(``teamcache.langchain``)."""

from ._breaker import CacheHealth, CircuitBreaker
from ._cached import CacheOptions
from ._client import AsyncTeamCache, CheckResult, TeamCache
from ._json import RawNumber, canonical
from ._local import LocalTier, OutboxConflict
from .errors import CacheSkipped, ConfigurationError, ProblemError, TeamCacheError, TransportError
from .keys import DescriptorError, descriptor_key, normalise_prompt
from .models import (
                     Change,
                     ChangePage,
                     Entry,
                     EntryMiss,
                     ImportResult,
                     Lease,
                     Lookup,
                     LookupCounts,
                     NamespaceSettings,
                     RejectedLine,
                     Stats,
                     TokenCounts,
                     TopEntry,
                     WriteResult,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncTeamCache", "CacheHealth", "CacheOptions", "CacheSkipped", "Change", "ChangePage", "CheckResult",
    "CircuitBreaker", "ConfigurationError", "DescriptorError", "Entry", "EntryMiss", "ImportResult", "Lease", "Lookup",
    "LocalTier", "LookupCounts",
    "NamespaceSettings", "OutboxConflict", "ProblemError", "RawNumber", "RejectedLine", "Stats", "TeamCache",
    "TeamCacheError", "TokenCounts", "TopEntry", "TransportError", "WriteResult", "canonical", "descriptor_key",
    "normalise_prompt",
]
