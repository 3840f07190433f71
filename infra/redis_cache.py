"""The Django cache on Redis, for a product that must keep answering when Redis is stopped or stalled.

What lives in this cache is shared bookkeeping: live gauges, the breaker's state, limiter counters, key
failure counts. None of it is data a user stored, so a call that cannot reach Redis answers as a miss (get:
the default; add/set/delete: nothing done; incr: a missing key) instead of raising or hanging: 1 s socket
timeouts, no retries, and after a failure the cache does not try Redis again for `OUTAGE_SECONDS`, so a
stalled Redis costs one timeout per few seconds and process, not one per call. Code that must fail closed
without Redis (anonymous generation's limits) asks `available()` first.

The limits' counters (infra/limits.py) run here as one Lua script each, so a count is one atomic step on Redis:
`count` (INCRBY, with the expiry set when the counter is created) and `window_hit` (a moving window log in a
sorted set: drop what left the window, refuse when full, else add). `redis_client` and `Outage` give other
Redis users (infra/capacity.py) the same timeouts and the same "stop asking for a while" after a failure.
"""

from __future__ import annotations

import logging
import threading
import time

from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.filebased import FileBasedCache
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

OUTAGE_SECONDS = 5.0
SOCKET_TIMEOUT = 1.0

# KEYS[1]: the counter; ARGV: delta, seconds to live. The expiry is set once, when INCRBY created the key.
COUNT_SCRIPT = """
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return n
"""
# KEYS: one sorted set per name the client is counted under, scored by time; ARGV: now, window, limit, member.
# Returns {seconds to wait (0: admitted and added to every set), entries in the fullest set, seconds until its
# oldest entry leaves}; floats as strings, since Redis turns a Lua number into an integer.
WINDOW_SCRIPT = """
local now, window, limit, member = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local wait, fullest, reset = 0, 0, 0
for _, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local n = redis.call('ZCARD', key)
  if n >= limit then
    local entry = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
    wait = math.max(wait, tonumber(entry[2]) + window - now)
  end
end
for _, key in ipairs(KEYS) do
  if wait == 0 then
    redis.call('ZADD', key, now, member)
    redis.call('PEXPIRE', key, math.ceil(window * 1000))
  end
  local n = redis.call('ZCARD', key)
  fullest = math.max(fullest, n)
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if oldest[2] then reset = math.max(reset, tonumber(oldest[2]) + window - now) end
end
return {tostring(wait), fullest, tostring(reset)}
"""


def no_retries():
    """redis-py retries a timed-out command three times by default: a stalled Redis would cost 4 s, not 1."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def redis_client(url: str):
    """A client for `url` that fails within SOCKET_TIMEOUT when Redis is down or stalled, and never retries."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT,
                                retry=no_retries())


class Outage:
    """After a failure of `what`, answer "unavailable" for OUTAGE_SECONDS, so callers use their fallback at once."""

    def __init__(self, what: str, clock=time.monotonic):
        self.what = what
        self.clock = clock
        self._down_until = 0.0
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self.clock() >= self._down_until

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            first = self.available
            self._down_until = self.clock() + OUTAGE_SECONDS
        if first:
            log.warning("%s unavailable (%s: %s); using the local fallback for %.0f s", self.what,
                        type(exc).__name__, exc, OUTAGE_SECONDS)


class ResilientRedisCache(RedisCache):
    """Django's RedisCache whose calls never raise RedisError (see the module docstring)."""

    def __init__(self, server, params):
        options = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_TIMEOUT,
                   "retry": no_retries(), **params.get("OPTIONS", {})}
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

    def _script(self, source: str, keys: list[str], args: list):
        client = self._cache.get_client(keys[0], write=True)
        return client.eval(source, len(keys), *keys, *args)

    def count(self, key, delta: int, timeout: int, version=None) -> int | None:
        """Add `delta` to the counter `key` in one atomic step and return its value (None while Redis is down);
        a counter created by this call expires `timeout` seconds later."""
        keys = [self.make_and_validate_key(key, version=version)]
        return self._call(lambda: None, lambda: int(self._script(COUNT_SCRIPT, keys, [delta, int(timeout)])))

    def window_hit(self, keys, *, now: float, window: float, limit: int, member: str,
                   version=None) -> tuple[float, int, float] | None:
        """One atomic step of the moving window log of every key (see WINDOW_SCRIPT): (seconds to wait, 0 when
        admitted; entries in the fullest window; seconds until its oldest entry leaves), or None while Redis is
        down."""
        names = [self.make_and_validate_key(key, version=version) for key in keys]

        def hit():
            wait, fullest, reset = self._script(WINDOW_SCRIPT, names, [repr(now), repr(window), limit, member])
            return float(wait), int(fullest), float(reset)

        return self._call(lambda: None, hit)

    def window_forget(self, keys, member: str, version=None) -> None:
        """Take back an entry that `window_hit` added."""
        for key in keys:
            name = self.make_and_validate_key(key, version=version)
            self._call(lambda: None, lambda: self._cache.get_client(name, write=True).zrem(name, member))


class ResilientFileCache(FileBasedCache):
    """Django's FileBasedCache whose writes never raise OSError (a full disk, a folder that cannot be written):
    a write that fails is not done, is logged once, and for OUTAGE_SECONDS no write is tried and `available` is
    False, as the Redis cache does while Redis is down. Reads go on: what is on the disk can still be read."""

    def __init__(self, directory, params):
        super().__init__(directory, params)
        self._outage = Outage("The file cache")

    @property
    def available(self) -> bool:
        return self._outage.available

    def _write(self, fallback, method, *args):
        if not self.available:
            return fallback
        try:
            return method(*args)
        except OSError as exc:
            self._outage.failed(exc)
            return fallback

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._write(None, super().set, key, value, timeout, version)

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._write(False, super().add, key, value, timeout, version)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None):
        return self._write(False, super().touch, key, timeout, version)


def available() -> bool:
    """Does the default cache reach its store now? Always True for caches that do not track it (only the
    Redis cache and the resilient file cache do)."""
    return getattr(caches["default"], "available", True)
