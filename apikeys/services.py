"""Issue, check, revoke and rotate API keys, and count the calls made with them. A key is `<prefix>_<secret>`: the
prefix finds the row, the SHA-256 of the whole key is compared in constant time, and the key itself is never stored
or logged.

Every face that takes keys counts a call the same way (`api_key_call`): admit it against the key's rate and quota
(a refusal is recorded and raised), run it, then settle it: its model tokens on success, one failure on an error,
nothing at all when the service was only not ready (503 `index_building`: `KeyCall.give_back`). MCP admits in its
HTTP gate, before the SDK runs the tool, and settles in the tool (`KeyCall.settling`)."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import math
import re
import secrets
import string
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from apikeys.models import ApiKey, ApiKeyUsage
from infra.errors import ServiceError
from infra.limits import WindowHit, not_counted, window_give_back, window_hit

PREFIX_ALPHABET = string.ascii_lowercase + string.digits
FAILED_ATTEMPTS_LIMIT = 10  # per client address and key prefix within the window, then refused without looking
FAILED_ATTEMPTS_ADDRESS_LIMIT = 4 * FAILED_ATTEMPTS_LIMIT  # per address for all prefixes, as sign-in throttling
PREFIX_RE = re.compile(r"rk[a-z0-9]{10}")  # what _new_key makes
FAILED_ATTEMPTS_WINDOW = 300  # seconds
RATE_WINDOW = 60  # seconds: a key's rate_limit_per_minute counts its calls in the last minute
LAST_USED_PRECISION = 60  # seconds: last_used_at is written at most once a minute per key


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _new_key() -> tuple[str, str]:
    prefix = "rk" + "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(10))
    return prefix, f"{prefix}_{secrets.token_urlsafe(32)}"  # 256 bits of secret


def api_key_limits(*, daily_quota: int | None = None, rate_limit_per_minute: int | None = None) -> tuple[int, int]:
    """The limits a key gets: the given ones, else the deployment's defaults; 0 means unlimited."""
    limits = (settings.RAG_MCP_DEFAULT_DAILY_QUOTA if daily_quota is None else daily_quota,
              settings.RAG_MCP_DEFAULT_RATE_LIMIT if rate_limit_per_minute is None else rate_limit_per_minute)
    if not all(type(limit) is int and limit >= 0 for limit in limits):
        raise ServiceError("invalid_api_key_limit", "A key's daily quota and rate limit are whole numbers; 0 is "
                           "unlimited.")
    return limits


def api_key_issue(*, owner, name: str, expires_at=None, daily_quota=None, rate_limit_per_minute=None,
                  app=None) -> tuple[ApiKey, str]:
    """Create a key (bound to a retrieval app, or to none); return the row and the whole key, which is shown this
    once and never again. A limit not given is the deployment's default (RAG_MCP_DEFAULT_*); 0 is unlimited."""
    if not name or not name.strip():
        raise ServiceError("invalid_api_key_name", "Give the key a name.")
    daily_quota, rate_limit_per_minute = api_key_limits(daily_quota=daily_quota,
                                                        rate_limit_per_minute=rate_limit_per_minute)
    while True:
        prefix, key = _new_key()
        if not ApiKey.objects.filter(prefix=prefix).exists():
            break
    record = ApiKey.objects.create(prefix=prefix, secret_hash=_hash(key), name=name.strip(), owner=owner,
                                   expires_at=expires_at, daily_quota=daily_quota,
                                   rate_limit_per_minute=rate_limit_per_minute, app=app)
    return record, key


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


@transaction.atomic
def api_key_rotate(*, key: ApiKey) -> tuple[ApiKey, str]:
    """Revoke a key and issue its replacement with the same owner, name and limits."""
    api_key_revoke(key=key)
    # A key stored without limits (NULL, before defaults existed) was unlimited, and so is its replacement.
    return api_key_issue(owner=key.owner, name=key.name, expires_at=key.expires_at, daily_quota=key.daily_quota or 0,
                         rate_limit_per_minute=key.rate_limit_per_minute or 0, app=key.app)


def _failures_keys(address: str, raw: str | None) -> tuple[str, str]:
    """The failure counters of an address, and of the address and the key prefix a Bearer value names.

    A value not shaped like a key has no prefix: all such values from one address share one counter, so
    garbage cannot open new counters, and the address-wide one bounds a spray of well-formed prefixes.
    """
    prefix = (raw or "").partition("_")[0]
    prefix = prefix if PREFIX_RE.fullmatch(prefix) else "-"
    # Moving window logs (infra.limits.window_hit), named apart from the plain counters kept here before issue 28.
    return f"apikeys:attempts:address:{address}", f"apikeys:attempts:key:{prefix}:{address}"


