"""Redis down or stalled, and a full disk, under the limits (issue 28): capacity limiters, per-client limits and
throttles fall back to a limiter in this process instead of failing the request; nothing that spends model tokens
is admitted while the shared counters cannot count; a full disk under the file cache is never an HTML 500."""

from __future__ import annotations

import errno

import pytest
from django.core.cache import cache
from django.core.cache.backends.filebased import FileBasedCache
from django.utils import timezone

from infra import capacity, limits
from infra.capacity import CapacityExceeded, CapacityLimiter, RedisSlots
from infra.errors import ServiceError
from infra.limits import Client
from rag.tests.test_redis_down import stalled_redis  # noqa: F401 - a fixture

CLOSED = "redis://127.0.0.1:1/0"  # nothing listens there
CLIENT = Client("198.51.100.7")
QUESTION = {"question": "PerspectiveCamera 的 far 默认值", "kb": "sdk"}


@pytest.fixture(autouse=True)
def fresh_limiters():
    capacity.reset()
    limits.reset()
    cache.clear()
    yield
    capacity.reset()
    limits.reset()
    cache.clear()


@pytest.fixture
def redis_down(settings):
    settings.REDIS_URL = CLOSED
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "SHARED_BY": "redis"}
    settings.CACHES = {"default": {"BACKEND": "infra.redis_cache.ResilientRedisCache", "LOCATION": CLOSED}}


@pytest.fixture(params=["django.core.cache.backends.filebased.FileBasedCache", "infra.redis_cache.ResilientFileCache"])
def disk_full(request, settings, tmp_path, monkeypatch):
    """The default cache on files, on a disk with no space left: every write raises OSError(ENOSPC)."""
    settings.CACHES = {"default": {"BACKEND": request.param, "LOCATION": str(tmp_path / "cache")}}

    def no_space(self, file, timeout, value):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FileBasedCache, "_write_content", no_space)


def limit(settings, **values) -> None:
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, **values}


# -- Redis down: capacity ------------------------------------------------------------------------------------


def test_with_redis_down_a_capacity_limiter_holds_a_local_slot_and_still_bounds_concurrency():
    limiter = CapacityLimiter(resource="generation", size=1, wait_timeout=0, slots=RedisSlots(CLOSED, "generation", 1))

    with limiter.hold():
        with pytest.raises(CapacityExceeded):
            with limiter.hold():
                pass
    with limiter.hold():  # the local slot came back
        pass

    assert limiter.stats()["active"] == 0


def test_with_redis_down_the_configured_limiters_answer(redis_down):
    with capacity.capacity_limiter("retrieval").hold(), capacity.capacity_limiter("generation").hold():
        stats = capacity.capacity_stats()

    assert stats["retrieval"]["active"] == 1 and stats["generation"]["active"] == 1


def test_with_redis_stalled_capacity_asks_it_once_and_not_again_for_a_while(stalled_redis):  # noqa: F811
    limiter = CapacityLimiter(resource="retrieval", size=2, wait_timeout=0,
                              slots=RedisSlots(f"redis://127.0.0.1:{stalled_redis.port}/0", "retrieval", 2))

    for _ in range(5):
        with limiter.hold():
            pass

    assert len(stalled_redis.accepted) == 1  # one connection, no retries, then the local limiter


@pytest.mark.django_db
def test_with_redis_down_a_cgrag_search_answers(client, redis_down, corpus_copy):
    from rag.tests.conftest import make_built_kb

    make_built_kb(corpus_copy)
    body = {"query": "PerspectiveCamera fov", "scope": "sdk", "topk": 3}

    response = client.post("/cg-rag/retrieve-rerank", body, content_type="application/json")

    assert response.status_code == 200, response.content[:300]


# -- Redis down: counting ------------------------------------------------------------------------------------


def test_with_redis_down_request_limits_count_in_this_process(redis_down, settings):
    limit(settings, SEARCH_PER_MINUTE=2)

    admitted = [limits.rate_limit("search", CLIENT) for _ in range(2)]
    with pytest.raises(ServiceError) as refused:
        limits.rate_limit("search", CLIENT)

    assert admitted == [None, None] and refused.value.code == "rate_limited"
    assert limits.count("limits:test", 60) is None and limits.countable() is False


def test_with_redis_down_a_token_share_is_refused(redis_down, settings):
    with pytest.raises(ServiceError) as refused:
        limits.token_share_reserve(CLIENT, 100, pool_limit=10_000, day=timezone.localdate())

    assert (refused.value.status, refused.value.code) == (503, "limits_unavailable")


# -- a full disk ---------------------------------------------------------------------------------------------


def test_on_a_full_disk_counting_degrades_as_with_the_cache_down(disk_full, settings):
    limit(settings, SEARCH_PER_MINUTE=1)

    counted = limits.count("limits:test", 60)
    limits.rate_limit("search", CLIENT)
    with pytest.raises(ServiceError) as refused:
        limits.rate_limit("search", CLIENT)

    assert counted is None and limits.countable() is False
    assert refused.value.code == "rate_limited"  # counted in this process meanwhile


@pytest.fixture
def resilient_disk_full(settings, tmp_path, monkeypatch):
    """The file cache as the settings should configure it (infra.redis_cache.ResilientFileCache), on a full disk."""
    settings.CACHES = {"default": {"BACKEND": "infra.redis_cache.ResilientFileCache", "LOCATION": str(tmp_path / "c")}}

    def no_space(self, file, timeout, value):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FileBasedCache, "_write_content", no_space)


@pytest.mark.django_db
def test_on_a_full_disk_search_and_chat_answer_json_with_a_request_id(client, resilient_disk_full, corpus_copy):
    from rag.tests.conftest import make_built_kb

    make_built_kb(corpus_copy)

    search = client.post("/api/search", QUESTION, content_type="application/json")
    chat = client.post("/api/chat", QUESTION, content_type="application/json")

    assert (search.status_code, search["Content-Type"]) == (200, "application/json"), search.content[:300]
    assert search.json()["request_id"]
    assert chat.status_code == 200 and chat.json()["request_id"] and chat.json()["mode"] == "extractive"
