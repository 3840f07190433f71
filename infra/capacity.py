"""Capacity limiters (C5): at most N retrievals and N generations at once, machine-wide or cluster-wide.

A face that promises bounded concurrency (CG_RAG; later the retrieval APIs) holds a slot of the limiter of
the resource it is about to use, around the question service's engine or model call (`QuestionRequest
.capacity`). A request that cannot get a slot within the wait timeout is refused with 429
`capacity.exceeded`, whose details name only the limiter (resource, max, wait).

Slots are shared by every process of one machine through `flock` on one small file per slot in
RAG_DATA_DIR (a lock dies with its process, so a killed worker frees its slots), or by every machine through
a Redis sorted set when REDIS_URL is set (each slot has a lease, so a dead process's slot expires). The
active count is read from the shared slots; queued, rejected and peak are this process's counters.

Redis down or stalled (issue 28): a Redis call fails within 1 s (no retries), and for OUTAGE_SECONDS after a
failure the limiter holds slots of a local limiter of the same size in this process instead of asking Redis, so a
request is never failed for Redis's sake and each process still admits at most `size` at once. Slots held in
Redis when it comes back keep their leases; for a moment both may be held (at most twice the size).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol

from django.conf import settings

from infra import redis_cache
from infra.errors import ServiceError

RESOURCES = ("retrieval", "generation")
POLL_SECONDS = (0.005, 0.05)  # first and longest pause between attempts while waiting for a slot


class CapacityExceeded(ServiceError):
    """429 `capacity.exceeded`: no slot within the wait timeout. `details` holds only the limiter's figures."""

    status = 429

    def __init__(self, *, resource: str, max: int, wait_timeout: float):  # noqa: A002 - the seed's field name
        super().__init__("capacity.exceeded", "服务当前请求过多，请稍后重试。",
                         headers={"Retry-After": str(max_wait_seconds(wait_timeout))})
        self.details = {"resource": resource, "max": max, "wait_timeout_seconds": float(wait_timeout)}
        self.category = "capacity"
        self.retryable = True


def max_wait_seconds(wait_timeout: float) -> int:
    return max(1, int(round(wait_timeout)))


class Slots(Protocol):
    def try_acquire(self) -> object | None:
        """Take a free slot and return its handle, or None when all are taken."""

    def release(self, handle: object) -> None: ...

    def active(self) -> int:
        """Slots taken now, by any process."""