def _attempt(by_address: str, by_prefix: str):
    """Count an attempt as a failure first, in moving windows of FAILED_ATTEMPTS_WINDOW against the address and
    prefix and the address; the hits, or None (nothing counted) when either is full."""
    hits = (window_hit([by_prefix], limit=FAILED_ATTEMPTS_LIMIT, window=FAILED_ATTEMPTS_WINDOW),
            window_hit([by_address], limit=FAILED_ATTEMPTS_ADDRESS_LIMIT, window=FAILED_ATTEMPTS_WINDOW))
    if all(hit.admitted for hit in hits):
        return hits
    for hit in hits:
        window_give_back(hit)
    return None


def api_key_authenticate(*, raw: str | None, address: str = "") -> ApiKey:
    """Return the active key for an `Authorization: Bearer` value, or raise `invalid_api_key` (401).

    `address` is the client's (infra.clients). Repeated failures from one address with one key prefix, or
    FAILED_ATTEMPTS_ADDRESS_LIMIT with any, are refused for a while (`too_many_failed_attempts`, 429) before
    any lookup, so keys cannot be guessed at speed, while another key from the same address still works.
    Each attempt is counted as a failure before its key is looked up and given back when the key is right
    (issue 28), so concurrent guesses cannot all pass a check made before any of them was counted. (A right key
    holds its place only while it is looked up: more than FAILED_ATTEMPTS_LIMIT of its calls authenticating at
    the same instant from one address could see a 429.)
    """
    hits = None
    if address:
        hits = _attempt(*_failures_keys(address, raw))
        if hits is None:
            raise ServiceError("too_many_failed_attempts", "Too many failed attempts; try again later.", status=429)
    record = None
    if raw and "_" in raw:
        prefix = raw.split("_", 1)[0]
        candidate = ApiKey.objects.select_related("owner").filter(prefix=prefix).first()
        expected = candidate.secret_hash if candidate else _hash("absent")  # compare even when absent
        if hmac.compare_digest(expected, _hash(raw)) and candidate is not None:
            record = candidate
    if record is None or record.state != "active":
        reason = "This API key was revoked." if record and record.revoked_at else (
            "This API key has expired." if record else "Missing or unknown API key.")
        raise ServiceError("invalid_api_key", reason + " Send `Authorization: Bearer <key>`.", status=401)
    for hit in hits or ():
        window_give_back(hit)
    now = timezone.now()
    if record.last_used_at is None or (now - record.last_used_at).total_seconds() >= LAST_USED_PRECISION:
        ApiKey.objects.filter(pk=record.pk).update(last_used_at=now)
    return record


def _seconds_to_midnight() -> int:
    now = timezone.localtime()
    midnight = datetime.datetime.combine(now.date() + datetime.timedelta(days=1), datetime.time(),
                                         tzinfo=now.tzinfo)
    return max(1, int((midnight - now).total_seconds()))


def _limit_headers(limit: int, remaining: int, reset: int) -> dict[str, str]:
    """The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers): limit, remaining, reset."""
    return {"RateLimit-Limit": str(limit), "RateLimit-Remaining": str(max(0, remaining)), "RateLimit-Reset": str(reset)}


def _minute_hit(key: ApiKey) -> WindowHit:
    """Count a call in the key's moving window of a minute (infra.limits.window_hit: one atomic step, so a burst
    across a minute's end is the limit and not twice it; a refused call is not counted)."""
    # A moving window log, named apart from the clock-minute counters (`apikeys:rate:<id>:<minute>`) of before.
    return window_hit([f"apikeys:rate:{key.pk}"], limit=key.rate_limit_per_minute, window=RATE_WINDOW)


@dataclass
class KeyCall:
    """One call admitted on a key (`api_key_admit_call`): the RateLimit-* headers to answer it with, and how it is
    settled (`settling`). `give_back` is for a call that ended in a refusal that is the service's state, not the
    caller's doing (503 `index_building`, infra.limits.not_counted): it then counts in neither the key's minute nor its
    day."""

    key_id: int
    tool: str
    day: datetime.date
    headers: dict[str, str]
    hit: WindowHit | None = None
    given_back: bool = False
    prompt_tokens: int = 0  # the model tokens the call spent (`spent`), added to the key's day when it settles
    completion_tokens: int = 0
    settled: bool = False

    def spent(self, usage) -> None:
        """Note what the call's model calls cost (a `Usage`: prompt_tokens, completion_tokens)."""
        self.prompt_tokens, self.completion_tokens = usage.prompt_tokens, usage.completion_tokens

    def give_back(self) -> None:
        if self.given_back:
            return
        self.given_back = True
        self.settled = True
        if self.hit is not None:
            window_give_back(self.hit)
        ApiKeyUsage.objects.filter(key_id=self.key_id, day=self.day, tool=self.tool, calls__gt=0).update(
            calls=F("calls") - 1)

    @contextmanager
    def settling(self) -> Iterator[KeyCall]:
        """Run the call: on success what it `spent` is added to the key's day; an error counts as one failure, except
        one that is the service's state (given back instead). Settled once, however often it is entered."""
        try:
            yield self
        except Exception as exc:
            if not self.settled:
                if not_counted(exc):
                    self.give_back()
                else:
                    self.settled = True
                    api_key_usage_settle(key_id=self.key_id, tool=self.tool, failed=True)
            raise
        if not self.settled:
            self.settled = True
            api_key_usage_settle(key_id=self.key_id, tool=self.tool, prompt_tokens=self.prompt_tokens,
                                 completion_tokens=self.completion_tokens)


