"""Issue, check, revoke and rotate API keys. A key is `<prefix>_<secret>`: the prefix finds the row, the
SHA-256 of the whole key is compared in constant time, and the key itself is never stored or logged."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from apikeys.models import ApiKey
from rag.errors import ServiceError

PREFIX_ALPHABET = string.ascii_lowercase + string.digits
FAILED_ATTEMPTS_LIMIT = 10  # per client address and window, then refused without looking
FAILED_ATTEMPTS_WINDOW = 300  # seconds
LAST_USED_PRECISION = 60  # seconds: last_used_at is written at most once a minute per key


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _new_key() -> tuple[str, str]:
    prefix = "rk" + "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(10))
    return prefix, f"{prefix}_{secrets.token_urlsafe(32)}"  # 256 bits of secret


def api_key_issue(*, owner, name: str, expires_at=None, daily_quota=None, rate_limit_per_minute=None) -> tuple[ApiKey, str]:
    """Create a key; return the row and the whole key, which is shown this once and never again."""
    if not name or not name.strip():
        raise ServiceError("invalid_api_key_name", "Give the key a name.")
    while True:
        prefix, key = _new_key()
        if not ApiKey.objects.filter(prefix=prefix).exists():
            break
    record = ApiKey.objects.create(prefix=prefix, secret_hash=_hash(key), name=name.strip(), owner=owner,
                                   expires_at=expires_at, daily_quota=daily_quota,
                                   rate_limit_per_minute=rate_limit_per_minute)
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
    return api_key_issue(owner=key.owner, name=key.name, expires_at=key.expires_at, daily_quota=key.daily_quota,
                         rate_limit_per_minute=key.rate_limit_per_minute)


def _failures_key(address: str) -> str:
    return f"apikeys:failures:{address}"


def api_key_authenticate(*, raw: str | None, address: str = "") -> ApiKey:
    """Return the active key for an `Authorization: Bearer` value, or raise `invalid_api_key` (401).

    Repeated failures from one address are refused for a while (`too_many_failed_attempts`, 429)
    before any lookup, so keys cannot be guessed at speed.
    """
    if address and (cache.get(_failures_key(address)) or 0) >= FAILED_ATTEMPTS_LIMIT:
        raise ServiceError("too_many_failed_attempts", "Too many failed attempts; try again later.", status=429)
    record = None
    if raw and "_" in raw:
        prefix = raw.split("_", 1)[0]
        candidate = ApiKey.objects.select_related("owner").filter(prefix=prefix).first()
        expected = candidate.secret_hash if candidate else _hash("absent")  # compare even when absent
        if hmac.compare_digest(expected, _hash(raw)) and candidate is not None:
            record = candidate
    if record is None or record.state != "active":
        if address:
            cache.add(_failures_key(address), 0, FAILED_ATTEMPTS_WINDOW)
            try:
                cache.incr(_failures_key(address))
            except ValueError:
                cache.set(_failures_key(address), 1, FAILED_ATTEMPTS_WINDOW)
        reason = "This API key was revoked." if record and record.revoked_at else (
            "This API key has expired." if record else "Missing or unknown API key.")
        raise ServiceError("invalid_api_key", reason + " Send `Authorization: Bearer <key>`.", status=401)
    now = timezone.now()
    if record.last_used_at is None or (now - record.last_used_at).total_seconds() >= LAST_USED_PRECISION:
        ApiKey.objects.filter(pk=record.pk).update(last_used_at=now)
    return record
