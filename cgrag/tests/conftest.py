"""Fixtures of the CG_RAG tests: the knowledge base `sdk` (the fixture corpus) as the default scope, a fresh
retrieval cache, scope state and capacity counters for each test."""

import pytest

from rag.pipeline import reset_engine
from rag.tests.conftest import make_built_kb


@pytest.fixture(autouse=True)
def cgrag_state(settings):
    from cgrag import scopes
    from rag import capacity, retrieval_cache

    settings.RAG_CGRAG = {**settings.RAG_CGRAG, "DEFAULT_SCOPE": "sdk"}
    retrieval_cache.reset()
    capacity.reset()
    scopes.reset()
    yield
    retrieval_cache.reset()
    capacity.reset()
    scopes.reset()


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