@dataclass
class FileSlots:
    """One lock file per slot; a slot is held by an exclusive `flock` on it (released when the process dies)."""

    folder: Path
    resource: str
    size: int

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, n: int) -> Path:
        return self.folder / f"{self.resource}-{n}.lock"

    def try_acquire(self) -> int | None:
        start = int.from_bytes(os.urandom(2), "big") % self.size  # spread first tries over the slots
        for offset in range(self.size):
            descriptor = os.open(self._path((start + offset) % self.size), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            return descriptor
        return None

    def release(self, handle: int) -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)

    def active(self) -> int:
        taken = 0
        for n in range(self.size):
            descriptor = os.open(self._path(n), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(descriptor, fcntl.LOCK_UN)
            except BlockingIOError:
                taken += 1
            finally:
                os.close(descriptor)
        return taken


class LocalSlots:
    """`size` slots of this process only: the fallback of RedisSlots while Redis cannot be reached."""

    def __init__(self, size: int):
        self.size = size
        self._taken = 0
        self._lock = threading.Lock()

    def try_acquire(self) -> LocalSlot | None:
        with self._lock:
            if self._taken >= self.size:
                return None
            self._taken += 1
            return LocalSlot(self)

    def release(self, handle: LocalSlot) -> None:
        with self._lock:
            self._taken -= 1

    def active(self) -> int:
        return self._taken


@dataclass(frozen=True)
class LocalSlot:
    slots: LocalSlots


@dataclass
class RedisSlots:
    """A Redis sorted set of slot tokens scored by their lease's end (a counting semaphore with expiry):
    a token whose rank is below `size` after expired ones are dropped holds a slot. While Redis fails, slots of
    a LocalSlots of the same size (see the module docstring)."""

    url: str
    resource: str
    size: int
    lease_seconds: float = 600.0
    _client: object = field(default=None, init=False, repr=False)
    _local: LocalSlots = field(init=False, repr=False)
    _outage: redis_cache.Outage = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._local = LocalSlots(self.size)
        self._outage = redis_cache.Outage(f"Redis for the {self.resource} capacity limiter")

    @property
    def key(self) -> str:
        return f"rag:capacity:{self.resource}"

    def client(self):
        if self._client is None:
            self._client = redis_cache.redis_client(self.url)
        return self._client

    def _shared(self, call, fallback):
        import redis

        if not self._outage.available:
            return fallback()
        try:
            return call()
        except redis.RedisError as exc:
            self._outage.failed(exc)
            return fallback()

    def try_acquire(self) -> str | LocalSlot | None:
        return self._shared(self._try_acquire, self._local.try_acquire)

    def _try_acquire(self) -> str | None:
        client, token, now = self.client(), uuid.uuid4().hex, time.time()
        with client.pipeline() as pipe:
            pipe.zremrangebyscore(self.key, "-inf", now)
            pipe.zadd(self.key, {token: now + self.lease_seconds})
            pipe.zrank(self.key, token)
            _, _, rank = pipe.execute()
        # Ranks are by lease end, so an older holder always ranks before a newcomer of the same lease.
        if rank is not None and rank < self.size:
            return token
        client.zrem(self.key, token)
        return None

    def release(self, handle: str | LocalSlot) -> None:
        if isinstance(handle, LocalSlot):
            self._local.release(handle)
        else:  # a slot that cannot be given back now frees itself when its lease ends
            self._shared(lambda: self.client().zrem(self.key, handle), lambda: None)

    def active(self) -> int:
        def shared() -> int:
            client = self.client()
            client.zremrangebyscore(self.key, "-inf", time.time())
            return min(int(client.zcard(self.key)), self.size)

        return self._shared(shared, lambda: 0) + self._local.active()


@dataclass
class CapacityLimiter:
    """At most `size` holders of `resource` at once; `hold()` waits up to `wait_timeout` seconds for a slot."""

    resource: str
    size: int
    wait_timeout: float
    slots: Slots
    queued: int = 0
    rejected: int = 0
    peak: int = 0
    _held: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold a slot for the block, or raise CapacityExceeded when none frees up within the wait timeout."""
        handle = self.slots.try_acquire()
        if handle is None:
            handle = self._wait()
        with self._lock:
            self._held += 1
        try:
            self.peak = max(self.peak, self._active_estimate())
            yield
        finally:
            with self._lock:
                self._held -= 1
            self.slots.release(handle)

    def _wait(self) -> object:
        with self._lock:
            self.queued += 1
        try:
            deadline = time.monotonic() + self.wait_timeout
            pause = POLL_SECONDS[0]
            while time.monotonic() < deadline:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                handle = self.slots.try_acquire()
                if handle is not None:
                    return handle
                pause = min(pause * 2, POLL_SECONDS[1])
            with self._lock:
                self.rejected += 1
            raise CapacityExceeded(resource=self.resource, max=self.size, wait_timeout=self.wait_timeout)
        finally:
            with self._lock:
                self.queued -= 1

    def _active_estimate(self) -> int:
        try:
            return self.slots.active()
        except Exception:  # noqa: BLE001 - the peak is a figure for health, never a reason to fail a request
            return self._held

    def stats(self) -> dict:
        """Health's view: `{resource, max, active, queued, rejected, peak, wait_timeout_seconds}`."""
        active = self._active_estimate()
        return {"resource": self.resource, "max": self.size, "active": active, "queued": self.queued,
                "rejected": self.rejected, "peak": max(self.peak, active),
                "wait_timeout_seconds": float(self.wait_timeout)}


_limiters: dict[tuple, CapacityLimiter] = {}
_limiters_lock = threading.Lock()


def capacity_limiter(resource: str) -> CapacityLimiter:
    """This process's limiter of a resource ("retrieval" or "generation"), as RAG_CAPACITY configures it."""
    if resource not in RESOURCES:
        raise ValueError(f"unknown capacity resource {resource!r}")
    config = settings.RAG_CAPACITY
    size = int(config[f"{resource.upper()}_MAX_CONCURRENT"])
    wait = float(config["WAIT_TIMEOUT"])
    redis_url = settings.REDIS_URL if config["SHARED_BY"] == "redis" else ""
    key = (resource, size, wait, redis_url, str(settings.DATA_DIR))
    with _limiters_lock:
        limiter = _limiters.get(key)
        if limiter is None:
            slots = (RedisSlots(redis_url, resource, size) if redis_url
                     else FileSlots(Path(settings.DATA_DIR) / "capacity", resource, size))
            limiter = _limiters[key] = CapacityLimiter(resource=resource, size=size, wait_timeout=wait, slots=slots)
    return limiter


class CapacityGate:
    """The limiters a face asks the question service to hold around its engine and model calls."""

    def hold(self, resource: str):
        return capacity_limiter(resource).hold()


def capacity_stats() -> dict:
    return {resource: capacity_limiter(resource).stats() for resource in RESOURCES}


def reset() -> None:
    """Forget this process's limiters and their counters (tests); slots held elsewhere are untouched."""
    with _limiters_lock:
        _limiters.clear()
