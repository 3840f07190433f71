"""Redis stopped or stalled (issue 16): the cache answers as misses within its 1 s timeouts and then stops asking
for a few seconds; a live site whose Redis never answers keeps serving search and extractive chat on the web
and over MCP."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import requests
from django.contrib.auth import get_user_model

from infra import redis_cache
from infra.redis_cache import ResilientRedisCache
from rag.tests.conftest import make_built_kb


class StalledRedis:
    """A TCP server that accepts connections and never answers (Redis hung, or a dead host behind a proxy)."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.port = self.socket.getsockname()[1]
        self.accepted: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.accepted.append(self.socket.accept()[0])
            except OSError:
                return

    def close(self):
        self.socket.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def stalled_redis():
    server = StalledRedis()
    yield server
    server.close()


def cache_at(url: str) -> ResilientRedisCache:
    return ResilientRedisCache(url, {})


def test_redis_stopped_every_cache_call_answers_as_a_miss():
    cache = cache_at("redis://127.0.0.1:1/0")  # nothing listens there
    started = time.monotonic()

    assert cache.get("k", "default") == "default" and cache.add("k", 1) is False and cache.set("k", 1) is None
    assert cache.get_many(["a", "b"]) == {} and cache.delete("k") is False and cache.has_key("k") is False
    with pytest.raises(ValueError):
        cache.incr("k")
    assert cache.available is False and time.monotonic() - started < 1


def test_redis_stalled_costs_one_timeout_then_the_cache_stops_asking_until_the_outage_window_ends(stalled_redis):
    cache = cache_at(f"redis://127.0.0.1:{stalled_redis.port}/0")
    now = [1000.0]
    cache.clock = lambda: now[0]
    started = time.monotonic()
    assert cache.get("k") is None
    first = time.monotonic() - started
    for _ in range(20):
        cache.set("k", 1)
        cache.get("k")
    rest = time.monotonic() - started - first

    assert 0.9 < first < 3 and rest < 0.1 and len(stalled_redis.accepted) == 1
    now[0] += redis_cache.OUTAGE_SECONDS
    assert cache.available  # the next call tries Redis again
    assert cache.get("k") is None and cache.available is False


def test_a_cache_on_a_live_redis_works_as_django_s(settings):
    cache = cache_at("redis://127.0.0.1:6379/14")
    cache.clear()
    cache.set("k", {"a": 1}, 30)
    assert cache.add("n", 0) is True and cache.incr("n") == 1 and cache.get("k") == {"a": 1}
    assert cache.available and redis_cache.available()  # the test settings' cache is not on Redis: always True
    cache.clear()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_redis_stalled_search_and_extractive_chat_keep_answering_on_the_web_and_over_mcp(stalled_redis, corpus_copy):
    from apikeys.services import api_key_issue
    from apikeys.tests.test_mcp_live import connect
    from rag.tests.live import daphne

    make_built_kb(corpus_copy)
    _, key = api_key_issue(owner=get_user_model().objects.create_user("redis-down"), name="outage")
    redis_url = f"redis://127.0.0.1:{stalled_redis.port}/0"
    with daphne(REDIS_URL=redis_url, RAG_WARM_UP="false") as url:
        timings = {}
        for path, body in (("/api/search", {"question": "Fog 的 near 默认值是多少？"}),
                           ("/api/chat", {"question": "What does Fog.near mean?"})):
            started = time.monotonic()
            response = requests.post(url + path, json=body, timeout=30)
            timings[path] = time.monotonic() - started
            assert response.status_code == 200, response.text
        assert requests.post(url + "/api/chat", json={"question": "Fog near"}, timeout=30).json()["mode"] == "extractive"

        async def mcp_search():
            http, client = connect(url, key)
            async with http, client:
                return await client.call_tool("search_sdk_docs", {"question": "Fog near"})

        started = time.monotonic()
        result = asyncio.run(mcp_search())
        timings["mcp"] = time.monotonic() - started
    assert not result.is_error, result.content
    assert all(seconds < 10 for seconds in timings.values()), timings
