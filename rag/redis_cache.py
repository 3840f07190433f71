"""The Django cache on Redis, for a product that must keep answering when Redis is stopped or stalled.

What lives in this cache is shared bookkeeping: live gauges, the breaker's state, limiter counters, key
failure counts. None of it is data a user stored, so a call that cannot reach Redis answers as a miss (get:
the default; add/set/delete: nothing done; incr: a missing key) instead of raising or hanging: 1 s socket
timeouts, no retries, and after a failure the cache does not try Redis again for `OUTAGE_SECONDS`, so a
stalled Redis costs one timeout per few seconds and process, not one per call. Code that must fail closed
without Redis (anonymous generation's limits) asks `available()` first.
"""

from __future__ import annotations

import logging
import threading
import time

from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

OUTAGE_SECONDS = 5.0
SOCKET_TIMEOUT = 1.0


class ResilientRedisCache(RedisCache):
    """Django's RedisCache whose calls never raise RedisError (see the module docstring)."""

    def __init__(self, server, params):
        options = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_TIMEOUT,
                   **params.get("OPTIONS", {})}
        super().__init__(server, {**params, "OPTIONS": options})
        self._down_until = 0.0
        self._lock = threading.Lock()
        self.clock = time.monotonic

    @property
    def available(self) -> bool:
        """False while the last failure is recent: calls answer as misses without asking Redis."""
        return self.clock() >= self._down_until

    def _call(self, fallback, method, *args, **kwargs):
        import redis

        if not self.available:
            return fallback()
        try:
            return method(*args, **kwargs)
        except redis.RedisError as exc:
            with self._lock:
                first = self.available
                self._down_until = self.clock() + OUTAGE_SECONDS
            if first:
                log.warning("Redis cache unavailable (%s); answering as misses for %.0f s", type(exc).__name__,
                            OUTAGE_SECONDS)
            return fallback()

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._call(lambda: False, super().add, key, value, timeout, version)

    def get(self, key, default=None, version=None):
        return self._call(lambda: default, super().get, key, default, version)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._call(lambda: None, super().set, key, value, timeout, version)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None):
        return self._call(lambda: False, super().touch, key, timeout, version)

    def delete(self, key, version=None):
        return self._call(lambda: False, super().delete, key, version)

    def get_many(self, keys, version=None):
        return self._call(dict, super().get_many, keys, version)

    def has_key(self, key, version=None):
        return self._call(lambda: False, super().has_key, key, version)

    def incr(self, key, delta=1, version=None):
        def missing():
            raise ValueError(f"Key '{key}' not found (the cache is unavailable)")

        return self._call(missing, super().incr, key, delta, version)

    def set_many(self, data, timeout=DEFAULT_TIMEOUT, version=None):
        return self._call(lambda: list(data), super().set_many, data, timeout, version)

    def delete_many(self, keys, version=None):
        return self._call(lambda: None, super().delete_many, keys, version)

    def clear(self):
        return self._call(lambda: False, super().clear)


def available() -> bool:
    """Does the default cache reach its store now? Always True for caches that are not on Redis."""
    return getattr(caches["default"], "available", True)
