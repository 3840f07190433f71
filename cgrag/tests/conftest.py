"""Fixtures of the CG_RAG tests: the knowledge base `sdk` (the fixture corpus) as the default scope, a fresh
retrieval cache, scope state, capacity counters and per-client limits for each test."""

import pytest

from rag.pipeline import reset_engine
from rag.tests.conftest import make_built_kb, make_kb


@pytest.fixture(autouse=True)
def cgrag_state(settings):
    from django.core.cache import cache

    from cgrag import scopes
    from infra import capacity
    from rag import retrieval_cache

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
def building_kb(db, corpus_copy):
    """The knowledge base `sdk` during its first build, as rag.services.knowledge.index_build_queue leaves it until
    the worker runs: a version building and none active, so every question to it is 503 `index_building`.
    `finish_build(kb)` runs the build and activates it. (Made here rather than queued: in a test with
    transaction=True a queued build would run at once.)"""
    from rag.models import IndexVersion

    reset_engine()
    kb = make_kb(corpus_copy)
    IndexVersion.objects.create(kb=kb, name="first-build", model_id="building")
    yield kb
    reset_engine()


def finish_build(kb) -> None:
    """The worker's part of a build that `building_kb` started: build into its version and activate it."""
    from rag.models import IndexVersion
    from rag.services.knowledge import index_build

    index_build(kb, version=kb.versions.get(status=IndexVersion.Status.BUILDING))
    kb.refresh_from_db()


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
