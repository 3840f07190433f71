"""Fixtures of the retrieval API tests: two labelled knowledge bases (`alpha`, English pages with front matter,
and `beta`, Chinese pages), a published retrieval app over both, and a key bound to it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from rag.pipeline import reset_engine
from rag.tests.conftest import engine_settings, make_built_kb  # noqa: F401 - engine_settings: the shared fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def clear_cache():
    """Failed key attempts, rate windows and circuit breakers live in the cache: each test starts clean."""
    cache.clear()
    yield
    cache.clear()


@dataclass
class Setup:
    alpha: object
    beta: object
    app: object
    key: object
    secret: str  # the bound key, as the caller sends it
    unbound_secret: str  # a key bound to no app

    @property
    def headers(self) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.secret}"}


@pytest.fixture
def two_kbs(db, tmp_path, settings):
    """`alpha` and `beta` built from copies of the fixtures, app 1 (published) over both, a key bound to it."""
    from apikeys.services import api_key_issue
    from rag.models import RetrievalApp

    reset_engine()
    kbs = []
    for slug in ("alpha", "beta"):
        folder = tmp_path / slug
        shutil.copytree(FIXTURES / slug, folder)
        kbs.append(make_built_kb(folder, slug=slug))
    kbs[0].base_url = "https://docs.example.com/engine/"
    kbs[0].save(update_fields=["base_url"])
    app = RetrievalApp.objects.create(name="integrator", published=True)
    app.knowledge_bases.set(kbs)
    owner = get_user_model().objects.create_user("integrator", password="x")
    key, secret = api_key_issue(owner=owner, name="platform")
    key.app = app
    key.save(update_fields=["app"])
    _unbound, unbound_secret = api_key_issue(owner=owner, name="mcp only")
    yield Setup(alpha=kbs[0], beta=kbs[1], app=app, key=key, secret=secret, unbound_secret=unbound_secret)
    reset_engine()


def usage_by_tool(key) -> dict[str, tuple[int, int]]:
    """A key's (calls, failures) per tool, summed over days: a call that is admitted before midnight and settled
    after it is still one call."""
    from apikeys.models import ApiKeyUsage

    totals: dict[str, tuple[int, int]] = {}
    for row in ApiKeyUsage.objects.filter(key=key):
        calls, failures = totals.get(row.tool, (0, 0))
        totals[row.tool] = (calls + row.calls, failures + row.failures)
    return totals
