import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def fresh_limits():
    """Per-client counters (rag/limits.py) live in the cache; every test here starts with none counted."""
    cache.clear()
    yield
    cache.clear()
