"""Atomic counting (issue 28, infra/limits.py): every limit counts with one atomic operation and decides from the count
it got, on the file cache shared by a machine's processes, in memory and on Redis; request limits are moving
windows, so a burst across a minute's end is not twice the limit."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import cache

from conftest import local_moment
from infra import limits
from infra.errors import ServiceError
from infra.limits import Client

NOON = local_moment("2026-03-10 12:00")
CLIENT = Client("198.51.100.7")


@pytest.fixture
def file_cache(settings, tmp_path):
    """The default cache as a machine without Redis has it: files shared by every process."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                                   "LOCATION": str(tmp_path / "cache")}}
    yield cache
    cache.clear()


def together(count: int, work) -> list:
    """Run `work()` on `count` threads released at once; return what each returned (or raised)."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(n: int) -> None:
        barrier.wait()
        try:
            results[n] = work()
        except ServiceError as exc:
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def limit(settings, **values) -> None:
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, **values}


def test_concurrent_counts_on_the_file_cache_each_get_their_own_count(file_cache):
    counts = together(40, lambda: limits.count("limits:test:concurrent", 60))

    assert sorted(counts) == list(range(1, 41))


def test_a_file_cache_counter_keeps_the_timeout_it_was_created_with(file_cache, time_machine):
    time_machine.move_to(NOON, tick=False)
    limits.count("login:failures:test", 900)
    limits.count("login:failures:test", 900)
    time_machine.shift(600)  # past Django's default timeout of 300 s, within the counter's 900

    assert limits.count("login:failures:test", 900) == 3


def test_concurrent_requests_of_one_client_pass_at_most_the_limit(file_cache, settings):
    limit(settings, SEARCH_PER_MINUTE=10)

    results = together(40, lambda: limits.rate_limit("search", CLIENT))

    refused = [r for r in results if isinstance(r, ServiceError)]
    assert (len(results) - len(refused), {r.code for r in refused}) == (10, {"rate_limited"})


def test_concurrent_requests_in_memory_pass_at_most_the_limit(settings):
    limit(settings, CHAT_PER_MINUTE=5)
    cache.clear()

    results = together(30, lambda: limits.rate_limit("chat", CLIENT))

    assert sum(not isinstance(r, ServiceError) for r in results) == 5


def test_a_burst_across_a_minute_s_end_is_not_twice_the_limit(file_cache, settings, time_machine):
    limit(settings, SEARCH_PER_MINUTE=3)
    time_machine.move_to(local_moment("2026-03-10 12:00:59"), tick=False)
    before = [limits.rate_limit("search", CLIENT) for _ in range(3)]
    time_machine.shift(2)  # 12:01:01: a new fixed window would start counting from zero

    with pytest.raises(ServiceError) as refused:
        limits.rate_limit("search", CLIENT)

    assert before == [None, None, None]
    assert refused.value.code == "rate_limited" and int(refused.value.headers["Retry-After"]) == 58


def test_a_moving_window_frees_each_request_a_minute_after_it_was_counted(file_cache, settings, time_machine):
    limit(settings, SEARCH_PER_MINUTE=2)
    time_machine.move_to(NOON, tick=False)
    limits.rate_limit("search", CLIENT)
    time_machine.shift(30)
    limits.rate_limit("search", CLIENT)
    time_machine.shift(30)  # the first has left the window, the second has not

    limits.rate_limit("search", CLIENT)
    with pytest.raises(ServiceError) as refused:
        limits.rate_limit("search", CLIENT)

    assert refused.value.headers["Retry-After"] == "30"


def test_a_refused_request_is_not_counted(file_cache, settings, time_machine):
    limit(settings, SEARCH_PER_MINUTE=1)
    time_machine.move_to(NOON, tick=False)
    limits.rate_limit("search", CLIENT)
    for _ in range(5):
        with pytest.raises(ServiceError):
            limits.rate_limit("search", CLIENT)
    time_machine.shift(60)

    assert limits.rate_limit("search", CLIENT) is None


def test_a_request_that_found_the_index_building_gives_its_count_back(file_cache, settings):
    limit(settings, CHAT_PER_MINUTE=1)

    for _ in range(3):
        with pytest.raises(ServiceError), limits.rate_limited("chat", CLIENT):
            raise ServiceError("index_building", "The first index is being built.", status=503)
    with limits.rate_limited("chat", CLIENT):
        pass
    with pytest.raises(ServiceError) as refused, limits.rate_limited("chat", CLIENT):
        pass

    assert refused.value.code == "rate_limited"


# -- on Redis --------------------------------------------------------------------------------------------------


@pytest.fixture
def redis_cache_(settings):
    """The default cache on the machine's Redis (database 13, a prefix of this test's own)."""
    import uuid

    settings.CACHES = {"default": {"BACKEND": "infra.redis_cache.ResilientRedisCache",
                                   "LOCATION": "redis://127.0.0.1:6379/13", "KEY_PREFIX": uuid.uuid4().hex}}
    if not cache.available or cache.get("probe", "absent") != "absent" or not cache.available:
        pytest.skip("no Redis at 127.0.0.1:6379")
    yield cache


def test_on_redis_concurrent_requests_of_one_client_pass_at_most_the_limit(redis_cache_, settings):
    limit(settings, SEARCH_PER_MINUTE=10)

    results = together(40, lambda: limits.rate_limit("search", CLIENT))

    assert sum(not isinstance(r, ServiceError) for r in results) == 10


def test_on_redis_concurrent_counts_each_get_their_own_count_and_the_counter_expires(redis_cache_):
    counts = together(40, lambda: limits.count("login:failures:redis", 900))

    client = redis_cache_._cache.get_client(write=True)
    ttl = client.ttl(redis_cache_.make_and_validate_key("login:failures:redis"))
    assert sorted(counts) == list(range(1, 41)) and 0 < ttl <= 900


def test_on_redis_a_burst_across_a_minute_s_end_is_not_twice_the_limit(redis_cache_, settings, time_machine):
    limit(settings, SEARCH_PER_MINUTE=3)
    time_machine.move_to(local_moment("2026-03-10 12:00:59"), tick=False)
    for _ in range(3):
        limits.rate_limit("search", CLIENT)
    time_machine.shift(2)

    with pytest.raises(ServiceError) as refused:
        limits.rate_limit("search", CLIENT)

    assert int(refused.value.headers["Retry-After"]) == 58


def test_each_token_pool_counts_its_own_shares(settings):
    """A client's web answers and its CG_RAG calls draw on two pools: spending one share leaves the other whole."""
    import datetime

    from infra.errors import ServiceError
    from infra.limits import Client, reset, token_share_reserve

    reset()
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, "TOKEN_SHARE": 0.5}
    client, day = Client("198.51.100.77"), datetime.date(2026, 1, 2)
    token_share_reserve(client, 100, pool_limit=200, day=day, pool="web")  # the web share is spent
    with pytest.raises(ServiceError):
        token_share_reserve(client, 1, pool_limit=200, day=day, pool="web")

    token_share_reserve(client, 100, pool_limit=200, day=day, pool="cgrag")  # the CG_RAG share is whole
