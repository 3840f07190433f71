"""What is happening right now, across processes: requests in flight per channel and open MCP sessions.

Each process keeps its own counters and publishes them to the shared Django cache (Redis in production,
a file cache on one machine) under its own key, with a short expiry; readers add up the live entries.
A process that dies simply stops publishing, so its numbers drop out within `TTL` seconds.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from contextlib import contextmanager

from django.core.cache import cache

TTL = 30  # seconds a published snapshot counts; busy processes republish on every change
REGISTRY_KEY = "rag:live:processes"
PROCESS = f"{socket.gethostname()}:{os.getpid()}"

_lock = threading.Lock()
_in_flight: Counter[str] = Counter()
_gauges: dict[str, int] = {}


def _key(process: str) -> str:
    return f"rag:live:{process}"


def publish() -> None:
    """Write this process's counters to the cache and make sure the process is listed."""
    with _lock:
        snapshot = {"in_flight": {k: v for k, v in _in_flight.items() if v}, "gauges": dict(_gauges),
                    "at": time.time()}
    cache.set(_key(PROCESS), snapshot, TTL)
    registry = cache.get(REGISTRY_KEY) or {}
    now = time.time()
    if registry.get(PROCESS, 0) < now - TTL / 2:  # rewrite the list at most a few times per TTL
        registry = {p: at for p, at in registry.items() if at > now - 10 * TTL}
        registry[PROCESS] = now
        cache.set(REGISTRY_KEY, registry, None)


@contextmanager
def in_flight(channel: str):
    """Count one request of `channel` as running for the duration of the block."""
    with _lock:
        _in_flight[channel] += 1
    publish()
    try:
        yield
    finally:
        with _lock:
            _in_flight[channel] -= 1
        publish()


def set_gauge(name: str, value: int) -> None:
    with _lock:
        _gauges[name] = value


def snapshot() -> dict:
    """The sum over live processes: `{"in_flight": {channel: n}, "gauges": {name: n}, "processes": n}`."""
    registry = cache.get(REGISTRY_KEY) or {}
    entries = cache.get_many([_key(p) for p in registry])
    in_flight_total: Counter[str] = Counter()
    gauges: Counter[str] = Counter()
    for entry in entries.values():
        in_flight_total.update(entry["in_flight"])
        gauges.update(entry["gauges"])
    return {"in_flight": dict(in_flight_total), "gauges": dict(gauges), "processes": len(entries)}
