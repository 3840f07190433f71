"""Golden sets and runs on the fixture corpus: import/export and versions, a retrieval run with attribution,
a generation run with and without the judge, cancel, crash and retry, the gated reindex both ways, drafts."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from conftest import local_moment
from evaluation.models import EvalResult, EvalRun, GoldenDraft, GoldenSet
from evaluation.services.golden import (
    draft_add, draft_from_request, golden_export, golden_import, golden_matches, golden_new_version,
)
from evaluation.services.reindex import index_build_gated
from evaluation.services.runs import (
    eval_run_cancel, eval_run_create, eval_run_execute, eval_run_retry, eval_runs_reap,
)
from infra.errors import ServiceError
from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb

pytestmark = pytest.mark.django_db

RETRIEVAL = [
    {"id": "r-1", "question": "PerspectiveCamera 的 fov 默认是多少？", "layer": "plain", "answerable": True,
     "expected_classes": ["PerspectiveCamera"], "expected_members": ["fov"], "kb": "sdk",
     "source": "PerspectiveCamera.md"},
    {"id": "r-2", "question": "怎么让相机围着物体转还带惯性？", "layer": "colloquial", "answerable": True,
     "expected_classes": ["OrbitControls"], "expected_members": [], "kb": "sdk", "source": "OrbitControls.md"},
    {"id": "r-3", "question": "Raycastr setFromCamera 怎么用", "layer": "typo", "answerable": True,
     "expected_classes": ["Raycaster"], "expected_members": ["setFromCamera"], "kb": "sdk", "source": "Raycaster.md"},
    {"id": "r-4", "question": "你好，今天心情不错", "layer": "negative", "answerable": False,
     "expected_classes": [], "expected_members": [], "negative_kind": "chitchat", "kb": "sdk", "source": ""},
    {"id": "r-5", "question": "Clock 的 getDelta 返回什么？", "layer": "member", "answerable": True,
     "expected_classes": ["Texture"], "expected_members": ["flipY"], "kb": "sdk", "source": "Texture.md"},
]
GENERATION = [
    {"id": "g-1", "question": "PerspectiveCamera 的 fov 默认值是多少？", "answerable": True,
     "expected_classes": ["PerspectiveCamera"], "expected_members": ["fov"], "must_mention": ["50"],
     "forbidden": ["默认值为 75"], "reference": "fov 默认 50。", "needs_code": False, "kb": "sdk", "source": ""},
    {"id": "g-2", "question": "你好呀", "answerable": False, "expected_classes": [], "expected_members": [],
     "must_mention": [], "forbidden": [], "reference": "", "needs_code": False, "kb": "sdk", "source": ""},
]


def jsonl(rows) -> str:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"


@pytest.fixture
def kb(corpus_copy):
    return make_built_kb(corpus_copy)


@pytest.fixture
def retrieval_set():
    return golden_import(name="fixture-retrieval", kind="retrieval", text=jsonl(RETRIEVAL))


def test_import_export_round_trip_and_versions(retrieval_set):
    again = golden_import(name="fixture-retrieval", kind="retrieval", text=golden_export(retrieval_set))

    assert (retrieval_set.version, again.version) == (1, 2)
    assert [json.loads(line) for line in golden_export(again).splitlines()] == [
        json.loads(line) for line in golden_export(retrieval_set).splitlines()]
    assert golden_matches(retrieval_set, jsonl(RETRIEVAL))
    assert not golden_matches(retrieval_set, jsonl(RETRIEVAL[:-1]))
    copy = golden_new_version(again)
    assert copy.version == 3 and copy.items.count() == len(RETRIEVAL)


@pytest.mark.parametrize("broken, message", [
    ('{"id": "x"', "line 2: not valid JSON"),
    ('{"id": "x", "question": "q", "layer": "plain", "answerable": "yes", "kb": "sdk"}', "answerable"),
    ('{"id": "x", "question": "q", "layer": "odd", "answerable": true, "expected_classes": ["A"], "kb": "sdk"}',
     "layer"),
    ('{"id": "x", "question": "q", "layer": "negative", "answerable": false, "kb": "sdk"}', "negative_kind"),
])
def test_a_bad_line_refuses_the_whole_file_and_stores_nothing(broken, message):
    with pytest.raises(ServiceError) as refused:
        golden_import(name="bad", kind="retrieval", text=jsonl(RETRIEVAL[:1]) + broken + "\n")

    assert refused.value.code == "invalid_golden_set" and message in refused.value.message
    assert not GoldenSet.objects.filter(name="bad").exists()


def test_a_retrieval_run_scores_records_as_eval_and_attributes_failures(kb, retrieval_set):
    run = eval_run_create(golden_set=retrieval_set)
    run = eval_run_execute(run.pk)

    results = {r.item.item_id: r for r in run.results.select_related("item")}
    assert run.status == "done" and run.done == run.total == 5
    assert run.index_versions == {"sdk": kb.active_version.name} and run.candidate is False
    assert results["r-1"].passed and results["r-4"].passed  # chitchat came back empty
    assert not results["r-5"].passed and results["r-5"].attribution in {"not_retrieved", "plan_error",
                                                                        "outside_window"}
    assert run.counts["answerable"] == 4 and run.metrics["class_hit"] == pytest.approx(
        sum(results[i].scores["class_hit"] for i in ("r-1", "r-2", "r-3", "r-5")) / 4)
    gates = {g["metric"]: g for g in run.gates}
    assert gates["colloquial_class_hit"]["status"] == "skipped" and "needs 5" in gates["colloquial_class_hit"]["note"]
    assert gates["newly_failing_count"]["status"] == "skipped"  # first run: no baseline
    assert RequestRecord.objects.filter(channel="eval").count() == 5
    assert not RequestRecord.objects.filter(channel__in=["web", "mcp"]).exists()
    assert run.report_path.endswith(f"run-{run.pk}.html")
    report = open(run.report_path, encoding="utf-8").read()
    assert "r-5" in report and run.verdict.upper().replace("_", " ") in report.upper()


def test_a_second_run_compares_with_the_first_as_baseline(kb, retrieval_set):
    first = eval_run_execute(eval_run_create(golden_set=retrieval_set).pk)
    second = eval_run_execute(eval_run_create(golden_set=retrieval_set).pk)

    assert second.baseline_id == first.pk
    assert second.baseline_diff == {"newly_failing": [], "newly_passing": []}
    assert {g["metric"]: g["status"] for g in second.gates}["newly_failing_count"] == "pass"


def test_cancel_stops_a_run_between_questions(kb, retrieval_set):
    run = eval_run_create(golden_set=retrieval_set)
    EvalRun.objects.filter(pk=run.pk).update(status="running")
    run.refresh_from_db()
    eval_run_cancel(run)
    EvalRun.objects.filter(pk=run.pk).update(status="queued")  # as if the worker picks it up now

    run = eval_run_execute(run.pk)

    assert run.status == "cancelled" and run.results.count() == 0


CRASH_CHECKED_AT = local_moment("2026-03-10 10:00")


@pytest.mark.time_machine(CRASH_CHECKED_AT, tick=False)
def test_a_crashed_worker_leaves_the_run_failed_and_a_retry_resumes_without_double_counting(
        kb, retrieval_set, settings, django_capture_on_commit_callbacks):
    run = eval_run_create(golden_set=retrieval_set)
    eval_run_execute(run.pk)
    EvalResult.objects.filter(run=run, item__item_id__in=["r-4", "r-5"]).delete()  # the worker died before these
    stale = CRASH_CHECKED_AT - timezone.timedelta(seconds=settings.RAG_EVAL_STALE_SECONDS + 5)
    EvalRun.objects.filter(pk=run.pk).update(status="running", verdict="", heartbeat_at=stale, done=3)

    assert eval_runs_reap() == 1
    run.refresh_from_db()
    assert run.status == "failed" and "retry" in run.error
    assert eval_run_execute(run.pk).status == "failed"  # a redelivered task does not resurrect it

    with django_capture_on_commit_callbacks(execute=True):
        eval_run_retry(run)  # queued after commit; Celery is eager in tests, so it runs now
    run.refresh_from_db()
    assert run.status == "done" and run.results.count() == 5 and run.done == 5
    assert RequestRecord.objects.filter(channel="eval").count() == 5 + 2  # only the two missing were asked again


def test_a_generation_run_without_a_judge_reports_judge_gates_as_not_scored(kb):
    golden_set = golden_import(name="fixture-generation", kind="generation", text=jsonl(GENERATION))

    run = eval_run_execute(eval_run_create(golden_set=golden_set).pk)

    gates = {g["metric"]: g for g in run.gates}
    assert gates["judge_pass"]["status"] == "not_scored" and gates["hallucination_count"]["status"] == "not_scored"
    assert "no judge" in gates["judge_pass"]["note"]
    assert run.verdict in ("not_scored", "fail")  # never "pass" with unscored gates
    results = {r.item.item_id: r for r in run.results.select_related("item")}
    assert results["g-2"].scores["rules"]["negative_refused"] is True
    assert results["g-1"].scores["rules"]["citations_valid"] is True


def test_a_gated_reindex_that_passes_goes_live(kb, corpus_copy):
    passing = [r for r in RETRIEVAL if r["id"] != "r-5"]  # the fixture corpus answers these
    golden_import(name="gate", kind="retrieval", text=jsonl(passing))
    before = kb.active_version.name
    (corpus_copy / "Clock.md").write_text((corpus_copy / "Clock.md").read_text() + "\n\n一个新段落。\n")

    outcome = index_build_gated(kb)

    kb.refresh_from_db()
    assert outcome.activated and outcome.runs[0]["verdict"] == "pass"
    assert EvalRun.objects.get(pk=outcome.runs[0]["id"]).candidate is True
    assert kb.active_version.name == outcome.version.name != before


def test_a_gated_reindex_that_fails_keeps_the_previous_version(kb, corpus_copy):
    golden_import(name="gate", kind="retrieval", text=jsonl(RETRIEVAL))  # r-5 cannot pass: class hit 75% < 90%
    before = kb.active_version.name

    outcome = index_build_gated(kb)

    kb.refresh_from_db()
    assert not outcome.activated and kb.active_version.name == before
    assert "class_hit" in [g["metric"] for g in outcome.failed_gates]
    assert outcome.version.status == "ready" and "not activated" in outcome.version.error


def test_a_thumbs_down_becomes_a_draft_and_then_a_question_of_a_new_version(kb, retrieval_set, client):
    from assistant.services import feedback_submit, web_chat

    answer = web_chat(question="PerspectiveCamera 的 fov 默认值是多少？", kb="sdk")
    feedback_submit(request_id=answer["request_id"], reason="wrong default")

    draft = draft_from_request(request_id=answer["request_id"], reason="wrong default")
    assert draft_from_request(request_id=answer["request_id"]) == draft  # once per request
    assert draft.question.startswith("PerspectiveCamera") and draft.evidence[0]["chunk_id"]
    assert draft.expected_classes == ["PerspectiveCamera"] and draft.channel == "web"
    with pytest.raises(ServiceError):
        draft_add(draft)  # no target set yet
    draft.target_set = retrieval_set
    draft.expected_members = ["fov"]
    draft.save()

    item = draft_add(draft)

    assert item.golden_set.version == 2 and item.golden_set.items.count() == len(RETRIEVAL) + 1
    assert GoldenDraft.objects.get(pk=draft.pk).status == "added"
    assert retrieval_set.items.count() == len(RETRIEVAL)  # the old version is unchanged


def test_the_admin_turns_feedback_into_drafts_in_one_click(kb, client):
    from assistant.models import Feedback
    from assistant.services import feedback_submit, web_chat

    admin = get_user_model().objects.create_superuser("qa-admin", password="pw")
    client.force_login(admin)
    answer = web_chat(question="Raycaster setFromCamera 怎么用？", kb="sdk")
    feedback, _ = feedback_submit(request_id=answer["request_id"], reason="missing example")

    client.post("/admin/assistant/feedback/", {"action": "make_golden_drafts", "_selected_action": [feedback.pk]})

    draft = GoldenDraft.objects.get(request_id=answer["request_id"])
    assert draft.feedback_reason == "missing example" and Feedback.objects.count() == 1