@contextmanager
def api_key_call(*, key: ApiKey, tool: str, refused) -> Iterator[KeyCall]:
    """One call of `tool` on `key`, admitted and then settled (`KeyCall.settling`). `refused(error)` records a
    refusal: the key's spent limits, and the face's own checks before the question service (a ServiceError that
    has no request id yet; the question service records what reaches it). Yields the KeyCall: answer with its
    `headers`, tell it what the call `spent`."""
    try:
        call = api_key_admit_call(key=key, tool=tool)
    except ServiceError as exc:
        refused(exc)
        raise
    try:
        with call.settling():
            yield call
    except ServiceError as exc:
        if not exc.request_id:
            refused(exc)
        raise


def api_key_admit_call(*, key: ApiKey, tool: str) -> KeyCall:
    """Count one call of `tool` on `key`: against its per-minute rate, then its daily quota (both optional).

    Returns the admitted call, with the RateLimit-* headers for the tighter of the two limits; raises 429
    `rate_limited` or
    `quota_exceeded` (with Retry-After) when spent. The rate is a moving window of the last minute: its
    Retry-After and RateLimit-Reset are the seconds until the oldest counted call leaves it. A refused call is
    counted in neither the window nor the day's usage. The day's row is incremented first and the total checked
    after, so concurrent calls never overshoot.
    """
    headers: dict[str, str] = {}
    hit = None
    if key.rate_limit_per_minute:
        hit = _minute_hit(key)
        if not hit.admitted:
            retry_after = max(1, math.ceil(hit.retry_after))
            spent = _limit_headers(key.rate_limit_per_minute, 0, retry_after)
            raise ServiceError("rate_limited", f"This key may make {key.rate_limit_per_minute} calls per minute; "
                               f"try again in {retry_after} s.", status=429,
                               headers={**spent, "Retry-After": str(retry_after)})
        headers = _limit_headers(key.rate_limit_per_minute, key.rate_limit_per_minute - hit.count,
                                 max(1, math.ceil(hit.reset)))
    today = timezone.localdate()
    row, _ = ApiKeyUsage.objects.get_or_create(key=key, day=today, tool=tool)
    ApiKeyUsage.objects.filter(pk=row.pk).update(calls=F("calls") + 1)
    if key.daily_quota:
        used = ApiKeyUsage.objects.filter(key=key, day=today).aggregate(n=Sum("calls"))["n"] or 0
        reset = _seconds_to_midnight()
        if used > key.daily_quota:
            ApiKeyUsage.objects.filter(pk=row.pk).update(calls=F("calls") - 1)
            if hit is not None:
                window_give_back(hit)
            spent = _limit_headers(key.daily_quota, 0, reset)
            raise ServiceError("quota_exceeded", f"This key's daily quota of {key.daily_quota} calls is spent; "
                               "it refills at midnight.", status=429, headers={**spent, "Retry-After": str(reset)})
        remaining = key.daily_quota - used
        if not headers or remaining < int(headers["RateLimit-Remaining"]):
            headers = _limit_headers(key.daily_quota, remaining, reset)
    return KeyCall(key_id=key.pk, tool=tool, day=today, headers=headers, hit=hit)


def api_key_usage_settle(*, key_id: int, tool: str, prompt_tokens: int = 0, completion_tokens: int = 0,
                         failed: bool = False) -> None:
    """Add a finished call's tokens (and failure) to today's usage row of its key and tool."""
    today = timezone.localdate()
    row, _ = ApiKeyUsage.objects.get_or_create(key_id=key_id, day=today, tool=tool)
    ApiKeyUsage.objects.filter(pk=row.pk).update(
        prompt_tokens=F("prompt_tokens") + prompt_tokens, completion_tokens=F("completion_tokens") + completion_tokens,
        failures=F("failures") + int(failed))


def api_key_usage_summary(*, key: ApiKey, days: int = 30) -> dict:
    """What a key's owner may read about it: state, limits, today's calls and per-day, per-tool usage."""
    today = timezone.localdate()
    rows = ApiKeyUsage.objects.filter(key=key, day__gt=today - datetime.timedelta(days=days)).order_by("-day", "tool")
    calls_today = sum(r.calls for r in rows if r.day == today)
    return {
        "key": key.prefix,
        "name": key.name,
        "state": key.state,
        "created_at": key.created_at.isoformat(),
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "daily_quota": key.daily_quota or None,  # null: unlimited (stored as 0)
        "rate_limit_per_minute": key.rate_limit_per_minute or None,
        "today": {"day": today.isoformat(), "calls": calls_today,
                  "remaining": max(0, key.daily_quota - calls_today) if key.daily_quota else None},
        "usage": [{"day": r.day.isoformat(), "tool": r.tool, "calls": r.calls, "failures": r.failures,
                   "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens} for r in rows],
    }
