"""End to end: a real Celery worker process on Redis builds and activates a version (slow)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from rag.models import KnowledgeBase
from rag.tests.conftest import make_kb
from rag.tests.live import database_url_of_test_db

REDIS_URL = os.environ.get("RAG_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
WORKERS: list[subprocess.Popen] = []
ROOT = Path(__file__).resolve().parents[2]


def redis_answers() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def reset_pools(app) -> None:
    """Forget the app's broker connection and producer pools, so the next publish uses the current broker_url."""
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def celery_on_redis():
    """Point this process's Celery app at Redis (not eager) and start one worker on a private queue."""
    if not redis_answers():
        if os.environ.get("CI"):
            pytest.fail(f"Redis does not answer at {REDIS_URL}; .ci/run starts it")
        pytest.skip(f"Redis does not answer at {REDIS_URL}")
    from ragsite.celery import app

    queue = f"test-{uuid.uuid4().hex[:8]}"
    saved = {key: app.conf.get(key) for key in ("broker_url", "task_always_eager", "broker_transport_options")}
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False, broker_transport_options={})
    reset_pools(app)  # an earlier test may have opened them on the embedded broker
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ragsite.settings", "RAG_DATA_DIR": str(settings.DATA_DIR),
           "DATABASE_URL": database_url_of_test_db(), "CELERY_BROKER_URL": REDIS_URL}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "ragsite", "worker", "--pool=solo", "-Q", queue,
         "--loglevel=warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    WORKERS.append(worker)  # a test may kill it, as a crash would
    try:
        yield queue
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        with app.pool.acquire(block=True) as connection:  # on Redis, before the embedded broker is back
            connection.default_channel.queue_delete(queue)
        app.conf.update(saved)
        reset_pools(app)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_on_redis_builds_and_activates_a_version(celery_on_redis, corpus_copy):
    from rag.models import Channel
    from rag.services.questions import QuestionRequest, question_search
    from rag.tasks import index_build_task

    kb = make_kb(corpus_copy)

    index_build_task.apply_async(args=[kb.pk], queue=celery_on_redis)

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        kb = KnowledgeBase.objects.select_related("active_version").get(pk=kb.pk)
        if kb.active_version_id:
            break
        time.sleep(0.5)
    assert kb.active_version is not None, "the worker did not activate a version in time"
    assert kb.active_version.status == "ready"
    result = question_search(QuestionRequest(question="PerspectiveCamera 的 fov 默认值", kb=kb.slug,
                                             channel=Channel.CLI)).result
    assert result.version == kb.active_version.name
    assert result.hits and result.hits[0].chunk.class_name == "PerspectiveCamera"
