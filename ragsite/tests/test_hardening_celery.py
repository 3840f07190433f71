"""Builds on Celery (issue 28): acknowledged late, given back when their worker dies, never handed to a second
worker while the first still runs, and a redelivered build stands down before a live one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from rag.models import IndexVersion
from rag.services.knowledge import this_builder
from rag.tests.conftest import make_kb

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("RAG_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def redis_answers() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def test_a_build_is_acknowledged_late_and_given_back_when_its_worker_dies():
    from ragsite.celery import app
    from rag.tasks import index_build_task

    assert app.conf.task_acks_late and index_build_task.acks_late
    assert app.conf.task_reject_on_worker_lost and index_build_task.reject_on_worker_lost


def test_redis_hands_a_build_to_another_worker_only_after_the_longest_task_could_have_run(tmp_path):
    if not redis_answers():
        if os.environ.get("CI"):
            pytest.fail(f"Redis does not answer at {REDIS_URL}")
        pytest.skip(f"Redis does not answer at {REDIS_URL}")
    script = ("from ragsite.celery import app; import django; django.setup(); from rag.tasks import index_build_task\n"
              "with app.connection_for_write() as connection:\n"
              "    print(connection.default_channel.visibility_timeout, index_build_task.time_limit)\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_"))},
           "DJANGO_SETTINGS_MODULE": "ragsite.settings", "RAG_DATA_DIR": str(tmp_path), "CELERY_BROKER_URL": REDIS_URL}

    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)

    visibility_timeout, time_limit = (float(value) for value in result.stdout.split())
    assert visibility_timeout > time_limit, "a build still running would be handed to a second worker"


def make_queued_version(kb, **fields) -> IndexVersion:
    return IndexVersion.objects.create(kb=kb, name="queued", model_id="m", **fields)


@pytest.mark.django_db
def test_a_redelivered_build_stands_down_while_the_first_worker_still_beats(corpus_copy):
    from rag.tasks import index_build_task

    kb = make_kb(corpus_copy)
    version = make_queued_version(kb, builder="other-host:pid:[4026531836]:4242", heartbeat_at=timezone.now(),
                                  progress_done=41, progress_total=100)

    index_build_task(kb.pk, version.pk)

    version.refresh_from_db()
    kb.refresh_from_db()
    assert (version.status, version.builder, version.progress_done) == (
        IndexVersion.Status.BUILDING, "other-host:pid:[4026531836]:4242", 41)
    assert kb.active_version is None and kb.versions.count() == 1


@pytest.mark.django_db
def test_a_build_redelivered_after_the_first_finished_stands_down_quietly(corpus_copy):
    from rag.tasks import index_build_task

    kb = make_kb(corpus_copy)
    version = make_queued_version(kb, status=IndexVersion.Status.READY, builder="other-host:pid:[1]:4242")

    index_build_task(kb.pk, version.pk)

    assert kb.versions.count() == 1 and kb.versions.get().status == IndexVersion.Status.READY


@pytest.mark.django_db
def test_a_build_redelivered_after_its_worker_died_builds_anew(corpus_copy):
    from rag.tasks import index_build_task

    kb = make_kb(corpus_copy)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_builder = f"{this_builder().rpartition(':')[0]}:{finished.stdout.strip()}"
    version = make_queued_version(kb, builder=dead_builder, heartbeat_at=timezone.now())

    index_build_task(kb.pk, version.pk)

    kb.refresh_from_db()
    assert kb.active_version is not None and kb.active_version.status == IndexVersion.Status.READY
    assert kb.versions.filter(status=IndexVersion.Status.BUILDING).count() == 0


@pytest.mark.django_db
def test_a_first_delivery_claims_its_queued_version_and_builds_it(corpus_copy):
    from rag.tasks import index_build_task

    kb = make_kb(corpus_copy)
    version = make_queued_version(kb)

    index_build_task(kb.pk, version.pk)

    kb.refresh_from_db()
    assert kb.active_version_id == version.pk
