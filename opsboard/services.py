"""What the ops jobs and the replay button do: replay a request as eval traffic, build the daily report,
evaluate alert rules. (The pages only read; replaying writes eval records, never user ones.)"""

from __future__ import annotations

import datetime
import json
import logging

from django.conf import settings
from django.db.models import Count, Q
from django.template.loader import render_to_string
from django.utils import timezone

from infra.errors import ServiceError
from opsboard import selectors
from opsboard.formatting import count, ms, pct
from opsboard.models import AlertEvent, DailyReport, HourStat
from rag.models import Channel, IndexVersion, KnowledgeBase, RequestRecord
from rag.services import LIMITS, QuestionRequest, question_answer, question_search

log = logging.getLogger(__name__)


# -- replay ---------------------------------------------------------------------------------------------


def recorded_options(record: RequestRecord) -> dict:
    """The request options a record says were asked (top_k, mode, rerank, rewrite), from the caller's raw
    arguments or the options the question service recorded; a value of the wrong kind is left out (the engine's
    default is used, as the original request could not have run with it)."""
    arguments = record.arguments if isinstance(record.arguments, dict) else {}
    options = {}
    top_k = arguments.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool):
        options["top_k"] = top_k
    if arguments.get("mode") in LIMITS.modes:
        options["mode"] = arguments["mode"]
    for name in ("rerank", "rewrite"):
        if isinstance(arguments.get(name), bool):
            options[name] = arguments[name]
    return options


def _run_as_eval(record: RequestRecord, version: str) -> dict:
    """Ask the recorded question again, as eval traffic, against one version, with the recorded options;
    the parts a replay compares."""
    request = QuestionRequest(question=record.question, kb=record.kb, exclude=record.excluded or [],
                              version=version, channel=Channel.EVAL, **recorded_options(record))
    try:
        if record.kind == RequestRecord.Kind.CHAT:
            outcome = question_answer(request)
            answer = outcome.answer
        else:
            outcome, answer = question_search(request), None
    except ServiceError as exc:
        return {"version": version, "error": f"{exc.code}: {exc.message}"}
    result = outcome.result
    return {"version": version, "request_id": outcome.request_id, "plan": result.plan.as_dict(),
            "evidence": [h.chunk.chunk_id for h in result.hits],
            "answer": answer.text if answer else "", "confidence": answer.confidence if answer else ""}


def replay_request(request_id: str) -> dict:
    """Re-run a request against its recorded version (when still kept) and the active one, side by side."""
    record = RequestRecord.objects.filter(request_id=request_id).first()
    if record is None:
        raise ServiceError("request_not_found", "No request with this id.", status=404)
    if not record.question.strip():
        raise ServiceError("nothing_to_replay", "This request has no question to ask again.")
    original = {"version": record.index_version, "request_id": record.request_id, "plan": record.plan,
                "evidence": [a["chunk_id"] for a in record.adopted], "answer": record.answer,
                "confidence": record.confidence}
    active = KnowledgeBase.objects.filter(slug=record.kb).values_list("active_version__name", flat=True).first()
    recorded_kept = IndexVersion.objects.filter(kb__slug=record.kb, name=record.index_version,
                                                status=IndexVersion.Status.READY).exists()
    runs = {"recorded": _run_as_eval(record, record.index_version) if recorded_kept else None,
            "active": _run_as_eval(record, active) if active else None}
    return {"record": record, "original": original, "recorded_kept": recorded_kept, "active_version": active,
            "options": recorded_options(record), "runs": runs,
            "same": {name: _same(original, run) for name, run in runs.items() if run}}


def _same(original: dict, run: dict) -> dict:
    """Per part: "same", "differs", or for the answer "none" when neither side has one (a search, or two empty
    answers: nothing to compare is not an agreement)."""
    if "error" in run:
        return {"plan": "differs", "evidence": "differs", "answer": "differs"}
    keys = ("kind", "classes", "members", "corrections")
    answers = ((original["answer"] or "").strip(), (run["answer"] or "").strip())
    return {"plan": "same" if all((original["plan"] or {}).get(k) == run["plan"].get(k) for k in keys) else "differs",
            "evidence": "same" if original["evidence"] == run["evidence"] else "differs",
            "answer": "none" if answers == ("", "") else "same" if answers[0] == answers[1] else "differs"}


# -- hourly rollups -------------------------------------------------------------------------------------


ROLLUP_CHANNELS = tuple(Channel.values)


