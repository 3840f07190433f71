"""Fixtures of the CG_RAG tests: the knowledge base `sdk` (the fixture corpus) as the default scope, a fresh
retrieval cache, scope state, capacity counters and per-client limits for each test."""

import pytest

from rag.pipeline import reset_engine
from rag.tests.conftest import make_built_kb


@pytest.fixture(autouse=True)
def cgrag_state(settings):
    from django.core.cache import cache

    from cgrag import scopes
    from rag import capacity, retrieval_cache

    settings.RAG_CGRAG = {**settings.RAG_CGRAG, "DEFAULT_SCOPE": "sdk"}
    retrieval_cache.reset()
    capacity.reset()
    scopes.reset()
    cache.clear()  # per-client rate windows and token shares: each test is a fresh client
    yield
    retrieval_cache.reset()
    capacity.reset()
    scopes.reset()
    cache.clear()


@pytest.fixture
def sdk_kb(db, corpus_copy):
    """The knowledge base `sdk` over a copy of the fixture corpus, with one active version; a fresh engine."""
    reset_engine()
    kb = make_built_kb(corpus_copy)
    yield kb
    reset_engine()


@pytest.fixture
def engine_settings(settings):
    """Change settings.RAG_ENGINE for one test (a generation, rerank or embedding model); the engine is rebuilt."""

    def change(**values):
        settings.RAG_ENGINE = {**settings.RAG_ENGINE, **values}
        reset_engine()

    yield change
    reset_engine()


@pytest.fixture
def one_answer_thread(settings):
    """One answer thread in this process (rag.streams), for the tests of streams that wait for it."""
    from rag.streams import answer_streams, reset_answer_streams

    settings.RAG_ANSWER_STREAMS = {"THREADS": 1, "DEADLINE": 60.0}
    reset_answer_streams()
    yield answer_streams()
    reset_answer_streams()
