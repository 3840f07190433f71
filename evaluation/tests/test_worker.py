"""End to end (slow): eval runs on a real Celery worker over Redis, with live progress; a worker killed mid-run
leaves its run failed (never running), and a retry on a new worker resumes it without double counting."""

from __future__ import annotations

import json
import signal
import time

import pytest

from evaluation.models import EvalRun
from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_create, eval_run_retry, eval_runs_reap
from evaluation.tasks import eval_run_execute_task
from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb
from rag.tests.live import wait_for
from rag.tests.test_tasks import celery_on_redis  # noqa: F401  (the fixture: a worker on a private Redis queue)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUESTIONS = ["PerspectiveCamera 的 fov 默认是多少？", "Raycaster setFromCamera 怎么用", "Clock getDelta 返回什么",
             "WebGLRenderer setSize 的参数", "Texture flipY 是什么", "Fog 的 near 和 far"]
CLASSES = ["PerspectiveCamera", "Raycaster", "Clock", "WebGLRenderer", "Texture", "Fog"]


def golden(count: int) -> str:
    rows = [{"id": f"w-{n:03d}", "question": f"{QUESTIONS[n % 6]} #{n}", "layer": "plain", "answerable": True,
             "expected_classes": [CLASSES[n % 6]], "expected_members": [], "kb": "sdk", "source": ""}
            for n in range(count)]
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)


def test_a_run_on_a_redis_worker_reports_progress_and_finishes(celery_on_redis, corpus_copy):  # noqa: F811
    make_built_kb(corpus_copy)
    run = eval_run_create(golden_set=golden_import(name="worker", kind="retrieval", text=golden(120)))

    eval_run_execute_task.apply_async(args=[run.pk], queue=celery_on_redis)

    seen = set()

    def finished():
        current = EvalRun.objects.get(pk=run.pk)
        seen.add(current.done)
        return current if current.status in ("done", "failed") else None

    done = wait_for(finished)
    assert done.status == "done" and done.done == done.total == 120 and done.verdict == "pass"
    assert any(0 < n < 120 for n in seen)  # progress was visible while it ran
    assert RequestRecord.objects.filter(channel="eval").count() == 120


def test_a_killed_worker_leaves_the_run_failed_and_a_retry_resumes_it(celery_on_redis, corpus_copy,  # noqa: F811
                                                                        settings):
    from rag.tests import test_tasks

    make_built_kb(corpus_copy)
    run = eval_run_create(golden_set=golden_import(name="crash", kind="retrieval", text=golden(300)))
    eval_run_execute_task.apply_async(args=[run.pk], queue=celery_on_redis)
    wait_for(lambda: EvalRun.objects.get(pk=run.pk).done >= 3)

    worker = test_tasks.WORKERS[-1]
    worker.send_signal(signal.SIGKILL)  # no cleanup, no goodbye: as a crash or the OOM killer would
    worker.wait(timeout=10)
    scored_before = EvalRun.objects.get(pk=run.pk).results.count()
    settings.RAG_EVAL_STALE_SECONDS = 1
    time.sleep(1.5)

    assert eval_runs_reap() == 1
    failed = EvalRun.objects.get(pk=run.pk)
    assert failed.status == "failed" and 3 <= scored_before < 300

    from ragsite.celery import app

    app.conf.task_always_eager = True  # the retry runs here, in this process, like a fresh worker would
    eval_run_retry(failed)  # queued on commit (autocommit here), so it has run when this returns

    resumed = EvalRun.objects.get(pk=run.pk)
    assert resumed.status == "done" and resumed.results.count() == 300 and resumed.done == 300
    asked = RequestRecord.objects.filter(channel="eval").count()
    assert asked <= 300 + 1  # at most the question in flight at the kill is asked twice, none is counted twice
