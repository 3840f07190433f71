"""The eval center on the ops site: who may read and who may launch, launching and watching a run, its report
(inline and as a download), comparing two runs, escaping, and the command-line entries (`eval`, `rag reindex --gate`)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.utils import timezone

from evaluation.models import EvalRun
from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_create, eval_run_execute
from evaluation.tests.test_runs import CRASH_CHECKED_AT, RETRIEVAL, jsonl
from rag.tests.conftest import make_built_kb

pytestmark = pytest.mark.django_db

XSS = "<script>alert('x')</script>"


def user_in(group: str | None, name: str, **extra):
    user = get_user_model().objects.create_user(name, password="pw", **extra)
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@pytest.fixture
def kb(corpus_copy):
    return make_built_kb(corpus_copy)


@pytest.fixture
def finished_run(kb):
    rows = [dict(RETRIEVAL[0], question=RETRIEVAL[0]["question"] + XSS), *RETRIEVAL[1:]]
    golden_set = golden_import(name="center" + XSS, kind="retrieval", text=jsonl(rows))
    return eval_run_execute(eval_run_create(golden_set=golden_set).pk)


def test_anonymous_users_are_sent_to_sign_in(client):
    response = client.get("/ops/eval/")

    assert response.status_code == 302 and response["Location"].startswith("/ops/login/?next=/ops/eval/")


def test_a_group_member_without_staff_status_signs_in_on_the_ops_login(client):
    user_in("ops", "oncall")

    response = client.post("/ops/login/", {"username": "oncall", "password": "pw", "next": "/ops/eval/"})

    assert response.status_code == 302 and response["Location"] == "/ops/eval/"
    assert client.get("/ops/eval/").status_code == 200


def test_staff_outside_the_qa_and_ops_groups_are_refused(client):
    client.force_login(user_in(None, "staff", is_staff=True))

    assert client.get("/ops/eval/").status_code == 403


def test_the_ops_group_reads_but_may_not_launch(client, finished_run):
    client.force_login(user_in("ops", "oncall"))

    page = client.get("/ops/eval/")
    launch = client.post("/ops/eval/runs", {"golden_set": finished_run.golden_set_id})
    cancel = client.post(f"/ops/eval/runs/{finished_run.pk}/retry")

    assert page.status_code == 200 and "Launch a run" not in page.content.decode()
    assert launch.status_code == 403 and cancel.status_code == 403
    assert EvalRun.objects.count() == 1


def test_the_qa_group_launches_a_run_and_watches_it(client, kb, finished_run, django_capture_on_commit_callbacks):
    client.force_login(user_in("qa", "tester"))

    with django_capture_on_commit_callbacks(execute=True):  # the Celery task is queued on commit (eager here)
        response = client.post("/ops/eval/runs", {"golden_set": finished_run.golden_set_id, "kb": "sdk"})

    run = EvalRun.objects.exclude(pk=finished_run.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/ops/eval/runs/{run.pk}"
    progress = client.get(f"/ops/eval/runs/{run.pk}/progress").json()
    assert progress["status"] == "done" and progress["done"] == progress["total"] == len(RETRIEVAL)
    assert run.started_by.username == "tester" and run.baseline_id == finished_run.pk
    page = client.get(f"/ops/eval/runs/{run.pk}").content.decode()
    assert "Gates" in page and "compare with baseline" in page


def test_a_bad_launch_says_why_and_creates_nothing(client, finished_run):
    client.force_login(user_in("qa", "tester"))

    response = client.post("/ops/eval/runs", {"golden_set": finished_run.golden_set_id, "kb": "sdk",
                                              "index_version": "no-such-version"}, follow=True)

    assert "is not ready" in response.content.decode()
    assert EvalRun.objects.count() == 1


def test_the_report_opens_inline_and_downloads_and_escapes_questions(client, finished_run):
    client.force_login(user_in("ops", "oncall"))

    inline = client.get(f"/ops/eval/runs/{finished_run.pk}/report")
    download = client.get(f"/ops/eval/runs/{finished_run.pk}/report?download=1")

    body = b"".join(inline.streaming_content).decode()
    assert inline.status_code == 200 and "attachment" not in inline.get("Content-Disposition", "")
    assert download["Content-Disposition"].startswith("attachment") and "eval-run-" in download["Content-Disposition"]
    assert XSS not in body and "&lt;script&gt;" in body


def test_lists_and_pages_escape_what_users_wrote(client, finished_run):
    client.force_login(user_in("qa", "tester"))

    pages = [client.get("/ops/eval/").content.decode(), client.get(f"/ops/eval/runs/{finished_run.pk}").content.decode()]

    for page in pages:
        assert XSS not in page and "&lt;script&gt;" in page


def test_two_runs_are_compared(client, finished_run):
    second = eval_run_execute(eval_run_create(golden_set=finished_run.golden_set).pk)
    client.force_login(user_in("ops", "oncall"))

    response = client.get(f"/ops/eval/compare?a={finished_run.pk}&b={second.pk}")
    bad = client.get("/ops/eval/compare?a=x&b=2")

    assert response.status_code == 200 and f"#{second.pk}" in response.content.decode()
    assert bad.status_code == 400


def test_the_eval_command_imports_runs_and_exports(tmp_path, kb, capsys):
    source = tmp_path / "golden.jsonl"
    source.write_text(jsonl([r for r in RETRIEVAL if r["id"] != "r-5"]), encoding="utf-8")

    call_command("eval", "import", str(source), "--name", "cli", "--kind", "retrieval")
    call_command("eval", "run", "--name", "cli", "--json")
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    call_command("eval", "export", "--name", "cli")
    exported = capsys.readouterr().out

    assert printed[0]["verdict"] == "pass" and printed[0]["report"].endswith(".html")
    assert [json.loads(line)["id"] for line in exported.splitlines()] == ["r-1", "r-2", "r-3", "r-4"]


def test_rag_reindex_gate_fails_with_exit_code_1_and_keeps_the_active_version(kb, capsys):
    golden_import(name="gate", kind="retrieval", text=jsonl(RETRIEVAL))  # r-5 fails: class hit 75%
    before = kb.active_version.name

    with pytest.raises(SystemExit) as exited:
        call_command("rag", "reindex", "--kb", "sdk", "--gate", "--json")

    payload = json.loads(capsys.readouterr().out)
    kb.refresh_from_db()
    assert exited.value.code == 1 and payload["ok"] is False and payload["code"] == "gate_failed"
    assert payload["activated"] is False and kb.active_version.name == before
    assert any(g["metric"] == "class_hit" for g in payload["gate"]["failed_gates"])


def test_qa_starts_a_gated_reindex_from_the_center_and_a_failing_candidate_stays_inactive(
        client, kb, django_capture_on_commit_callbacks):
    golden_import(name="gate", kind="retrieval", text=jsonl(RETRIEVAL))  # r-5 fails: class hit 75%
    before = kb.active_version.name
    client.force_login(user_in("qa", "tester"))

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/ops/eval/gated-reindex", {"kb": "sdk"})

    kb.refresh_from_db()
    assert response.status_code == 302 and response["Location"] == "/ops/eval/"
    assert "A gated reindex of sdk is queued" in client.get("/ops/eval/").content.decode()
    assert kb.active_version.name == before
    runs = list(EvalRun.objects.order_by("pk"))
    assert [(r.candidate, r.verdict) for r in runs] == [(False, "fail"), (True, "fail")]  # baseline, then candidate
    assert runs[1].baseline_id == runs[0].pk


def test_the_center_shows_no_message_a_link_wrote(client, kb):
    """A crafted link (`?error=…`) must not put the attacker's words on the QA page: messages come from the session."""
    client.force_login(user_in("qa", "tester"))

    page = client.get("/ops/eval/", {"error": "Your session expired: sign in at evil.example", "notice": "Call 555"})

    assert page.status_code == 200
    assert "evil.example" not in page.content.decode() and "Call 555" not in page.content.decode()


