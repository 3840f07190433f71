"""Read settings from the environment; malformed values raise instead of silently defaulting."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, *, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, *, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true/false/1/0, got {raw!r}")


def _env_number(name: str, default, minimum, kind, what: str):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_int(name: str, *, default: int, minimum: int | None = None) -> int:
    return _env_number(name, default, minimum, int, "an integer")


def env_float(name: str, *, default: float, minimum: float | None = None) -> float:
    return _env_number(name, default, minimum, float, "a number")


def env_list(name: str, *, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, choices: tuple[str, ...], *, default: str) -> str:
    value = os.environ.get(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def env_map(name: str, *, default: dict[str, str]) -> dict[str, str]:
    """`a=x,b=y` as {"a": "x", "b": "y"}; an item without `=` raises."""
    raw = os.environ.get(name)
    if raw is None:
        return dict(default)
    pairs = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(f"{name} must be name=value pairs separated by commas, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def env_secret(name: str) -> str:
    """Return a secret from NAME, or from the file named by NAME_FILE; "" when neither is set."""
    value = os.environ.get(name, "")
    if value:
        return value
    path = os.environ.get(f"{name}_FILE", "")
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE points to an unreadable file") from exc
    return ""


def local_secret_key(path: Path) -> str:
    """Return this machine's secret key, writing a random one (mode 0600) the first time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text(encoding="utf-8").strip()
