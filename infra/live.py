"""What is happening right now, across processes: requests in flight per channel and open MCP sessions.

Each process keeps its own counters and publishes them to the shared Django cache (Redis in production,
a file cache on one machine) under its own key, with a short expiry; readers add up the live entries.
A process that dies simply stops publishing, so its numbers drop out within `TTL` seconds.

A process is listed from the first request it serves (a question through `in_flight`, or any HTTP request:
the ops page counts the process that serves it) until it exits: while it lives it republishes every
`HEARTBEAT` seconds, even idle, and on exit it withdraws its entry. A forked child (a Celery worker's pool)
is a process of its own, with its own key.

A request that starts is published at once; one that ends is published within `LINGER` seconds, or
sooner by the next start (or a read of this process's snapshot, or the process's exit). A start that
leaves the counters as they were last published (the next question of a `rag search -` batch) writes
nothing while that publication is fresh, so a run of short requests costs no cache write per request.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
from collections import Counter
from contextlib import contextmanager

from django.core.cache import cache
from django.core.signals import request_started

TTL = 30  # seconds a published snapshot counts; a busy process republishes on changes and every TTL/2
HEARTBEAT = TTL / 3  # seconds between two publications of a listed process, idle or not (well within TTL)
LINGER = 0.05  # seconds the end of a request may wait to be published
REGISTRY_KEY = "rag:live:processes"
PROCESS = f"{socket.gethostname()}:{os.getpid()}"

_lock = threading.Lock()
_publishing = threading.Lock()  # one write at a time, so an older snapshot never overwrites a newer one
_in_flight: Counter[str] = Counter()
_gauges: dict[str, int] = {}
_stale = False  # the counters changed since the last publish (a request ended)
_published: tuple[dict, float] | None = None  # the counters this process last wrote, and when
_ended = threading.Event()
_flusher: threading.Thread | None = None
_withdrawn = False  # the process is exiting: publish nothing more


def _key(process: str) -> str:
    return f"rag:live:{process}"


def publish(*, if_changed: bool = False) -> None:
    """Write this process's counters to the cache and make sure the process is listed (and stays listed: the
    heartbeat starts); with `if_changed`, not when the cache holds these very counters, written less than
    TTL/2 ago."""
    global _stale, _published
    _ensure_flusher()
    with _publishing:
        if _withdrawn:
            return
        with _lock:
            counters = {"in_flight": {k: v for k, v in _in_flight.items() if v}, "gauges": dict(_gauges)}
            _stale = False
        now = time.time()
        if if_changed and _published is not None and _published[0] == counters and now - _published[1] < TTL / 2:
            return
        cache.set(_key(PROCESS), {**counters, "at": now}, TTL)
        _published = (counters, now)
        registry = cache.get(REGISTRY_KEY) or {}
        if registry.get(PROCESS, 0) < now - TTL / 2:  # rewrite the list at most a few times per TTL
            registry = {p: at for p, at in registry.items() if at > now - 10 * TTL}
            registry[PROCESS] = now
            cache.set(REGISTRY_KEY, registry, None)


def flush() -> None:
    """Publish now if a request ended since the last publish."""
    if _stale:
        publish()


def _ensure_flusher() -> None:
    """Start the thread that publishes ends and heartbeats: on first use, or in a forked child."""
    global _flusher
    with _lock:
        if _flusher is None or not _flusher.is_alive():
            _flusher = threading.Thread(target=_flush_loop, name="rag-live", daemon=True)
            _flusher.start()


def _publish_soon() -> None:
    """Publish within LINGER seconds, unless something publishes first."""
    global _stale
    with _lock:
        _stale = True
    _ensure_flusher()
    _ended.set()


def _flush_loop() -> None:
    pause = threading.Event()  # waits on the monotonic clock, whatever the wall clock does
    while True:
        if _ended.wait(HEARTBEAT):
            _ended.clear()
            pause.wait(LINGER)
            flush()
        else:  # idle: republish before the entry expires, so a serving process is never counted out
            publish(if_changed=True)


def _withdraw() -> None:
    """At exit: drop this process's entry at once rather than after TTL (it serves nothing any more)."""
    global _withdrawn
    with _publishing:
        _withdrawn = True
        if _published is not None:
            cache.delete(_key(PROCESS))


def _forked() -> None:
    """In a forked child: a process of its own, with nothing in flight and nothing published yet."""
    global PROCESS, _published, _stale, _flusher, _lock, _publishing
    PROCESS = f"{socket.gethostname()}:{os.getpid()}"
    _lock, _publishing = threading.Lock(), threading.Lock()  # a lock held by another thread at the fork stays held
    _in_flight.clear()
    _published, _stale, _flusher = None, False, None


def _serving(**kwargs) -> None:
    """An HTTP request started: this process serves, so it is listed (no cache write while it is fresh)."""
    publish(if_changed=True)


atexit.register(_withdraw)
os.register_at_fork(after_in_child=_forked)
request_started.connect(_serving, dispatch_uid="infra.live.serving")


@contextmanager
def in_flight(channel: str):
    """Count one request of `channel` as running for the duration of the block."""
    with _lock:
        _in_flight[channel] += 1
    publish(if_changed=True)
    try:
        yield
    finally:
        with _lock:
            _in_flight[channel] -= 1
        _publish_soon()


def set_gauge(name: str, value: int) -> None:
    with _lock:
        _gauges[name] = value


def snapshot() -> dict:
    """The sum over live processes: `{"in_flight": {channel: n}, "gauges": {name: n}, "processes": n}`."""
    flush()  # this process's own numbers as they are now
    registry = cache.get(REGISTRY_KEY) or {}
    entries = cache.get_many([_key(p) for p in registry])
    in_flight_total: Counter[str] = Counter()
    gauges: Counter[str] = Counter()
    for entry in entries.values():
        in_flight_total.update(entry["in_flight"])
        gauges.update(entry["gauges"])
    return {"in_flight": dict(in_flight_total), "gauges": dict(gauges), "processes": len(entries)}
