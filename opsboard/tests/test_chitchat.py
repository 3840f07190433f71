"""A chitchat question that got its fixed reply was answered as designed: the ops pages and alerts never count
it as a failure, an empty result or low confidence, nor as an answer that dilutes the low-confidence rate."""

from __future__ import annotations

import datetime

import pytest

from opsboard import selectors
from opsboard.models import AlertEvent
from opsboard.services import alerts_evaluate
from opsboard.tests.test_ops import NOW, day, ops_user, record  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(NOW, tick=False)]


def chitchat(n: int, *, at, kind="chat", channel="web"):
    """A greeting that got the engine's fixed reply (no chunks, confidence none), as the question service records it."""
    return record(n, at=at, kind=kind, channel=channel, hits=0, confidence="none", question="你好",
                  outcome="chitchat")


def test_chitchat_is_no_failure_empty_result_or_low_confidence_on_the_overview(client, day):
    _, start = day
    at = start + datetime.timedelta(hours=9)
    for n in range(4):
        chitchat(n, at=at)
    chitchat(4, at=at, kind="search", channel="mcp")
    record(5, at=at)
    client.force_login(ops_user())

    totals = selectors.channel_totals("web", start, start + datetime.timedelta(days=1))
    top = selectors.top_failing_questions(["web", "mcp"], start, start + datetime.timedelta(days=1))
    page = client.get("/ops/?window=7d").content.decode()

    assert (totals["requests"], totals["failures"], totals["empty"], totals["low"]) == (5, 0, 0, 0)
    assert top == {"web": [], "mcp": []}
    assert "你好" not in page  # not among the top failing questions


def test_chitchat_replies_neither_fire_nor_dilute_the_low_confidence_alert(settings):
    settings.RAG_ALERTS = {**settings.RAG_ALERTS, "WEBHOOK_URL": "", "MIN_REQUESTS": 4, "LOW_CONFIDENCE_RATE": 0.3}
    for n in range(20):
        chitchat(100 + n, at=NOW)

    assert alerts_evaluate() == []  # twenty greetings are no low-confidence answers (and too few answers to tell)

    for n in range(2):
        record(200 + n, at=NOW, confidence="low")
    for n in range(2):
        record(300 + n, at=NOW)

    firing = alerts_evaluate()  # 2 of the 4 answers are low confidence: 50 %, whatever the greetings

    assert [a.rule for a in firing] == ["low_confidence_rate"]
    assert AlertEvent.objects.get(rule="low_confidence_rate").value == pytest.approx(0.5)


def test_the_request_list_shows_a_chitchat_reply_as_no_problem(client, day):
    _, start = day
    chitchat(1, at=start)
    client.force_login(ops_user())

    page = client.get("/ops/requests").content.decode()

    assert '<span class="badge chitchat">chitchat reply</span>' in page
    assert "badge not_scored" not in page and "<td>none</td>" not in page
