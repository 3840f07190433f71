"""Issue 16, hardening: on SQLite, a write that reads first (activating a version, launching an eval run) while
other connections keep inserting request records waits its turn instead of failing with "database is locked".
Real threads, each with its own connection to the test database file."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections

from evaluation.models import EvalRun
from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_start
from rag.models import RequestRecord
from rag.services.knowledge import index_activate, index_build
from rag.services.records import new_request_id, request_record_write
from rag.services.questions import Caller
from rag.tests.conftest import make_built_kb

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's locking")]
WRITERS = 3


class RecordWriters:
    """Threads inserting request records one after another (autocommit), as steady traffic does."""

    def __init__(self, count: int = WRITERS):
        self.stop = threading.Event()
        self.errors: list[Exception] = []
        self.written = 0
        self.threads = [threading.Thread(target=self.write, daemon=True) for _ in range(count)]

    def write(self) -> None:
        try:
            while not self.stop.is_set():
                request_record_write(request_id=new_request_id(), channel="web", kind="search", question="fov",
                                     kb="sdk", caller=Caller())
                self.written += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
        finally:
            connections.close_all()

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def test_sqlite_activation_under_steady_request_record_inserts_never_fails_with_database_is_locked(corpus_copy):
    kb = make_built_kb(corpus_copy)
    versions = [kb.active_version, index_build(kb, activate=False)]

    with RecordWriters() as writers:
        for round_ in range(40):
            index_activate(versions[round_ % 2])

    assert not writers.errors and writers.written > 0
    kb.refresh_from_db()
    assert kb.active_version == versions[1]
    assert RequestRecord.objects.count() == writers.written


def test_sqlite_eval_launches_under_steady_request_record_inserts_never_fail_with_database_is_locked(
        corpus_copy, monkeypatch):
    from evaluation import tasks

    make_built_kb(corpus_copy)
    golden_set = golden_import(name="locks", kind="retrieval", text=json.dumps(
        {"id": "l-1", "question": "PerspectiveCamera fov", "layer": "plain", "answerable": True,
         "expected_classes": ["PerspectiveCamera"], "expected_members": [], "kb": "sdk", "source": ""}))
    monkeypatch.setattr(tasks.eval_run_execute_task, "delay", lambda run_id: None)  # launching is what is tested

    with RecordWriters() as writers:
        for _ in range(40):
            eval_run_start(golden_set=golden_set)

    assert not writers.errors and writers.written > 0
    assert EvalRun.objects.filter(status="queued").count() == 40
