"""Per-client limits of the anonymous faces (issue 16): requests per minute, open sockets, a share of a daily pool.

A client is its address (rag/clients.py) and, when it sends a session cookie, that session too. Every limit is
counted under the address, always, so a client cannot escape it by dropping its cookie; a session is counted as
well, so one session that moves between addresses is still one client. Counters live in the Django cache (Redis
in production), keyed by scope and client: requests in fixed windows of a minute (a burst across a window's end
may reach twice the limit, the usual price of a fixed window), sockets as a gauge, tokens per local day.

Without the cache (`rag.redis_cache.available()` False) nothing can be counted: the request limits let requests
through, so search and extractive answers keep working, and a face that would spend model tokens must not (see
`countable`); a token reservation that cannot be counted is refused.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from rag import redis_cache
from rag.clients import request_address, scope_address
from rag.errors import ServiceError

WINDOW_SECONDS = 60  # the RAG_WEB_LIMITS rates are per minute
SOCKET_TTL = 3600  # a socket gauge left by a process that died frees itself after this (touched on each connect)
# Each scope's limit in RAG_WEB_LIMITS.
RATES = {"search": "SEARCH_PER_MINUTE", "chat": "CHAT_PER_MINUTE", "ws_connect": "WS_CONNECTS_PER_MINUTE",
         "ws_message": "WS_MESSAGES_PER_MINUTE"}


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
    """Can per-client limits be counted now? False while the Redis cache is down: spend no model tokens then."""
    return redis_cache.available()


def count(key: str, timeout: int, delta: int = 1) -> int | None:
    """Add `delta` to a counter in the cache that expires `timeout` seconds after it was created, and return its
    value; None while the cache is down. The one counter of every limit (web, API keys, sign-ins)."""
    cache.add(key, 0, timeout)
    try:
        return cache.incr(key, delta)
    except ValueError:  # expired between add and incr, or the cache is unavailable
        if not redis_cache.available():
            return None
        cache.set(key, delta, timeout)
        return delta


def rate_limit(scope: str, client: Client) -> None:
    """Count one request of `client` in `scope` ("search", "chat", "ws_connect", "ws_message"), or raise 429
    `rate_limited` with Retry-After (seconds to the window's end) when it is over the scope's limit."""
    limit = settings.RAG_WEB_LIMITS[RATES[scope]]
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    counts = [count(f"limits:{scope}:{window}:{key}", WINDOW_SECONDS + 1) for key in client.keys()]
    if any(n is not None and n > limit for n in counts):
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        raise ServiceError("rate_limited", f"Too many requests from this client ({limit} a minute); try again in "
                           f"{retry_after} seconds.", status=429, headers={"Retry-After": str(retry_after)})


def socket_open(client: Client) -> bool:
    """Count an open socket of `client`, or raise 429 `too_many_sockets` when it has RAG_WEB_LIMITS'
    SOCKETS_PER_CLIENT open already. True when counted: call `socket_closed` when it closes."""
    limit = settings.RAG_WEB_LIMITS["SOCKETS_PER_CLIENT"]
    keys = [f"limits:sockets:{key}" for key in client.keys()]
    counts = [count(key, SOCKET_TTL) for key in keys]
    for key in keys:
        cache.touch(key, SOCKET_TTL)
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
        try:
            if cache.decr(f"limits:sockets:{key}") < 0:
                cache.set(f"limits:sockets:{key}", 0, SOCKET_TTL)
        except ValueError:  # expired, or the cache is down: nothing left to give back
            pass


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


def token_share_reserve(client: Client, tokens: int, *, pool_limit: int, day: datetime.date) -> TokenShare:
    """Reserve `tokens` of `client`'s share (RAG_WEB_LIMITS' TOKEN_SHARE of `pool_limit`) of the pool of local
    `day`, or raise 429 `client_token_share_exhausted` with Retry-After to local midnight; 503
    `limits_unavailable` when the share cannot be counted."""
    share = int(pool_limit * settings.RAG_WEB_LIMITS["TOKEN_SHARE"])
    keys = [f"limits:tokens:{day.isoformat()}:{key}" for key in client.keys()]
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