def rollup_hours(*, hours: int = 48, now: datetime.datetime | None = None) -> int:
    """Store each channel's numbers for the closed hours of the last `hours` that are not stored yet (and the
    latest closed hour again, in case a slow request landed late). Returns how many rows were written."""
    now = now or timezone.now()
    closed_until = selectors.floor_hour(now)
    since = closed_until - datetime.timedelta(hours=hours)
    stored = set(HourStat.objects.filter(hour__gte=since).values_list("hour", "channel"))
    latest = closed_until - datetime.timedelta(hours=1)
    hour = since
    while hour < latest and all((hour, c) in stored for c in ROLLUP_CHANNELS):  # skip what is stored already
        hour += datetime.timedelta(hours=1)
    written = 0
    day = hour
    while day < closed_until:  # a day at a time keeps each query small
        end = min(day + datetime.timedelta(days=1), closed_until)
        found = {(row["bucket"], row["channel"]): row for row in selectors.hourly_live(None, day, end)}
        moment = day
        while moment < end:  # every hour and channel gets a row, quiet ones too, so none is read live again
            for channel in ROLLUP_CHANNELS:
                if (moment, channel) in stored and moment != latest:
                    continue
                row = found.get((moment, channel), {})
                HourStat.objects.update_or_create(hour=moment, channel=channel, defaults={
                    **{k: row.get(k) or 0 for k in ("requests", "failures", "empty", "low", "degraded",
                                                    "prompt_tokens", "completion_tokens")},
                    "latency": {str(bucket): n for bucket, n in sorted(row.get("latency", {}).items())},
                    "latency_min_ms": row.get("latency_min"), "latency_max_ms": row.get("latency_max")})
                written += 1
            moment += datetime.timedelta(hours=1)
        day = end
    return written


# -- the daily report -----------------------------------------------------------------------------------


def _day_bounds(day: datetime.date) -> tuple[datetime.datetime, datetime.datetime]:
    tz = timezone.get_current_timezone()
    start = datetime.datetime.combine(day, datetime.time(), tzinfo=tz)
    return start, start + datetime.timedelta(days=1)


def daily_report_build(day: datetime.date | None = None) -> DailyReport:
    """Build (or rebuild) the report of a day, by default yesterday: volumes, quality, latency, tokens,
    feedback, breaker openings, the slowest and the failed requests, per channel with eval apart."""
    day = day or timezone.localdate() - datetime.timedelta(days=1)
    since, until = _day_bounds(day)
    overview = selectors.channels_overview(selectors.ALL_CHANNELS, since, until, "hour")
    channels = {channel.value: totals for channel, (_series, totals) in overview.items()}
    active = [c for c in selectors.USER_CHANNELS if c in selectors.CORE_CHANNELS or channels[c]["requests"]]
    hours = {channel.value: overview[channel][0] for channel in active}
    day_rows = RequestRecord.objects.filter(created_at__gte=since, created_at__lt=until)
    user_rows = day_rows.filter(channel__in=selectors.USER_CHANNELS)
    slowest = list(user_rows.order_by("-latency_ms").values("request_id", "channel", "question", "latency_ms")[:10])
    failures = user_rows.filter(outcome=RequestRecord.Outcome.FAILED)
    failed = list(failures.order_by("created_at")
                  .values("request_id", "channel", "question", "error_code", "created_at")[:50])
    failed_by_code = list(failures.values("error_code").annotate(n=Count("id")).order_by("-n"))
    breaker_openings = AlertEvent.objects.filter(rule="breaker_open", fired_at__gte=since, fired_at__lt=until).count()
    summary = {
        "day": day.isoformat(),
        "channels": channels,
        "feedback": {c.value: channels[c]["thumbs_down"] for c in active},
        "breaker_openings": breaker_openings,
        "failed_by_code": failed_by_code,
        "slowest": [{**row, "latency_ms": round(row["latency_ms"], 1)} for row in slowest],
        "failed": [{**row, "created_at": timezone.localtime(row["created_at"]).isoformat()} for row in failed],
        # The open coverage gaps of the last 7 days, as the hourly gaps job last grouped them.
        "gaps": [{k: g[k] for k in ("id", "title", "kb", "size", "questions", "trend", "reason", "reason_label")}
                 for g in selectors.gap_groups("7d", "open", limit=10)["groups"]],
        "hourly": {c: [{"hour": timezone.localtime(b["bucket"]).strftime("%H"), "requests": b["requests"],
                        "failures": b["failures"], "p95_ms": b["p95_ms"]} for b in series]
                   for c, series in hours.items()},
    }
    html = render_to_string("opsboard/daily_report.html", {"summary": summary, "day": day,
                                                           "generated_at": timezone.now()})
    report, _ = DailyReport.objects.update_or_create(day=day, defaults={"summary": summary, "html": html})
    return report


def daily_report_json(report: DailyReport) -> str:
    return json.dumps(report.summary, ensure_ascii=False, indent=1, default=str)


# -- alerts ---------------------------------------------------------------------------------------------


ANSWERED = (RequestRecord.Outcome.OK, RequestRecord.Outcome.LOW, RequestRecord.Outcome.DEGRADED,
            RequestRecord.Outcome.EMPTY)


