"""Capacity limiters (C5) and the retrieval cache (C4) as components: slots shared between processes through
lock files or Redis, waiting and refusing, and the cache's time to live and size bound on an injected clock."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path

import pytest

from infra.capacity import CapacityExceeded, CapacityLimiter, FileSlots, RedisSlots
from rag.retrieval_cache import RetrievalCache

REDIS_URL = "redis://127.0.0.1:6379/0"


def _hold_in_child(folder: str, ready, release) -> None:
    slots = FileSlots(Path(folder), "generation", 1)
    handle = slots.try_acquire()
    ready.set()
    release.wait(10)
    slots.release(handle)


def test_file_slots_are_shared_between_processes_and_freed_when_one_dies(tmp_path):
    context = multiprocessing.get_context("spawn")
    ready, release = context.Event(), context.Event()
    child = context.Process(target=_hold_in_child, args=(str(tmp_path), ready, release))
    child.start()
    assert ready.wait(20)
    slots = FileSlots(tmp_path, "generation", 1)
    assert slots.try_acquire() is None and slots.active() == 1
    child.kill()  # never releases: the kernel drops its lock
    child.join(10)
    handle = slots.try_acquire()
    assert handle is not None and slots.active() == 1
    slots.release(handle)
    assert slots.active() == 0


def test_a_limiter_refuses_after_its_wait_with_only_its_own_details(tmp_path):
    limiter = CapacityLimiter(resource="retrieval", size=1, wait_timeout=0.05, slots=FileSlots(tmp_path, "retrieval", 1))
    with limiter.hold():
        with pytest.raises(CapacityExceeded) as refused:
            with limiter.hold():
                pass
    assert refused.value.status == 429 and refused.value.code == "capacity.exceeded"
    assert refused.value.details == {"resource": "retrieval", "max": 1, "wait_timeout_seconds": 0.05}
    assert refused.value.headers == {"Retry-After": "1"}
    assert limiter.stats() == {"resource": "retrieval", "max": 1, "active": 0, "queued": 0, "rejected": 1, "peak": 1,
                               "wait_timeout_seconds": 0.05}
    with limiter.hold():  # the slot came back
        assert limiter.stats()["active"] == 1


def _redis_or_skip():
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=1).ping()
    except redis.RedisError:
        pytest.skip("no Redis on 127.0.0.1:6379")


def test_redis_slots_count_across_clients_and_expire_with_their_lease():
    _redis_or_skip()
    resource = f"test-{uuid.uuid4().hex[:8]}"
    first, second = RedisSlots(REDIS_URL, resource, 2), RedisSlots(REDIS_URL, resource, 2)
    a, b = first.try_acquire(), second.try_acquire()
    assert a and b and second.try_acquire() is None and first.active() == 2
    second.release(b)
    assert first.active() == 1 and (c := first.try_acquire()) is not None
    first.release(a)
    first.release(c)
    assert first.active() == 0
    single = RedisSlots(REDIS_URL, resource, 1)
    single.client().zadd(single.key, {"a-dead-process": time.time() - 1})  # its lease ran out: it never released
    handle = single.try_acquire()
    assert handle is not None and single.try_acquire() is None
    single.client().delete(single.key)


def test_the_cache_expires_entries_and_keeps_the_most_recent():
    now = [100.0]
    cache = RetrievalCache(ttl_seconds=10, max_entries=2, clock=lambda: now[0])
    cache.put(("a",), 1)
    cache.put(("b",), 2)
    assert cache.get(("a",)) == 1  # a is now the most recent
    cache.put(("c",), 3)  # b, the least recent, goes
    assert cache.get(("b",)) is None and cache.get(("c",)) == 3
    now[0] += 10.5
    assert cache.get(("a",)) is None and cache.stats() == {"entries": 0, "hits": 2, "misses": 2, "max_entries": 2,
                                                            "ttl_seconds": 10.0}


def test_a_cache_of_size_zero_keeps_nothing():
    cache = RetrievalCache(ttl_seconds=10, max_entries=0)
    cache.put(("a",), 1)
    assert cache.get(("a",)) is None
