"""GET /readyz: ready when the database, Redis (when configured) and every active index answer; else 503
naming what does not. Liveness stays /healthz."""

from __future__ import annotations

import shutil

import pytest
import requests

from rag.pipeline import get_engine, reset_engine


@pytest.fixture
def fresh_engine():
    reset_engine()
    yield
    reset_engine()


def test_ready_with_a_built_index_and_no_redis(client, built_kb, settings, fresh_engine):
    settings.REDIS_URL = ""

    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"ready": True, "checks": {"database": "ok", "index:sdk": "ok"}}
    assert response["Cache-Control"] == "no-store"


def test_ready_with_the_local_redis(client, built_kb, settings, fresh_engine):
    settings.REDIS_URL = "redis://127.0.0.1:6379/15"

    response = client.get("/readyz")

    assert response.status_code == 200 and response.json()["checks"]["redis"] == "ok"


def test_not_ready_when_redis_does_not_answer(client, built_kb, settings, fresh_engine):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["ready"] is False
    assert response.json()["checks"]["redis"].startswith("unavailable")
    assert response.json()["checks"]["database"] == "ok"


def test_not_ready_when_the_active_index_does_not_open(client, built_kb, settings, fresh_engine):
    settings.REDIS_URL = ""
    shutil.rmtree(get_engine().store.version_dir("sdk", built_kb.active_version.name))

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["checks"]["index:sdk"].startswith("does not open")


@pytest.mark.slow
def test_without_its_database_a_live_process_is_alive_but_not_ready():
    from rag.tests.live import daphne

    with daphne(DATABASE_URL="postgres://postgres@127.0.0.1:9/nowhere", REDIS_URL="", RAG_WARM_UP="false") as url:
        alive = requests.get(url + "/healthz", timeout=10)
        ready = requests.get(url + "/readyz", timeout=10)

    assert alive.status_code == 200 and alive.json()["ok"] is True and "unavailable" in alive.json()["summary"]
    assert ready.status_code == 503
    assert ready.json() == {"ready": False, "checks": {"database": "unavailable: OperationalError"}}
