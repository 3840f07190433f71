"""Fixtures of the apikeys tests: a clean cache (failed attempts and rate windows live there), an owner, and the
fixture corpus built as the default knowledge base `sdk` (the MCP tests)."""

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from rag.tests.conftest import make_built_kb


@pytest.fixture(autouse=True)
def clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user("dev", password="x")


@pytest.fixture
def sdk_default_kb(corpus_copy, settings):
    """The fixture corpus built as `sdk`, the deployment's default knowledge base (a tool call without `kb`)."""
    settings.RAG_DEFAULT_KB = "sdk"
    built = make_built_kb(corpus_copy)
    _ = built.active_version
    return built