def test_a_launch_error_is_shown_once_on_the_center(client, kb):
    client.force_login(user_in("qa", "tester"))

    response = client.post("/ops/eval/runs", {"golden_set": "999999"})

    assert response.status_code == 302 and response["Location"] == "/ops/eval/"
    assert "Choose a golden set." in client.get("/ops/eval/").content.decode()
    assert "Choose a golden set." not in client.get("/ops/eval/").content.decode()  # shown once


@pytest.mark.time_machine(CRASH_CHECKED_AT, tick=False)
def test_opening_the_center_or_a_run_writes_nothing_and_shows_a_stalled_run_as_such(client, kb, finished_run, settings):
    client.force_login(user_in("ops", "oncall"))
    stale = CRASH_CHECKED_AT - timezone.timedelta(seconds=settings.RAG_EVAL_STALE_SECONDS + 5)
    EvalRun.objects.filter(pk=finished_run.pk).update(status="running", heartbeat_at=stale)

    center = client.get("/ops/eval/").content.decode()
    detail = client.get(f"/ops/eval/runs/{finished_run.pk}").content.decode()

    assert EvalRun.objects.get(pk=finished_run.pk).status == "running"  # the reap is beat's, never a page's
    assert "stalled" in center and "stalled: its worker stopped reporting progress" in detail
