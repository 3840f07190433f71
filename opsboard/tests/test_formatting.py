"""Numbers on the ops pages: rates as percentages with one decimal, milliseconds as integers, counts and tokens
with thousands separators; never a raw float such as 0.6819999999999999."""

from __future__ import annotations

import datetime
import re

import pytest
from django.core.management import call_command

from opsboard.formatting import count, moment, ms, pct
from opsboard.tests.test_ops import NOW, day, fixture_day, ops_user, record  # noqa: F401  (fixtures)
from rag.models import RequestRecord

pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(NOW, tick=False)]

RAW_FLOAT = re.compile(r"\d\.\d{5,}")  # more decimals than any page shows on purpose (route scores show 4)


def test_the_number_formats():
    assert [pct(0.6819999999999999), pct(0.1), pct(1), pct(None)] == ["68.2 %", "10.0 %", "100.0 %", "—"]
    assert [ms(2499.6), ms(40.0), ms(0.3), ms(0), ms(None), ms(123456.7)] == ["2,500", "40", "<1", "0", "—", "123,457"]
    assert [count(12345), count(0), count(None), count(1234567)] == ["12,345", "0", "—", "1,234,567"]


def test_an_iso_time_is_shown_in_the_site_time_zone(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    assert moment("2026-12-05T12:57:30.123456+00:00") == "2026-12-05 20:57"
    assert [moment(None), moment(""), moment("not a time")] == ["—", "—", "—"]


def test_the_overview_shows_rates_latencies_and_tokens_formatted(client, fixture_day):
    record(50, at=fixture_day + datetime.timedelta(hours=14), latency=61.234567, prompt=12000, completion=345)
    client.force_login(ops_user())

    page = client.get("/ops/?window=7d").content.decode()

    # web: 11 requests, 1 failed (9.1 %), 1 empty, 1 low, 1 degraded, 1 thumbs-down; tokens 350 + 12,345
    assert "9.1 % of requests" in page and "12,695" in page
    assert "‰" not in page and "≤" not in page and not RAW_FLOAT.search(page)


def test_the_trace_list_and_report_show_whole_milliseconds(client, fixture_day, day):
    row = record(51, at=fixture_day + datetime.timedelta(hours=9), latency=1234.5678, prompt=1500, completion=20)
    RequestRecord.objects.filter(pk=row.pk).update(timings={"plan": 0.6819999999999999, "dense": 12.345678})
    call_command("ops_report", "--day", day[0].isoformat())
    client.force_login(ops_user())

    trace = client.get(f"/ops/requests/{row.request_id}").content.decode()
    listing = client.get("/ops/requests").content.decode()
    report = client.get(f"/ops/reports/{day[0].isoformat()}.html").content.decode()

    assert "1,235 ms" in trace and "tokens 1,500 + 20" in trace and "<td>1</td><td>12</td>" in trace
    assert "<td>1,235</td>" in listing and "<td>1,520</td>" in listing
    assert "<td>1,235</td>" in report  # the slowest requests
    for page in (trace, listing, report):
        assert not RAW_FLOAT.search(page) and "≤" not in page


def test_an_alert_message_reads_as_a_percentage(settings):
    from opsboard.models import AlertEvent
    from opsboard.services import alerts_evaluate

    settings.RAG_ALERTS = {**settings.RAG_ALERTS, "WEBHOOK_URL": "", "MIN_REQUESTS": 3, "FAILURE_RATE": 0.2}
    for n in range(3):
        record(60 + n, at=NOW, error="timeout" if n < 2 else "", hits=0 if n < 2 else 3)

    alerts_evaluate()

    assert "failures last" in (message := AlertEvent.objects.get(rule="failure_rate").message)
    assert message.endswith(": 66.7 % (threshold 20.0 %)")
