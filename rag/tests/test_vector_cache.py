"""Query vectors shared through Redis: a question one process embedded is not embedded again by another; Redis
down is a miss, never a failure. The hit rate on a replayed log is what repeats across processes."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from conftest import CountingEmbedder
from rag.engine.embed import QueryVectorCache
from rag.vector_cache import PREFIX, RedisVectors

URL = "redis://127.0.0.1:6379/12"


@pytest.fixture
def shared():
    client = redis.Redis.from_url(URL)
    for key in client.scan_iter(PREFIX + "*"):
        client.delete(key)
    yield RedisVectors(URL)
    for key in client.scan_iter(PREFIX + "*"):
        client.delete(key)


def test_a_second_process_reuses_the_first_ones_vector(real_embedder, shared):
    first, second = CountingEmbedder(real_embedder), CountingEmbedder(real_embedder)
    one, two = QueryVectorCache(first, shared=shared), QueryVectorCache(second, shared=shared)

    vector, cached = one.embed_query("Fog 的 near 默认值")
    again, shared_hit = two.embed_query("Fog 的 near 默认值")

    assert (cached, shared_hit) == (False, True)
    assert len(first.query_calls) == 1 and second.query_calls == []
    assert np.array_equal(vector, again) and again.dtype == np.float32
    assert (two.shared_hits, two.misses) == (1, 1)


def test_redis_down_is_a_miss_and_the_question_is_embedded(real_embedder, caplog):
    embedder = CountingEmbedder(real_embedder)
    cache = QueryVectorCache(embedder, shared=RedisVectors("redis://127.0.0.1:1/0"))

    vector, cached = cache.embed_query("Fog 的 near 默认值")
    cache.embed_query("Fog 的 far 默认值")

    assert cached is False and vector.shape == (real_embedder.dimension,)
    assert len(embedder.query_calls) == 2
    assert sum("shared query vector cache unavailable" in r.message for r in caplog.records) == 1  # said once


def test_the_hit_rate_on_a_replayed_log_is_the_share_of_repeats_across_processes(real_embedder, shared):
    log = ["怎么重建索引？", "How do I switch to PostgreSQL?", "怎么重建索引？", "什么是 RRF 融合？",
           "How do I switch to PostgreSQL?", "怎么重建索引？"]
    embedders = [CountingEmbedder(real_embedder), CountingEmbedder(real_embedder)]
    processes = [QueryVectorCache(e, shared=shared, max_entries=0) for e in embedders]  # no local reuse at all

    for n, question in enumerate(log):
        processes[n % 2].embed_query(question)

    embedded = sum(len(e.query_calls) for e in embedders)
    assert embedded == len(set(log))  # each distinct question once for the whole deployment
    assert sum(p.shared_hits for p in processes) / len(log) == pytest.approx(3 / 6)