def _rule_values() -> list[tuple[str, float | None, float, str]]:
    """(rule, value, threshold, message) for every alert rule, over the alert window of user traffic."""
    config = settings.RAG_ALERTS
    since = timezone.now() - datetime.timedelta(minutes=config["WINDOW_MINUTES"])
    rows = RequestRecord.objects.filter(channel__in=selectors.USER_CHANNELS, created_at__gte=since)
    totals = selectors.totals_of(rows)
    # Low confidence is a share of the answers written from the documentation: a chitchat question's fixed
    # reply, a failure and a cancelled stream are no such answer, so they neither count nor dilute it.
    chats = rows.filter(kind=RequestRecord.Kind.CHAT, outcome__in=ANSWERED).aggregate(
        n=Count("id"), low=Count("id", filter=Q(outcome=RequestRecord.Outcome.LOW)))
    enough = totals["requests"] >= config["MIN_REQUESTS"]
    window = f"last {config['WINDOW_MINUTES']} min"
    breaker = selectors.breaker_state()
    queue = selectors.queue_depth()
    pool = selectors.token_pool_today()
    pool_left = pool["remaining"] / pool["limit"] if pool and pool["limit"] else None
    failed_syncs = list(KnowledgeBase.objects.exclude(sync_error="").order_by("slug").values_list("slug", "sync_error"))
    return [
        ("thumbs_down_rate", totals["thumbs_down_rate"] if enough else None, config["THUMBS_DOWN_RATE"],
         f"thumbs-down rate {window}"),
        ("low_confidence_rate", chats["low"] / chats["n"] if chats["n"] >= config["MIN_REQUESTS"] else None,
         config["LOW_CONFIDENCE_RATE"], f"low-confidence answers {window}"),
        ("failure_rate", totals["failures_rate"] if enough else None, config["FAILURE_RATE"], f"failures {window}"),
        ("p95_latency_ms", totals["p95_ms"] if enough else None, config["P95_LATENCY_MS"], f"p95 latency {window}"),
        ("breaker_open", 1.0 if breaker and breaker["state"] != "closed" else 0.0, 0.5,
         "the generation model's circuit breaker is open"),
        ("queue_depth", queue, config["QUEUE_DEPTH"], "tasks waiting in the Celery queue"),
        ("token_pool_low", (1 - pool_left) if pool_left is not None else None, 1 - config["TOKEN_POOL_REMAINING"],
         "share of today's web token pool spent"),
        ("source_sync_failed", float(len(failed_syncs)), 0.5,
         "scheduled source sync failed: " + "; ".join(f"{slug} ({error})" for slug, error in failed_syncs[:3])),
    ]


def _shown(rule: str, value: float) -> str:
    """A rule's value as the pages show numbers: rates as percentages, latency in whole ms, counts as integers."""
    if rule.endswith("_rate") or rule == "token_pool_low":
        return pct(value)
    if rule.endswith("_ms"):
        return f"{ms(value)} ms"
    return count(value)


def alerts_evaluate() -> list[AlertEvent]:
    """Open an alert for each rule over its threshold (and send it), resolve those back within; return open ones."""
    now = timezone.now()
    for rule, value, threshold, message in _rule_values():
        if value is None:
            continue  # not measurable now (too few requests, broker unreachable): leave the rule as it is
        firing = value > threshold
        current = AlertEvent.objects.filter(rule=rule, resolved_at__isnull=True).first()
        if firing and current is None:
            shown = message[:300] if rule in ("breaker_open", "source_sync_failed") else (
                f"{message}: {_shown(rule, value)} (threshold {_shown(rule, threshold)})")
            event = AlertEvent.objects.create(rule=rule, value=value, threshold=threshold, message=shown)
            _deliver(event)
        elif firing:
            AlertEvent.objects.filter(pk=current.pk).update(value=value, last_seen_at=now)
        elif current is not None:
            AlertEvent.objects.filter(pk=current.pk).update(resolved_at=now)
    return selectors.open_alerts()


def _deliver(event: AlertEvent) -> None:
    """POST the alert as JSON to the configured webhook; a failure is recorded, never raised."""
    url = settings.RAG_ALERTS["WEBHOOK_URL"]
    if not url:
        return
    import requests

    payload = {"rule": event.rule, "message": event.message, "value": event.value, "threshold": event.threshold,
               "fired_at": event.fired_at.isoformat()}
    try:
        response = requests.post(url, json=payload, timeout=5)
        ok = 200 <= response.status_code < 300
        error = "" if ok else f"HTTP {response.status_code}"
    except requests.RequestException as exc:
        ok, error = False, type(exc).__name__
    AlertEvent.objects.filter(pk=event.pk).update(delivered=ok, delivery_error=error[:300])
