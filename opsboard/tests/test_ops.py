"""The ops site: who may read it, aggregates against numbers worked out by hand, escaping, the trace and the
replay, the daily report of a fixture day, alerts (recorded and sent to a webhook), freshness, query counts."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.utils import timezone

from assistant.models import Feedback
from conftest import JsonHandler, local_moment, serve_on_loopback
from opsboard import selectors
from opsboard.models import AlertEvent, DailyReport
from opsboard.services import alerts_evaluate, daily_report_build
from rag.models import Channel, RequestRecord
from rag.tests.conftest import make_built_kb

# Every test reads the site at one fixed moment, the morning after the fixture day: "yesterday" is that day, its
# hours 9 and 14 fall in the 24-hour window, and windows, rollups and query counts never depend on the wall clock.
DAY = datetime.date(2026, 3, 9)
NOW = local_moment("2026-03-10 08:30")
pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(NOW, tick=False)]

XSS = "<img src=x onerror=alert(1)>"
PAGES = ["/ops/", "/ops/?window=7d", "/ops/eval-traffic", "/ops/requests", "/ops/live", "/ops/live.json",
         "/ops/reports", "/ops/freshness"]


def ops_user(name="oncall", group="ops"):
    user = get_user_model().objects.create_user(name, password="pw")
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def record(n: int, *, at, channel="web", kind="chat", error="", hits=3, confidence="high", degraded=False,
           latency=40.0, prompt=0, completion=0, question=None, key="", thumbs=False, outcome=None) -> RequestRecord:
    """A stored request with the outcome the question service gives such fields (or the one named)."""
    outcome = outcome or ("failed" if error else "empty" if not hits else "degraded" if degraded
                          else "low" if confidence == "low" else "ok")
    row = RequestRecord.objects.create(
        request_id=f"req_{channel}_{n}", channel=channel, kind=kind, kb="sdk", question=question or f"question {n}",
        error_code=error, hit_count=hits, confidence=confidence, degraded=degraded, latency_ms=latency, outcome=outcome,
        prompt_tokens=prompt, completion_tokens=completion, api_key_prefix=key,
        adopted=[{"chunk_id": f"c{i}", "class_name": "Clock", "member": "", "source": "Clock.md", "score": 1.0}
                 for i in range(hits)])
    RequestRecord.objects.filter(pk=row.pk).update(created_at=at)
    if thumbs:
        Feedback.objects.create(request=row, reason="wrong")
    return row


@pytest.fixture
def day():
    """The fixture day (yesterday on the frozen clock), with its start as an aware datetime."""
    return DAY, local_moment(f"{DAY} 00:00")


@pytest.fixture
def fixture_day(day):
    """Ten web requests and three MCP ones on one day, with outcomes chosen so the totals are easy to check."""
    _, start = day
    at = lambda hour: start + datetime.timedelta(hours=hour, minutes=5)  # noqa: E731
    # web, hour 9: 4 requests — ok (15 ms), ok (45 ms, thumbs-down), failed (900 ms), empty (25 ms)
    record(1, at=at(9), latency=15, prompt=100, completion=20)
    record(2, at=at(9), latency=45, prompt=200, completion=30, thumbs=True)
    record(3, at=at(9), latency=900, error="generation_failed", hits=0, confidence="")
    record(4, at=at(9), latency=25, hits=0, confidence="none")
    # web, hour 14: 6 requests — 4 ok at 60 ms, 1 low confidence at 120 ms, 1 degraded at 2500 ms
    for n in range(5, 9):
        record(n, at=at(14), latency=60)
    record(9, at=at(14), latency=120, confidence="low")
    record(10, at=at(14), latency=2500, degraded=True, confidence="medium")
    # mcp: 3 searches, one failed (rate_limited), keyed
    record(11, at=at(10), channel="mcp", kind="search", latency=30, key="rkabc")
    record(12, at=at(10), channel="mcp", kind="search", latency=35, key="rkabc")
    record(13, at=at(11), channel="mcp", kind="search", latency=5, key="rkabc", error="rate_limited", hits=0)
    # eval traffic the same day must never count as user traffic
    record(14, at=at(9), channel="eval", latency=10, error="kb_not_found", hits=0)
    return start


def test_anonymous_staff_without_the_group_and_the_ops_group(client):
    assert client.get("/ops/")["Location"].startswith("/ops/login/?next=/ops/")
    client.force_login(get_user_model().objects.create_user("staff", password="pw", is_staff=True))
    assert client.get("/ops/").status_code == 403
    client.force_login(ops_user())
    assert all(client.get(url).status_code == 200 for url in PAGES)


def test_the_qa_group_alone_cannot_read_the_ops_pages(client):
    client.force_login(ops_user("tester", group="qa"))

    assert client.get("/ops/requests").status_code == 403


def test_channel_totals_match_the_numbers_worked_out_by_hand(fixture_day):
    start, end = fixture_day, fixture_day + datetime.timedelta(days=1)

    web = selectors.channel_totals("web", start, end)
    mcp = selectors.channel_totals("mcp", start, end)

    assert (web["requests"], web["failures"], web["empty"], web["low"], web["degraded"], web["thumbs_down"]) == (
        10, 1, 1, 1, 1, 1)  # empty counts answers without error and without chunks: #4 only
    assert web["tokens"] == 100 + 20 + 200 + 30
    # latencies sorted: 15 25 45 60 60 60 60 120 900 2500 -> the 5th of 10 (p50) is 60, the 95th percentile
    # the 10th: 2500, the slowest (exact: a percentile never reads above the slowest request)
    assert web["p50_ms"] == pytest.approx(60, rel=selectors.RELATIVE_ACCURACY) and web["p95_ms"] == 2500
    assert web["failures_rate"] == pytest.approx(0.1)
    assert (mcp["requests"], mcp["failures"], mcp["empty"]) == (3, 1, 0)


def test_percentiles_are_the_exact_ones_within_one_percent_live_and_rolled_up(day):
    from opsboard.services import rollup_hours

    _, start = day
    # 60 web requests over two hours: 7.5, 15, ..., 450 ms (every 7.5 ms), so the exact nearest-rank percentiles
    # are the 30th (p50: 225 ms) and the 57th (p95: 427.5 ms); they fall inside histogram buckets, not on edges
    for n in range(1, 61):
        record(800 + n, at=start + datetime.timedelta(hours=9 + n % 2, minutes=n % 50), latency=7.5 * n)
    end = start + datetime.timedelta(days=1)

    live_totals = selectors.channel_totals("web", start, end)
    rollup_hours(hours=72, now=NOW)
    rolled = selectors.channel_totals("web", start, end)
    by_day = selectors.channel_series("web", start, end, "day")[0]

    assert live_totals["p50_ms"] == pytest.approx(225, rel=selectors.RELATIVE_ACCURACY)
    assert live_totals["p95_ms"] == pytest.approx(427.5, rel=selectors.RELATIVE_ACCURACY)
    assert (rolled["p50_ms"], rolled["p95_ms"]) == (by_day["p50_ms"], by_day["p95_ms"]) == (
        live_totals["p50_ms"], live_totals["p95_ms"])


def test_a_percentile_never_reads_outside_the_fastest_and_slowest_request(day):
    _, start = day
    for n in range(3):
        record(900 + n, at=start + datetime.timedelta(hours=9), latency=333.0)

    totals = selectors.channel_totals("web", start, start + datetime.timedelta(days=1))

    assert (totals["p50_ms"], totals["p95_ms"]) == (333, 333)


def test_the_hourly_series_puts_each_request_in_its_hour(fixture_day):
    series = selectors.channel_series("web", fixture_day, fixture_day + datetime.timedelta(days=1), "hour")

    by_hour = {timezone.localtime(p["bucket"]).hour: p for p in series}
    assert len(series) == 24 and sum(p["requests"] for p in series) == 10
    assert (by_hour[9]["requests"], by_hour[9]["failures"], by_hour[14]["requests"], by_hour[14]["p95_ms"]) == (
        4, 1, 6, 2500)
    assert by_hour[3]["requests"] == 0 and by_hour[3]["p50_ms"] is None


def test_the_top_failing_questions_come_from_the_channel_only(fixture_day):
    record(20, at=fixture_day + datetime.timedelta(hours=20), question="question 3", error="timeout", hits=0)
    record(21, at=fixture_day + datetime.timedelta(hours=20), question="你好", hits=0, confidence="none",
           outcome="chitchat")  # got its fixed reply: not a failure

    top = selectors.top_failing_questions(["web"], fixture_day, fixture_day + datetime.timedelta(days=1))["web"]

    assert top[0] == {"question": "question 3", "times": 2}
    # thumbs-down (2), failed (3), empty (4), low confidence (9), degraded (10); the MCP failure is not here
    assert {t["question"] for t in top} == {"question 2", "question 3", "question 4", "question 9", "question 10"}


def test_the_request_list_filters_and_pages(client, fixture_day):
    client.force_login(ops_user())

    failed = client.get("/ops/requests?outcome=failed").context["records"]
    keyed = client.get("/ops/requests?key=rkabc&channel=mcp").context["records"]
    text = client.get("/ops/requests?q=question 1").context["records"]
    first = client.get("/ops/requests")

    assert {r.request_id for r in failed} == {"req_web_3", "req_mcp_13", "req_eval_14"}
    assert len(keyed) == 3 and {r.request_id for r in text} == {"req_web_1", "req_web_10", "req_mcp_11",
                                                                 "req_mcp_12", "req_mcp_13", "req_eval_14"}
    assert first.context["next_before"] is None and len(first.context["records"]) == 14


def test_keyset_pagination_continues_where_the_page_ended(client, day):
    _, start = day
    for n in range(60):
        record(100 + n, at=start)
    client.force_login(ops_user())

    first = client.get("/ops/requests")
    second = client.get(f"/ops/requests?before={first.context['next_before']}")

    ids = [r.id for r in first.context["records"]] + [r.id for r in second.context["records"]]
    assert len(first.context["records"]) == 50 and len(second.context["records"]) == 10
    assert len(set(ids)) == 60 and second.context["next_before"] is None


def test_user_text_is_escaped_in_lists_and_traces(client, fixture_day):
    evil = record(30, at=fixture_day, question=XSS, key="rkxss")
    Feedback.objects.create(request=RequestRecord.objects.get(request_id="req_web_5"), reason=XSS)
    client.force_login(ops_user())

    pages = [client.get("/ops/requests").content.decode(), client.get(f"/ops/requests/{evil.request_id}").content.decode(),
             client.get("/ops/requests/req_web_5").content.decode(), client.get("/ops/?window=7d").content.decode()]

    for page in pages:
        assert XSS not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[0] and "&lt;img" in pages[2]


def test_pages_use_a_fixed_number_of_queries(client, fixture_day, django_assert_max_num_queries):
    client.force_login(ops_user())
    client.get("/ops/")  # the first request of a session also loads the user and the session
    for url, most in [("/ops/", 14), ("/ops/requests", 10), ("/ops/requests/req_web_2", 10), ("/ops/live.json", 12),
                      ("/ops/reports", 8)]:
        with django_assert_max_num_queries(most):
            assert client.get(url).status_code == 200
    for n in range(40):  # more rows (inside the 24-hour window too) must not mean more queries
        record(200 + n, at=fixture_day + datetime.timedelta(hours=14), key="rkmany")
    with django_assert_max_num_queries(10):
        client.get("/ops/requests")
    with django_assert_max_num_queries(14):
        client.get("/ops/")


def test_the_trace_shows_plan_routes_evidence_prompt_and_feedback(client, corpus_copy):
    from assistant.services import feedback_submit, web_chat

    make_built_kb(corpus_copy)
    answer = web_chat(question="PerspectiveCamera 的 fov 默认值是多少？", kb="sdk")
    feedback_submit(request_id=answer["request_id"], reason="too short")
    client.force_login(ops_user())

    page = client.get(f"/ops/requests/{answer['request_id']}").content.decode()

    assert "PerspectiveCamera" in page and "too short" in page
    assert "Generation prompt" in page and "[1]" in page
    assert "dense" in page and "bm25" in page  # the routes


def test_replay_asks_again_as_eval_and_compares(client, corpus_copy):
    from assistant.services import web_chat

    make_built_kb(corpus_copy)
    answer = web_chat(question="Raycaster setFromCamera 怎么用？", kb="sdk")
    client.force_login(ops_user())

    response = client.post(f"/ops/requests/{answer['request_id']}/replay")

    assert response.status_code == 200
    same = response.context["same"]
    assert same["recorded"] == same["active"] == {"plan": "same", "evidence": "same", "answer": "same"}
    assert RequestRecord.objects.filter(channel="eval").count() == 2
    assert RequestRecord.objects.filter(channel="web").count() == 1  # the user's record is untouched


def test_the_daily_report_of_a_fixture_day(client, fixture_day, day):
    date, _ = day

    call_command("ops_report", "--day", date.isoformat())

    report = DailyReport.objects.get(day=date)
    channels = report.summary["channels"]
    assert (channels["web"]["requests"], channels["mcp"]["requests"], channels["eval"]["requests"]) == (10, 3, 1)
    assert report.summary["feedback"] == {"web": 1, "mcp": 0}
    assert report.summary["slowest"][0]["request_id"] == "req_web_10"
    assert {f["request_id"] for f in report.summary["failed"]} == {"req_web_3", "req_mcp_13"}  # not eval
    assert "<script" not in report.html and "Ops report" in report.html
    client.force_login(ops_user())
    html = client.get(f"/ops/reports/{date.isoformat()}.html?download=1")
    data = client.get(f"/ops/reports/{date.isoformat()}.json")
    assert html["Content-Disposition"].startswith("attachment") and json.loads(data.content)["day"] == date.isoformat()
    assert client.get("/ops/reports/2001-01-01.json").status_code == 404


def test_the_nightly_job_builds_yesterday(fixture_day, day):
    from opsboard.tasks import daily_report_task

    assert daily_report_task() == day[0].isoformat()
    assert daily_report_build(day[0]).pk == DailyReport.objects.get(day=day[0]).pk  # rebuilt in place


class Webhook(JsonHandler):
    received: list = []

    def do_POST(self):  # noqa: N802
        Webhook.received.append(self.read_json())
        self.send_json(200, {"ok": True})


def test_an_alert_fires_is_recorded_shown_and_sent_then_resolves(client, settings):
    Webhook.received = []
    with serve_on_loopback(Webhook) as url:
        settings.RAG_ALERTS = {**settings.RAG_ALERTS, "WEBHOOK_URL": url, "MIN_REQUESTS": 5, "FAILURE_RATE": 0.2}
        now = NOW
        for n in range(6):
            record(300 + n, at=now, error="timeout" if n < 3 else "", hits=0 if n < 3 else 3)

        firing = alerts_evaluate()
        again = alerts_evaluate()  # still firing: one event, sent once

        assert [a.rule for a in firing] == ["failure_rate"] and len(again) == 1
        event = AlertEvent.objects.get(rule="failure_rate")
        assert event.delivered and event.value == pytest.approx(0.5)
        assert len(Webhook.received) == 1 and Webhook.received[0]["rule"] == "failure_rate"
        client.force_login(ops_user())
        assert "Alert: failure_rate" in client.get("/ops/requests").content.decode()

        RequestRecord.objects.update(error_code="", hit_count=3, outcome="ok")
        assert alerts_evaluate() == []
        assert AlertEvent.objects.get(rule="failure_rate").resolved_at is not None


def test_a_webhook_that_fails_is_recorded_not_raised(settings):
    settings.RAG_ALERTS = {**settings.RAG_ALERTS, "WEBHOOK_URL": "http://127.0.0.1:9/none", "MIN_REQUESTS": 1,
                           "FAILURE_RATE": 0.1}
    record(400, at=NOW, error="timeout", hits=0)

    alerts_evaluate()

    event = AlertEvent.objects.get(rule="failure_rate")
    assert not event.delivered and event.delivery_error


def test_too_few_requests_never_fire_a_rate_alert(settings):
    settings.RAG_ALERTS = {**settings.RAG_ALERTS, "MIN_REQUESTS": 20}
    record(500, at=NOW, error="timeout", hits=0)

    assert alerts_evaluate() == []


def test_freshness_flags_documents_changed_since_the_active_version(client, corpus_copy):
    make_built_kb(corpus_copy)
    (corpus_copy / "Clock.md").write_text((corpus_copy / "Clock.md").read_text() + "\n\n新段落。\n")
    (corpus_copy / "Fog.md").unlink()
    client.force_login(ops_user())

    bases = selectors.freshness()
    page = client.get("/ops/freshness").content.decode()

    states = {d["path"]: d["state"] for d in bases[0]["documents"]}
    assert states["Clock.md"] == "stale" and states["Fog.md"] == "removed" and states["Color.md"] == "fresh"
    assert bases[0]["stale"] == 2 and "2 document(s) changed since" in page


def test_the_live_status_counts_in_flight_and_recent_problems(client, corpus_copy):
    from infra import live

    make_built_kb(corpus_copy)
    now = NOW
    record(600, at=now - datetime.timedelta(minutes=2), error="timeout", hits=0)
    record(601, at=now - datetime.timedelta(minutes=30), latency=9000)
    client.force_login(ops_user())

    with live.in_flight("web"):
        status = client.get("/ops/live.json").json()

    web = next(r for r in status["recent"] if r["channel"] == "web")
    assert status["in_flight"]["web"] >= 1
    assert (web["failed_5"], web["failed_60"], web["slow_5"], web["slow_60"]) == (1, 1, 0, 1)
    assert status["active_versions"][0]["kb"] == "sdk" and status["active_versions"][0]["version"]
    assert status["breaker"] is None  # no generation model in tests


def test_rolled_up_hours_give_the_same_numbers_as_the_live_rows(fixture_day):
    from opsboard.models import HourStat
    from opsboard.services import rollup_hours

    start, end = fixture_day, fixture_day + datetime.timedelta(days=1)
    live_web = selectors.channel_totals("web", start, end)
    live_days = selectors.channel_series("mcp", start, end, "day")

    written = rollup_hours(hours=72, now=NOW)
    Feedback.objects.create(request=RequestRecord.objects.get(request_id="req_web_6"), reason="late")  # after

    assert written == HourStat.objects.count() == 72 * len(Channel)  # every hour and channel, quiet ones too
    assert HourStat.objects.filter(channel="web", requests__gt=0).count() == 2  # hours 9 and 14
    rolled = selectors.channel_totals("web", start, end)
    assert {**rolled, "thumbs_down": rolled["thumbs_down"] - 1, "thumbs_down_rate": None} == {
        **live_web, "thumbs_down_rate": None}  # the late thumbs-down is counted live
    assert selectors.channel_series("mcp", start, end, "day") == live_days
    assert rollup_hours(hours=72, now=NOW) == len(Channel)  # only the latest closed hour is written again, per channel


def test_a_text_search_looks_back_a_week_unless_told_otherwise(client):
    old = NOW - datetime.timedelta(days=20)
    record(700, at=old, question="an old question about fog")
    client.force_login(ops_user())

    recent_only = client.get("/ops/requests?q=about fog").context["records"]
    with_start = client.get(f"/ops/requests?q=about fog&since={(old - datetime.timedelta(days=1)).date()}")

    assert recent_only == [] and [r.request_id for r in with_start.context["records"]] == ["req_web_700"]


def test_freshness_lists_each_sdk_version_with_its_staleness_traffic_and_feedback(client, tmp_path):
    from rag.tests.sdk_fixture import build_sdk

    rows = build_sdk(tmp_path)
    viewer = Path(rows["2.0"].source_dir) / "Viewer.md"
    viewer.write_text(viewer.read_text(encoding="utf-8") + "\n\nA new paragraph.\n", encoding="utf-8")
    for n, (kb, thumbs, error) in enumerate([("fx@2.0", True, ""), ("fx@2.0", False, "timeout"),
                                              ("fx@2.1", False, "")]):
        row = record(n, at=NOW - datetime.timedelta(hours=2), thumbs=thumbs, error=error)
        RequestRecord.objects.filter(pk=row.pk).update(kb=kb)
    client.force_login(ops_user())

    bases = {b["kb"].slug: b for b in selectors.freshness()}
    page = client.get("/ops/freshness").content.decode()

    assert set(bases) == {"fx@1.4", "fx@2.0", "fx@2.1"}  # the SDK itself has no pages of its own
    assert (bases["fx@2.0"]["stale"], bases["fx@2.1"]["stale"]) == (1, 0)
    assert bases["fx@2.0"]["traffic"] == {"kb": "fx@2.0", "requests": 2, "failures": 1, "thumbs_down": 1}
    assert bases["fx@1.4"]["traffic"]["requests"] == 0 and bases["fx@1.4"]["evaluated"] is None
    assert "SDK fx, version 2.0" in page and "2 request(s), 1 failed, 1 thumbs-down" in page


def test_a_replay_asks_the_sdk_version_the_request_read(tmp_path):
    from opsboard.services import replay_request
    from rag.services import QuestionRequest, question_search
    from rag.tests.sdk_fixture import build_sdk

    rows = build_sdk(tmp_path)
    asked = question_search(QuestionRequest(question="Viewer setSize", kb="fx", sdk_version="2.0", channel=Channel.WEB))

    replay = replay_request(asked.request_id)

    index = rows["2.0"].active_version.name
    assert replay["record"].kb == "fx@2.0" and replay["active_version"] == index
    assert replay["runs"]["recorded"]["version"] == index
    assert replay["same"]["recorded"]["evidence"] == "same" and replay["same"]["active"]["evidence"] == "same"
