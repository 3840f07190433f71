"""The question service's retrieval cache (C4): a search's outcome kept for a few minutes, per process.

A face opts in per request (`QuestionRequest.cache`). The key holds everything that decides what a search
returns: the knowledge base and the profile fingerprint of what serves it (its active version, the
embedding model and the rerank configuration, `rag.services.profiles`), the stripped question and the
search options. A reindex or a changed model therefore never hits an old entry. Answers are never cached.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections import OrderedDict
from dataclasses import dataclass, field

from django.conf import settings


@dataclass
class RetrievalCache:
    """A least-recently-used map with a time to live, and its hit and miss counters."""

    ttl_seconds: float
    max_entries: int
    hits: int = 0
    misses: int = 0
    clock: Callable[[], float] = time.monotonic  # seconds; a test passes its own
    _entries: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, key: tuple):
        now = self.clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= now:
                if entry is not None:
                    del self._entries[key]
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def put(self, key: tuple, value) -> None:
        if self.max_entries <= 0 or self.ttl_seconds <= 0:
            return
        with self._lock:
            self._entries[key] = (self.clock() + self.ttl_seconds, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def stats(self) -> dict:
        """`{entries, hits, misses, max_entries, ttl_seconds}` (seed 004's `retrieve_cache`)."""
        now = self.clock()
        with self._lock:
            entries = sum(1 for expires, _ in self._entries.values() if expires > now)
        return {"entries": entries, "hits": self.hits, "misses": self.misses, "max_entries": self.max_entries,
                "ttl_seconds": float(self.ttl_seconds)}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


_cache: RetrievalCache | None = None
_cache_lock = threading.Lock()


def retrieval_cache() -> RetrievalCache:
    """This process's cache, sized by RAG_RETRIEVAL_CACHE (rebuilt when a test changes the setting)."""
    global _cache
    config = settings.RAG_RETRIEVAL_CACHE
    ttl, size = float(config["TTL_SECONDS"]), int(config["MAX_ENTRIES"])
    with _cache_lock:
        if _cache is None or (_cache.ttl_seconds, _cache.max_entries) != (ttl, size):
            _cache = RetrievalCache(ttl_seconds=ttl, max_entries=size)
        return _cache


def reset() -> None:
    """Forget this process's cache (tests)."""
    global _cache
    with _cache_lock:
        _cache = None
