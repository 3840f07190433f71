"""Redis, as the Celery broker, stopped or stalled (issue 16): queueing a build fails clearly within seconds
(503 `queue_unavailable`), the waiting row says why instead of staying "building", and what was stored stays."""

from __future__ import annotations

import json
import time

import pytest

from rag.models import IndexVersion, KnowledgeBase
from rag.tests.conftest import make_built_kb
from rag.tests.live import manage
from rag.tests.test_redis_down import StalledRedis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("broker", ["stopped", "stalled"])
def test_redis_down_a_background_reindex_fails_clearly_and_keeps_the_active_version(corpus_copy, broker):
    kb = make_built_kb(corpus_copy)
    active = kb.active_version.name
    stalled = StalledRedis() if broker == "stalled" else None
    url = f"redis://127.0.0.1:{stalled.port if stalled else 1}/0"
    try:
        started = time.monotonic()
        done = manage("rag", "reindex", "--kb", "sdk", "--background", "--json", CELERY_BROKER_URL=url,
                      CELERY_RESULT_BACKEND=url, CELERY_TASK_ALWAYS_EAGER="false")
        took = time.monotonic() - started
    finally:
        if stalled:
            stalled.close()

    body = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 1 and body["code"] == "queue_unavailable", done.stdout + done.stderr
    assert took < 30
    queued = IndexVersion.objects.exclude(name=active).get(kb__slug="sdk")
    assert queued.status == IndexVersion.Status.FAILED and "job queue" in queued.error
    assert KnowledgeBase.objects.get(slug="sdk").active_version.name == active
