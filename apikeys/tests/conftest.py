"""Fixtures of the apikeys tests: a clean cache (failed attempts and rate windows live there) and an owner."""

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache


@pytest.fixture(autouse=True)
def clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user("dev", password="x")
