import pytest
from django.core.cache import cache

from rag.pipeline import reset_engine
from rag.tests.conftest import make_built_kb


@pytest.fixture(autouse=True)
def fresh_limits():
    """Per-client counters (infra/limits.py) live in the cache; every test here starts with none counted."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def kb(db, corpus_copy):
    return make_built_kb(corpus_copy)


@pytest.fixture
def with_model(settings, llm_server):
    """Configure the fake chat model for this test; the engine is rebuilt around it."""
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "GENERATION_BASE_URL": llm_server.url,
                           "GENERATION_MODEL": "fake-model", "GENERATION_READ_TIMEOUT": 2, "BREAKER_THRESHOLD": 2}
    cache.clear()
    reset_engine()
    yield llm_server
    reset_engine()
    cache.clear()
