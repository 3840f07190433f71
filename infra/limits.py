"""Per-client limits of the anonymous faces (issue 16): requests per minute, open sockets, a share of a daily pool.

A client is its address (infra/clients.py) and, when it sends a session cookie, that session too. Every limit is
counted under the address, always, so a client cannot escape it by dropping its cookie; a session is counted as
well, so one session that moves between addresses is still one client. Counters live in the Django cache (Redis
in production), keyed by scope and client: requests in a moving window of a minute (a log of when each admitted
request came, so a burst across a minute's end is still the limit, not twice it; a refused request is not
logged, and one answered 503 `index_building` is taken back), sockets as a gauge, tokens per local day.

Every count is one atomic step that decides from the count it got (issue 28): a Lua script on Redis
(infra/redis_cache.py); on any other cache a read and a write under a lock, a file lock beside the file cache's
files (it is shared by every process of the machine), a lock of this process for the in-memory cache.

When the shared counters cannot count (Redis down or stalled, `infra.redis_cache.available()` False; or the file
cache cannot write, a full disk, for OUTAGE_SECONDS after the failure), request limits and the sign-in and API-key
throttles count in this process instead (each process then admits up to the limit), so search and extractive
answers keep working and guessing stays bounded; a face that would spend model tokens must not (see `countable`),
and a token reservation that cannot be counted is refused.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.filebased import FileBasedCache
from django.core.cache.backends.locmem import LocMemCache
from django.utils import timezone

from infra import redis_cache
from infra.clients import request_address, scope_address
from infra.errors import ServiceError

WINDOW_SECONDS = 60  # the RAG_WEB_LIMITS rates are per minute
LOCK_STRIPES = 64  # lock files beside the file cache: keys share one at random, few enough to keep open cheaply
NOT_COUNTED = ("index_building",)  # refusals that are the service's state, not the client's doing
SOCKET_TTL = 3600  # a socket gauge left by a process that died frees itself after this (touched on each connect)
# Each scope's limit in RAG_WEB_LIMITS.
RATES = {"search": "SEARCH_PER_MINUTE", "chat": "CHAT_PER_MINUTE", "ws_connect": "WS_CONNECTS_PER_MINUTE",
         "ws_message": "WS_MESSAGES_PER_MINUTE",
         "cgrag_search": "CGRAG_SEARCH_PER_MINUTE", "cgrag_generate": "CGRAG_GENERATE_PER_MINUTE"}  # CG_RAG, /retrieve


@dataclass(frozen=True, slots=True)
class Client:
    """Who is asking, for per-client limits: an address, and the session key when a session cookie came."""

    address: str
    session: str = ""

    @classmethod
    def of_request(cls, request) -> Client:
        session = getattr(request, "session", None)
        return cls(request_address(request), (session.session_key or "") if session is not None else "")

    @classmethod
    def of_scope(cls, scope: dict) -> Client:
        from http.cookies import CookieError, SimpleCookie

        cookies = SimpleCookie()
        for name, value in scope.get("headers") or ():
            if name.lower() == b"cookie":
                try:
                    cookies.load(value.decode("latin-1"))
                except CookieError:
                    pass
        morsel = cookies.get(settings.SESSION_COOKIE_NAME)
        return cls(scope_address(scope), morsel.value if morsel is not None else "")

    def keys(self) -> tuple[str, ...]:
        """The names this client is counted under: its address always, and its session when it has one."""
        keys = [f"address:{self.address}"]
        if self.session:  # hashed: session keys are credentials and stay out of the cache's key space
            keys.append("session:" + hashlib.sha256(self.session.encode()).hexdigest()[:32])
        return tuple(keys)


def countable() -> bool:
    """Can per-client limits be counted now? False while the Redis cache is down or the file cache cannot write:
    spend no model tokens then."""
    return redis_cache.available() and _outage.available


# -- the stores ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WindowHit:
    """What one step of a moving window log decided: admitted or not, with the figures for headers."""

    keys: tuple[str, ...]
    member: str
    window: float
    admitted: bool
    count: int  # entries in the fullest window, this one included when admitted
    retry_after: float  # seconds until a refused request would be admitted
    reset: float  # seconds until the fullest window's oldest entry leaves
    shared: bool  # counted in the shared store (False: in this process only)


class _Locks:
    """Mutual exclusion for a read and write of the cache: a lock of this process, and a `flock` on one of
    LOCK_STRIPES files when the cache's files are shared with other processes."""

    _process = threading.RLock()

    def __init__(self, folder: Path | None):
        self.folder = folder

    @contextlib.contextmanager
    def hold(self, keys) -> Iterator[None]:
        stripes = sorted({int(hashlib.sha256(key.encode()).hexdigest(), 16) % LOCK_STRIPES for key in keys})
        with contextlib.ExitStack() as stack:
            if self.folder is None:
                stack.enter_context(self._process)
            else:
                self.folder.mkdir(parents=True, exist_ok=True)
                for stripe in stripes:  # in order: two callers never wait on each other's second lock
                    descriptor = os.open(self.folder / f"{stripe}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                    stack.callback(os.close, descriptor)
                    fcntl.flock(descriptor, fcntl.LOCK_EX)
                    stack.callback(fcntl.flock, descriptor, fcntl.LOCK_UN)
            yield


class _CacheStore:
    """Counters and moving window logs in any Django cache, each step a read and a write under `locks`. A
    counter is stored as (value, expires at) so a write keeps the expiry it was created with."""

    def __init__(self, backend, locks: _Locks):
        self.backend = backend
        self.locks = locks

    def count(self, key: str, delta: int, timeout: int, *, now: float, refresh: bool = False) -> int:
        with self.locks.hold([key]):
            entry = self.backend.get(key)
            value, expires = entry if isinstance(entry, tuple) else (0, 0.0)  # an int: a counter of old
            if expires <= now:
                value, expires = 0, now + timeout
            value, expires = value + delta, (now + timeout if refresh else expires)
            self.backend.set(key, (value, expires), max(1, math.ceil(expires - now)))
            return value

    def window_hit(self, keys, *, now: float, window: float, limit: int, member: str) -> tuple[float, int, float]:
        with self.locks.hold(keys):
            logs = {key: [entry for entry in self._log(key) if entry[0] > now - window] for key in keys}
            wait = max((entries[len(entries) - limit][0] + window - now for entries in logs.values()
                        if len(entries) >= limit), default=0.0)
            if wait == 0:
                for key, entries in logs.items():
                    entries.append((now, member))
                    self.backend.set(key, entries, math.ceil(window) + 1)
            fullest = max(len(entries) for entries in logs.values())
            reset = max((entries[0][0] + window - now for entries in logs.values() if entries), default=0.0)
            return wait, fullest, reset

    def _log(self, key: str) -> list[tuple[float, str]]:
        entries = self.backend.get(key)
        return entries if isinstance(entries, list) else []

    def window_forget(self, keys, member: str, window: float) -> None:
        with self.locks.hold(keys):
            for key in keys:
                entries = [entry for entry in self._log(key) if entry[1] != member]
                self.backend.set(key, entries, math.ceil(window) + 1)


class _SharedStore:
    """The default cache's counters: Redis's own atomic scripts, else a `_CacheStore`; None from a step that
    could not count (Redis down, or the file cache failing to write: then `_outage` holds off for a while)."""

    def __init__(self):
        backend = self.backend = caches["default"]
        self.redis = backend if isinstance(backend, redis_cache.ResilientRedisCache) else None
        folder = Path(backend._dir) / "locks" if isinstance(backend, FileBasedCache) else None
        self.store = _CacheStore(backend, _Locks(folder))

    def _guarded(self, step):
        if not (_outage.available and getattr(self.backend, "available", True)):
            return None
        try:
            result = step()
        except OSError as exc:  # a full disk or a lock file that cannot be made: count as if the cache were down
            _outage.failed(exc)
            return None
        # infra.redis_cache.ResilientFileCache does not raise: a write it could not do shows as unavailable
        return result if getattr(self.backend, "available", True) else None

    def count(self, key, delta, timeout, *, now, refresh=False) -> int | None:
        if self.redis is not None:
            return self.redis.count(key, delta, timeout)
        return self._guarded(lambda: self.store.count(key, delta, timeout, now=now, refresh=refresh))

    def window_hit(self, keys, **kwargs) -> tuple[float, int, float] | None:
        if self.redis is not None:
            return self.redis.window_hit(keys, **kwargs)
        return self._guarded(lambda: self.store.window_hit(keys, **kwargs))

    def window_forget(self, keys, member, window) -> None:
        if self.redis is not None:
            self.redis.window_forget(keys, member)
        else:
            self._guarded(lambda: self.store.window_forget(keys, member, window))


_outage = redis_cache.Outage("The file cache's limit counters")
_local = _CacheStore(LocMemCache("rag-limits-local", {"OPTIONS": {"MAX_ENTRIES": 100_000}}), _Locks(None))


def reset() -> None:
    """Forget this process's fallback counters and any recorded outage of the file cache (tests)."""
    _local.backend.clear()
    _outage._down_until = 0.0


def count(key: str, timeout: int, delta: int = 1, *, refresh: bool = False) -> int | None:
    """Add `delta` to a counter in the cache that expires `timeout` seconds after it was created (after this
    call with `refresh`), in one atomic step, and return its value; None while the cache cannot count."""
    return _SharedStore().count(key, delta, timeout, now=time.time(), refresh=refresh)


def window_hit(keys, *, limit: int, window: float = WINDOW_SECONDS) -> WindowHit:
    """Admit one event into the moving window of `window` seconds of every key if each holds fewer than
    `limit`, in one atomic step; a refused event is not logged. In this process's store while the shared one
    cannot count."""
    keys, member, now = tuple(keys), uuid.uuid4().hex, time.time()
    figures = _SharedStore().window_hit(keys, now=now, window=window, limit=limit, member=member)
    shared = figures is not None
    if not shared:
        figures = _local.window_hit(keys, now=now, window=window, limit=limit, member=member)
    wait, fullest, reset = figures
    return WindowHit(keys, member, window, wait <= 0, fullest, wait, reset, shared)


def window_give_back(hit: WindowHit) -> None:
    """Take back an admitted event (an attempt that turned out not to count)."""
    if not hit.admitted:
        return
    if hit.shared:
        _SharedStore().window_forget(hit.keys, hit.member, hit.window)
    else:
        _local.window_forget(hit.keys, hit.member, hit.window)


def not_counted(error: BaseException) -> bool:
    """Whether a request that ended in `error` counts against no limit: a refusal that is the service's state, not
    the client's doing (NOT_COUNTED)."""
    return isinstance(error, ServiceError) and error.code in NOT_COUNTED


def rate_hit(scope: str, client: Client) -> WindowHit:
    """`rate_limit`, returning the admitted request, for `window_give_back` when it ends in a refusal that
    `not_counted` (a face that learns how a request ended only after it returned, as a stream does)."""
    limit = settings.RAG_WEB_LIMITS[RATES[scope]]
    hit = window_hit([f"limits:{scope}:{key}" for key in client.keys()], limit=limit)
    if not hit.admitted:
        retry_after = max(1, math.ceil(hit.retry_after))
        raise ServiceError("rate_limited", f"Too many requests from this client ({limit} a minute); try again in "
                           f"{retry_after} seconds.", status=429, headers={"Retry-After": str(retry_after)})
    return hit


def rate_limit(scope: str, client: Client) -> None:
    """Count one request of `client` in `scope` ("search", "chat", "ws_connect", "ws_message", "cgrag_search",
    "cgrag_generate"), or raise 429 `rate_limited` with Retry-After (seconds until the oldest request in the
    minute leaves it) when it has the scope's limit of requests in the last minute already."""
    rate_hit(scope, client)


@contextlib.contextmanager
def rate_limited(scope: str, client: Client):
    """`rate_limit` around a block; a block that ends in a refusal that is not the client's doing (NOT_COUNTED:
    503 `index_building`) gives the request back."""
    hit = rate_hit(scope, client)
    try:
        yield
    except ServiceError as exc:
        if not_counted(exc):
            window_give_back(hit)
        raise


def socket_open(client: Client) -> bool:
    """Count an open socket of `client`, or raise 429 `too_many_sockets` when it has RAG_WEB_LIMITS'
    SOCKETS_PER_CLIENT open already. True when counted: call `socket_closed` when it closes."""
    limit = settings.RAG_WEB_LIMITS["SOCKETS_PER_CLIENT"]
    keys = [f"limits:sockets:{key}" for key in client.keys()]
    counts = [count(key, SOCKET_TTL, refresh=True) for key in keys]
    if any(n is None for n in counts):
        return False
    if any(n > limit for n in counts):
        socket_closed(client)
        raise ServiceError("too_many_sockets", f"This client has {limit} chat sockets open already; close one "
                           "first.", status=429, headers={"Retry-After": str(WINDOW_SECONDS)})
    return True


def socket_closed(client: Client) -> None:
    """A socket that `socket_open` counted has closed."""
    for key in client.keys():
        left = count(f"limits:sockets:{key}", SOCKET_TTL, -1)
        if left is not None and left < 0:  # the gauge expired while the socket was open: back to zero
            count(f"limits:sockets:{key}", SOCKET_TTL, -left)


def seconds_to_local_midnight() -> int:
    """Seconds until the next midnight in the configured time zone (when a local day's pool refills)."""
    now = timezone.localtime()
    midnight = timezone.make_aware(datetime.datetime.combine(now.date() + datetime.timedelta(days=1),
                                                             datetime.time()), now.tzinfo)
    return max(1, math.ceil((midnight - now).total_seconds()))


class TokenShare:
    """One answer's reservation against its client's share of a local day's token pool."""

    def __init__(self, keys: list[str], reserved: int):
        self.keys = keys
        self.reserved = reserved

    def settle(self, tokens: int) -> None:
        """The answer really cost `tokens`: give back (or take) the difference from the reservation."""
        delta, self.reserved = tokens - self.reserved, tokens
        if delta:
            timeout = seconds_to_local_midnight() + 3600
            for key in self.keys:
                count(key, timeout, delta)


def token_share_reserve(client: Client, tokens: int, *, pool_limit: int, day: datetime.date,
                        pool: str = "web") -> TokenShare:
    """Reserve `tokens` of `client`'s share (RAG_WEB_LIMITS' TOKEN_SHARE of `pool_limit`) of the pool named `pool`
    ("web", "cgrag": each pool's shares are counted apart) of local `day`, or raise 429
    `client_token_share_exhausted` with Retry-After to local midnight; 503 `limits_unavailable` when the share
    cannot be counted."""
    share = int(pool_limit * settings.RAG_WEB_LIMITS["TOKEN_SHARE"])
    prefix = "limits:tokens" if pool == "web" else f"limits:tokens:{pool}"  # the web's keys as they always were
    keys = [f"{prefix}:{day.isoformat()}:{key}" for key in client.keys()]
    timeout = seconds_to_local_midnight() + 3600
    counts = [count(key, timeout, tokens) for key in keys]
    reservation = TokenShare(keys, tokens)
    if any(n is None for n in counts):
        raise ServiceError("limits_unavailable", "Per-client limits cannot be counted right now; try again in a "
                           "moment.", status=503, headers={"Retry-After": "5"})
    if any(n > share for n in counts):
        reservation.settle(0)
        retry_after = seconds_to_local_midnight()
        raise ServiceError("client_token_share_exhausted", "This client's share of today's question budget is used "
                           "up; it refills at midnight.", status=429, headers={"Retry-After": str(retry_after)})
    return reservation
