"""TeamCache for Python: a client for the shared response cache, ``cached`` (one model call
per burst), an OpenAI SDK transport (``teamcache.openai``) and a LangChain cache
(``teamcache.langchain``)."""

from ._client import AsyncTeamCache, TeamCache
from ._json import RawNumber, canonical
from .errors import ProblemError, TeamCacheError, TransportError
from .keys import DescriptorError, descriptor_key, normalise_prompt
from .models import Entry, EntryMiss, Lease, Lookup, WriteResult

__version__ = "0.1.0"

__all__ = [
    "AsyncTeamCache", "DescriptorError", "Entry", "EntryMiss", "Lease", "Lookup", "ProblemError", "RawNumber",
    "TeamCache", "TeamCacheError", "TransportError", "WriteResult", "canonical", "descriptor_key",
    "normalise_prompt",
]
