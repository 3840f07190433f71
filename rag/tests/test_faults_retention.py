"""Issue 16, hardening: retention. Pruning keeps the newest good versions (a candidate that failed its gate takes
no place among them), and always the active version, the one active before it, every version a queued or
running eval run evaluates, and a version a replay (or an eval question) just asked for by name."""

from __future__ import annotations

import json

import pytest

from evaluation.models import EvalRun
from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_create, eval_run_execute
from opsboard.services import replay_request
from rag.models import Channel, IndexVersion
from rag.services.knowledge import index_build, index_version_note
from rag.services.questions import QuestionRequest, question_search

pytestmark = pytest.mark.django_db
Status = IndexVersion.Status


def status_of(version: IndexVersion) -> str:
    version.refresh_from_db(fields=["status"])
    return version.status


def failed_candidate(kb) -> IndexVersion:
    """A candidate built and evaluated, whose gate failed: ready, never activated (as index_build_gated leaves it)."""
    version = index_build(kb, activate=False)
    index_version_note(version, "not activated: class_hit_at_5 fail")
    return version


def golden_set():
    return golden_import(name="keep", kind="retrieval", text=json.dumps(
        {"id": "k-1", "question": "PerspectiveCamera 的 fov", "layer": "plain", "answerable": True,
         "expected_classes": ["PerspectiveCamera"], "expected_members": [], "kb": "sdk", "source": ""}))


def test_retention_keeps_the_last_known_good_version_when_failed_candidates_fill_the_places(built_kb,
                                                                                           engine_settings):
    engine_settings(KEEP_VERSIONS=2)
    known_good = built_kb.active_version
    candidates = [failed_candidate(built_kb) for _ in range(3)]

    index_build(built_kb)  # activated: the known-good version is now the previous active one

    assert status_of(known_good) == Status.READY
    assert [status_of(c) for c in candidates] == [Status.DELETED, Status.DELETED, Status.READY]  # among the newest 2


def test_retention_always_keeps_the_previous_active_version(built_kb, engine_settings):
    engine_settings(KEEP_VERSIONS=1)
    previous = built_kb.active_version

    index_build(built_kb)

    assert status_of(previous) == Status.READY


def test_retention_keeps_every_version_a_queued_or_running_eval_run_evaluates(built_kb, engine_settings):
    engine_settings(KEEP_VERSIONS=1)
    candidate = index_build(built_kb, activate=False)
    queued = eval_run_create(golden_set=golden_set(), kb="sdk", index_version=candidate.name)
    running = index_build(built_kb, activate=False)
    eval_run_create(golden_set=golden_set(), kb="sdk", index_version=running.name)
    EvalRun.objects.filter(index_versions={"sdk": running.name}).update(status=EvalRun.Status.RUNNING)

    index_build(built_kb)
    index_build(built_kb)

    assert (status_of(candidate), status_of(running)) == (Status.READY, Status.READY)
    assert eval_run_execute(queued.pk).status == EvalRun.Status.DONE


def test_retention_keeps_the_version_a_replay_just_asked_for(built_kb, engine_settings):
    engine_settings(KEEP_VERSIONS=1)
    recorded = built_kb.active_version
    asked = question_search(QuestionRequest(question="PerspectiveCamera 的 fov", kb="sdk", channel=Channel.WEB))
    index_build(built_kb)
    replay = replay_request(asked.request_id)

    index_build(built_kb)  # the recorded version is neither active nor the one before now: kept as just replayed

    assert replay["recorded_kept"] and "error" not in replay["runs"]["recorded"]
    assert status_of(recorded) == Status.READY
    assert replay_request(asked.request_id)["recorded_kept"]
