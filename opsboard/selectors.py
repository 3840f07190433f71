"""Everything the ops site shows, read from the database (aggregated there, not in Python), the shared cache
and the broker. Nothing here writes."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Ceil, Greatest, Ln, Trunc
from django.utils import timezone

from apikeys.models import ApiKey
from assistant.models import Feedback, TokenPool
from evaluation.models import EvalRun
from infra import live
from opsboard.models import AlertEvent, DailyReport, GapGroup, GapQuestion, HourStat
from rag.models import Channel, IndexVersion, KnowledgeBase, RequestRecord
from rag.services.generation import breaker_state, prompt_rebuild
from rag.services.knowledge import kb_source_hashes

USER_CHANNELS = tuple(Channel.user_channels())  # every face but evaluation; each counts only its own traffic
ALL_CHANNELS = tuple(Channel)
CORE_CHANNELS = (Channel.WEB, Channel.MCP)  # always shown on the overview; other faces once they have traffic
Outcome = RequestRecord.Outcome
BAD_OUTCOMES = (Outcome.FAILED, Outcome.EMPTY, Outcome.LOW, Outcome.DEGRADED)
# Latency percentiles come from a log-bucketed histogram the database counts (DDSketch's buckets: Masson, Rim and
# Lee, "DDSketch: A Fast and Fully-Mergeable Quantile Sketch with Relative-Error Guarantees", VLDB 2019). Bucket i
# holds the latencies in (GAMMA**(i-1), GAMMA**i] ms (bucket 0 everything up to 1 ms); a percentile is read as the
# bucket's midpoint 2*GAMMA**i/(GAMMA+1), within RELATIVE_ACCURACY of the exact value. Histograms of hours add up,
# so a day or a month read from hour rollups gives the same percentiles as the request rows themselves.
GAMMA = 1.02
RELATIVE_ACCURACY = (GAMMA - 1) / (GAMMA + 1)  # 0.99 %
LATENCY_BUCKET = Ceil(Ln(Greatest(F("latency_ms"), Value(1.0))) / Value(math.log(GAMMA)))
OUTCOMES = (*Outcome.values, "thumbs_down")
COUNTED = ("requests", "failures", "empty", "low", "degraded", "thumbs_down", "prompt_tokens", "completion_tokens")
EXTREMES = (("latency_min", min), ("latency_max", max))  # a percentile never reads below the fastest or above the slowest


def outcome_filter(outcome: str) -> Q:
    """Requests that ended this way: the outcome the question service recorded, or a thumbs-down."""
    return Q(feedback__isnull=False) if outcome == "thumbs_down" else Q(outcome=outcome)


def _aggregates(thumbs: bool = True) -> dict:
    counts = {
        "requests": Count("id"),
        "failures": Count("id", filter=Q(outcome=Outcome.FAILED)),
        "empty": Count("id", filter=Q(outcome=Outcome.EMPTY)),
        "low": Count("id", filter=Q(outcome=Outcome.LOW)),
        "degraded": Count("id", filter=Q(outcome=Outcome.DEGRADED)),
        "prompt_tokens": Sum("prompt_tokens"),
        "completion_tokens": Sum("completion_tokens"),
        "latency_min": Min("latency_ms"),
        "latency_max": Max("latency_ms"),
    }
    if thumbs:
        counts["thumbs_down"] = Count("feedback")
    return counts


def _grouped(rows, group: tuple[str, ...], *, thumbs: bool = True) -> dict[tuple, dict]:
    """The aggregates of `rows` per value of the `group` fields, each with its latency histogram: one query,
    grouped by the group fields and the latency bucket, folded here (at most a few hundred buckets a group)."""
    out: dict[tuple, dict] = {}
    for row in (rows.annotate(latency_bucket=LATENCY_BUCKET).values(*group, "latency_bucket")
                .annotate(**_aggregates(thumbs)).order_by()):
        key = tuple(row[name] for name in group)
        total = out.setdefault(key, {**dict(zip(group, key, strict=True)), **dict.fromkeys(COUNTED, 0), "latency": {}})
        for name in COUNTED:
            total[name] += row.get(name) or 0
        _extremes(total, row)
        bucket = int(row["latency_bucket"])
        total["latency"][bucket] = total["latency"].get(bucket, 0) + row["requests"]
    return out


def _extremes(total: dict, row: dict) -> None:
    for name, pick in EXTREMES:
        values = [v for v in (total.get(name), row.get(name)) if v is not None]
        total[name] = pick(values) if values else None


def latency_value(bucket: int) -> float:
    """The latency (ms) a histogram bucket stands for: its midpoint in relative terms."""
    return 2 * GAMMA ** bucket / (GAMMA + 1)


def percentile(histogram: dict[int, int], q: float, lowest: float | None = None,
               highest: float | None = None) -> int | None:
    """The latency (ms, to the nearest integer) under which a fraction q of the requests finished: the k-th
    fastest of n with k = ceil(q*n) (the nearest-rank definition), within RELATIVE_ACCURACY, and never outside
    the fastest and slowest latencies when they are known (so a p95 that is the slowest request is exact)."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q * total - 1e-9)), 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            value = latency_value(bucket)
            value = max(value, lowest) if lowest is not None else value
            return round(min(value, highest) if highest is not None else value)
    return None


def _shape(row: dict) -> dict:
    out = {k: (row.get(k) or 0) for k in ("requests", "failures", "empty", "low", "degraded", "thumbs_down")}
    out["tokens"] = (row.get("prompt_tokens") or 0) + (row.get("completion_tokens") or 0)
    histogram, lowest, highest = row.get("latency") or {}, row.get("latency_min"), row.get("latency_max")
    out["p50_ms"], out["p95_ms"] = (percentile(histogram, q, lowest, highest) for q in (0.5, 0.95))
    for name in ("failures", "empty", "low", "degraded", "thumbs_down"):
        out[f"{name}_rate"] = out[name] / out["requests"] if out["requests"] else None
    return out


def _sum(rows) -> dict:
    total = {**dict.fromkeys(COUNTED, 0), "latency": {}}
    for row in rows:
        for key in COUNTED:
            total[key] += row.get(key) or 0
        _extremes(total, row)
        for bucket, n in (row.get("latency") or {}).items():
            total["latency"][bucket] = total["latency"].get(bucket, 0) + n
    return total


def floor_hour(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)


def _hours(since, until) -> list[datetime.datetime]:
    hours, moment = [], floor_hour(since)
    while moment < until:
        hours.append(moment)
        moment += datetime.timedelta(hours=1)
    return hours


def _stat_row(stat: HourStat) -> dict:
    row = {k: getattr(stat, k) for k in ("requests", "failures", "empty", "low", "degraded", "prompt_tokens",
                                          "completion_tokens")}
    row["latency"] = {int(bucket): n for bucket, n in stat.latency.items()}  # JSON keys are strings
    row["latency_min"], row["latency_max"] = stat.latency_min_ms, stat.latency_max_ms
    return row


def hourly_live(channels, since, until) -> list[dict]:
    """Per-hour aggregates of some channels (None: all) straight from the request table (UTC hours),
    with latency histograms, without thumbs-down."""
    rows = RequestRecord.objects.filter(created_at__gte=since, created_at__lt=until)
    if channels is not None:
        rows = rows.filter(channel__in=list(channels))
    rows = rows.annotate(bucket=Trunc("created_at", "hour", tzinfo=datetime.UTC))
    return sorted(_grouped(rows, ("bucket", "channel"), thumbs=False).values(), key=lambda r: (r["bucket"], r["channel"]))


def first_id_since(moment) -> int | None:
    """The id of the first request recorded at or after `moment` (ids grow with time), via the time index;
    of requests recorded at the same moment, the lowest id (PostgreSQL returns ties in any order)."""
    return (RequestRecord.objects.filter(created_at__gte=moment).order_by("created_at", "id")
            .values_list("id", flat=True).first())


def hour_rows(channels, since, until) -> dict[str, dict[datetime.datetime, dict]]:
    """Every hour of [since, until) for each channel: closed hours from the rollup table, the rest (the current
    hour, hours the job has not rolled up yet) aggregated live; thumbs-down counted live from the feedback
    table. A few queries whatever the number of channels."""
    channels = list(channels)
    hours = _hours(since, until)
    start = hours[0] if hours else floor_hour(since)
    rows: dict[str, dict[datetime.datetime, dict]] = {channel: {} for channel in channels}
    for stat in HourStat.objects.filter(channel__in=channels, hour__gte=start, hour__lt=until):
        rows[stat.channel][stat.hour] = _stat_row(stat)
    missing = [h for h in hours if any(h not in rows[c] for c in channels)]
    if missing:
        for row in hourly_live(channels, min(missing), until):
            if row["bucket"] in missing and row["bucket"] not in rows[row["channel"]]:
                rows[row["channel"]][row["bucket"]] = row
    first = first_id_since(start)
    if first is not None:  # few feedback rows: start from them (bounded by id), not from the requests
        thumbs = (Feedback.objects.filter(request_id__gte=first, request__channel__in=channels,
                                          request__created_at__lt=until)
                  .values_list("request__channel", "request__created_at"))
        for channel, moment in thumbs:
            hour = floor_hour(moment)
            rows[channel].setdefault(hour, {})
            rows[channel][hour]["thumbs_down"] = rows[channel][hour].get("thumbs_down", 0) + 1
    return rows


def _series(rows: dict, hours: list, bucket: str) -> tuple[list[dict], dict]:
    totals = _shape(_sum(rows.get(hour, {}) for hour in hours))
    if bucket == "hour":
        return [{"bucket": hour, **_shape(rows.get(hour, {}))} for hour in hours], totals
    days: dict[datetime.date, list[dict]] = {}
    for hour in hours:
        days.setdefault(timezone.localtime(hour).date(), []).append(rows.get(hour, {}))
    tz = timezone.get_current_timezone()
    return [{"bucket": datetime.datetime.combine(day, datetime.time(), tzinfo=tz), **_shape(_sum(group))}
            for day, group in days.items()], totals


def channels_overview(channels, since, until, bucket: str) -> dict[str, tuple[list[dict], dict]]:
    """Per channel: its numbers per hour or local day (requests, failures, empty, low confidence, degraded,
    thumbs-down, tokens, p50/p95) and the totals of the window, from one read of the hour rows."""
    hours = _hours(since, until)
    return {channel: _series(by_hour, hours, bucket)
            for channel, by_hour in hour_rows(channels, since, until).items()}


def channel_overview(channel: str, since, until, bucket: str) -> tuple[list[dict], dict]:
    return channels_overview([channel], since, until, bucket)[channel]


def channel_series(channel: str, since, until, bucket: str) -> list[dict]:
    return channel_overview(channel, since, until, bucket)[0]


def channel_totals(channel: str, since, until) -> dict:
    return channel_overview(channel, since, until, "hour")[1]


def totals_of(rows) -> dict:
    """The overview's numbers for any set of request rows, aggregated in one query (the alert rules)."""
    return _shape(_grouped(rows, ()).get((), {}))


def top_failing_questions(channels, since, until, limit: int = 10) -> dict[str, list[dict]]:
    """Per channel, the questions that most often failed, came back empty, had low confidence or a degraded
    answer, or got a thumbs-down (a chitchat question that got its fixed reply is not among them)."""
    bad = Q(outcome__in=BAD_OUTCOMES) | Q(feedback__isnull=False)
    rows = (RequestRecord.objects.filter(bad, channel__in=list(channels), created_at__gte=since, created_at__lt=until)
            .values("channel", "question").annotate(times=Count("id")).order_by("channel", "-times", "question"))
    out: dict[str, list[dict]] = {channel: [] for channel in channels}
    for row in rows:
        if len(out[row["channel"]]) < limit:
            out[row["channel"]].append({"question": row["question"], "times": row["times"]})
    return out


def window(name: str) -> tuple[datetime.datetime, datetime.datetime, str]:
    """`24h` (hourly buckets), `7d` or `30d` (daily buckets, from the start of the first local day)."""
    now = timezone.now()
    if name in ("7d", "30d"):
        days = 7 if name == "7d" else 30
        first = timezone.localtime(now).date() - datetime.timedelta(days=days - 1)
        return datetime.datetime.combine(first, datetime.time(), tzinfo=timezone.get_current_timezone()), now, "day"
    return floor_hour(now) - datetime.timedelta(hours=23), now, "hour"


# -- request list and trace --------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestFilter:
    channel: str = ""
    outcome: str = ""
    key: str = ""
    text: str = ""
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    before: int | None = None  # keyset pagination: records with a smaller id


PAGE_SIZE = 50
TEXT_SEARCH_DAYS = datetime.timedelta(days=7)


def request_page(flt: RequestFilter) -> tuple[list[RequestRecord], int | None]:
    """One page of requests, newest first, and the id to continue from (None on the last page)."""
    rows = RequestRecord.objects.all()
    if flt.channel:
        rows = rows.filter(channel=flt.channel)
    if flt.outcome in OUTCOMES:
        rows = rows.filter(outcome_filter(flt.outcome))
    if flt.key:
        rows = rows.filter(api_key_prefix=flt.key)
    if flt.since:
        rows = rows.filter(created_at__gte=flt.since)
    if flt.until:
        rows = rows.filter(created_at__lt=flt.until)
    if flt.text:
        # A text search reads every row it covers: bounded to the last week unless a start is given, and by id
        # too, so the database walks only that range (ids grow with time) instead of the whole table.
        first = first_id_since(flt.since or timezone.now() - TEXT_SEARCH_DAYS)
        rows = rows.filter(id__gte=first) if first is not None else rows.none()
        rows = rows.filter(question__icontains=flt.text)
    if flt.before:
        rows = rows.filter(id__lt=flt.before)
    page = list(rows.order_by("-id").only(
        "id", "request_id", "channel", "kind", "kb", "question", "error_code", "outcome", "confidence", "degraded", "hit_count",
        "latency_ms", "prompt_tokens", "completion_tokens", "api_key_prefix", "tool", "created_at")[:PAGE_SIZE + 1])
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    thumbs = set(RequestRecord.objects.filter(id__in=[r.id for r in page], feedback__isnull=False)
                 .values_list("id", flat=True))
    for record in page:
        record.thumbs_down = record.id in thumbs
    return page, (page[-1].id if more else None)


def request_trace(request_id: str) -> dict | None:
    """One request with everything recorded about it, plus the generation prompt rebuilt from its evidence."""
    record = RequestRecord.objects.filter(request_id=request_id).select_related("feedback").first()
    if record is None:
        return None
    feedback = getattr(record, "feedback", None)  # a missing reverse one-to-one raises AttributeError
    version = IndexVersion.objects.filter(kb__slug=record.kb, name=record.index_version).first()
    return {"record": record, "feedback": feedback, "version": version,
            "version_kept": bool(version and version.status == IndexVersion.Status.READY),
            "prompt": _rebuilt_prompt(record, version), "routes": sorted(record.retrieved.items())}


def _rebuilt_prompt(record: RequestRecord, version) -> list[dict] | None:
    """The messages a model got (or would have got) for this request; only when its version is still kept."""
    if record.kind != RequestRecord.Kind.CHAT or not record.adopted or not version or version.status != IndexVersion.Status.READY:
        return None
    return prompt_rebuild(kb=record.kb, version=record.index_version,
                          chunk_ids=[item["chunk_id"] for item in record.adopted],
                          question=record.plan.get("corrected_question") or record.question)


# -- realtime -------------------------------------------------------------------------------------------


def queue_depth() -> int | None:
    """Messages waiting in Celery's default queue (Redis or the embedded filesystem broker)."""
    from ragsite.celery import app

    try:
        with app.connection_for_read() as connection:
            return connection.default_channel.queue_declare(queue="celery", passive=True).message_count
    except Exception:  # noqa: BLE001  (a broker that is down or a queue never declared: unknown, not an error page)
        return None


def recent_problems() -> list[dict]:
    """Failures and slow requests of the last 5, 15 and 60 minutes, per channel."""
    now = timezone.now()
    slow = settings.RAG_SLOW_REQUEST_MS
    hour = RequestRecord.objects.filter(created_at__gte=now - datetime.timedelta(minutes=60))
    aggregates = {}
    for minutes in (5, 15, 60):
        since = now - datetime.timedelta(minutes=minutes)
        aggregates[f"failed_{minutes}"] = Count("id", filter=Q(created_at__gte=since, outcome=Outcome.FAILED))
        aggregates[f"slow_{minutes}"] = Count("id", filter=Q(created_at__gte=since, latency_ms__gt=slow))
        aggregates[f"all_{minutes}"] = Count("id", filter=Q(created_at__gte=since))
    return list(hour.values("channel").annotate(**aggregates).order_by("channel"))


def active_versions() -> list[dict]:
    return [{"kb": kb.slug, "version": kb.active_version.name if kb.active_version else None,
             "built_at": kb.active_version.built_at if kb.active_version else None}
            for kb in KnowledgeBase.objects.select_related("active_version").order_by("slug")]


def live_status() -> dict:
    now = timezone.now()
    snapshot = live.snapshot()
    breaker = breaker_state()
    building = IndexVersion.objects.filter(status=IndexVersion.Status.BUILDING).select_related("kb")
    return {
        "at": now.isoformat(),
        "at_local": timezone.localtime(now).strftime("%Y-%m-%d %H:%M:%S"),
        "mcp_sessions": snapshot["gauges"].get("mcp_sessions", 0),
        "in_flight": {channel.value: snapshot["in_flight"].get(channel, 0) for channel in ALL_CHANNELS},
        "in_flight_other": sum(n for channel, n in snapshot["in_flight"].items()
                               if channel not in (Channel.WEB, Channel.MCP, Channel.EVAL)),
        "processes": snapshot["processes"],
        "queue_depth": queue_depth(),
        "builds_running": [{"kb": v.kb.slug, "version": v.name, "embedded": v.chunks_embedded} for v in building],
        "eval_runs_running": EvalRun.objects.filter(status__in=["queued", "running"]).count(),
        "breaker": breaker,
        "recent": recent_problems(),
        "active_versions": [{**v, "built_at": v["built_at"].isoformat() if v["built_at"] else None,
                             "built_local": timezone.localtime(v["built_at"]).strftime("%Y-%m-%d %H:%M")
                             if v["built_at"] else None} for v in active_versions()],
    }


# -- freshness, reports, alerts ------------------------------------------------------------------------


SDK_TRAFFIC_DAYS = 7


def freshness() -> list[dict]:
    """Per knowledge base: the active version and, per document, whether its source changed since. An SDK's
    versions are each listed (an SDK without pages of its own is not), with their traffic, failures and
    thumbs-down over the last SDK_TRAFFIC_DAYS days and the last evaluation run of their active version."""
    out = []
    bases = list(KnowledgeBase.objects.select_related("active_version", "sdk").exclude(sdk_versions__isnull=False,
                                                                                 source_dir="").order_by("slug"))
    traffic = _traffic_by_kb([kb.slug for kb in bases if kb.sdk_id is not None])
    runs = _recent_runs() if any(kb.sdk_id is not None for kb in bases) else []
    for kb in bases:
        version = kb.active_version
        indexed = version.document_hashes if version else {}
        current = kb_source_hashes(kb)  # a source folder that is gone: every document shows as removed
        documents = []
        for path in sorted(set(indexed) | set(current)):
            state = ("new" if path not in indexed else "removed" if path not in current
                     else "stale" if indexed[path] != current[path] else "fresh")
            documents.append({"path": path, "state": state})
        entry = {"kb": kb, "version": version, "documents": documents,
                 "stale": sum(d["state"] != "fresh" for d in documents)}
        if kb.sdk_id is not None:
            entry["traffic"] = traffic.get(kb.slug, {"requests": 0, "failures": 0, "thumbs_down": 0})
            entry["evaluated"] = _last_run_of(version, runs)
        out.append(entry)
    return out


def _traffic_by_kb(slugs: list[str]) -> dict[str, dict]:
    if not slugs:
        return {}
    since = timezone.now() - datetime.timedelta(days=SDK_TRAFFIC_DAYS)
    rows = (RequestRecord.objects.filter(kb__in=slugs, created_at__gte=since, channel__in=USER_CHANNELS)
            .values("kb").annotate(requests=Count("id"), failures=Count("id", filter=Q(outcome=Outcome.FAILED)),
                                   thumbs_down=Count("feedback")).order_by())
    return {row["kb"]: row for row in rows}


def _recent_runs() -> list[EvalRun]:
    return list(EvalRun.objects.filter(status=EvalRun.Status.DONE).select_related("golden_set")
                .order_by("-finished_at", "-id")[:200])


def _last_run_of(version: IndexVersion | None, runs: list[EvalRun]) -> EvalRun | None:
    """Of the recent finished evaluation runs (newest first), the newest that read this index version."""
    if version is None:
        return None
    return next((run for run in runs if version.name in (run.index_versions or {}).values()), None)


def reports() -> list[DailyReport]:
    """The newest reports, each with the channels that had traffic that day (`by_channel`)."""
    rows = list(DailyReport.objects.defer("html").order_by("-day")[:120])
    for report in rows:
        report.by_channel = [(name, c["requests"]) for name, c in report.summary.get("channels", {}).items()
                             if c.get("requests")]
    return rows


def open_alerts() -> list[AlertEvent]:
    return list(AlertEvent.objects.filter(resolved_at__isnull=True).order_by("-fired_at")[:20])


def token_pool_today() -> dict | None:
    pool = TokenPool.objects.filter(channel=Channel.WEB, day=timezone.localdate()).first()
    return {"limit": pool.limit, "spent": pool.spent, "remaining": pool.remaining} if pool else None


def key_names(prefixes) -> dict[str, str]:
    return dict(ApiKey.objects.filter(prefix__in=set(prefixes)).values_list("prefix", "name"))


# -- coverage gaps (computed by the gaps job, opsboard.gaps; read here) ----------------------------------------

GAP_WINDOWS = {"7d": 7, "30d": 30}
GAP_STATUSES = ("open", "covered", "closed", "all")
GROWTH = 1.5  # the window's second half asked this many times the first half's (and at least 2 more): growing


def gap_trend(daily: dict, first_day: datetime.date, days: int, first_seen: datetime.datetime | None) -> str:
    """new (first asked in the window's second half), growing, shrinking or steady: the window's second half
    against its first."""
    middle = first_day + datetime.timedelta(days=days // 2)
    earlier = sum(n for day, n in daily.items() if first_day <= datetime.date.fromisoformat(day) < middle)
    recent = sum(n for day, n in daily.items() if datetime.date.fromisoformat(day) >= middle)
    if first_seen is not None and timezone.localtime(first_seen).date() >= middle:
        return "new"
    if recent >= GROWTH * earlier and recent - earlier >= 2:
        return "growing"
    if earlier >= GROWTH * recent and earlier - recent >= 2:
        return "shrinking"
    return "steady"


def gap_as_dict(group: GapGroup, *, size: int | None = None, trend: str = "") -> dict:
    return {
        "id": group.pk, "title": group.title, "kb": group.kb, "status": group.status,
        "reason": group.reason, "reason_label": group.get_reason_display(), "reason_detail": group.reason_detail,
        "size": group.size if size is None else size, "questions": group.questions, "trend": trend,
        "first_seen": group.first_seen.isoformat() if group.first_seen else None,
        "last_seen": group.last_seen.isoformat() if group.last_seen else None,
        "examples": group.examples, "classes": group.classes, "pages": group.pages,
        "covered_at": group.covered_at.isoformat() if group.covered_at else None,
        "covered_version": group.covered_version, "check_result": group.check_result,
        "closed_at": group.closed_at.isoformat() if group.closed_at else None,
        "computed_at": group.computed_at.isoformat() if group.computed_at else None,
    }


def gap_groups(window: str = "7d", status: str = "open", limit: int = 100) -> dict:
    """The gaps asked in the window (requests per local day, as the job stored them), largest first, each with
    its size in the window and its trend; and when the job last ran."""
    days = GAP_WINDOWS.get(window, 7)
    first_day = timezone.localtime(timezone.now()).date() - datetime.timedelta(days=days - 1)
    rows = GapGroup.objects.all() if status == "all" else GapGroup.objects.filter(status=status)
    if status != "closed":
        rows = rows.filter(last_seen__gte=datetime.datetime.combine(
            first_day, datetime.time(), tzinfo=timezone.get_current_timezone()))
    groups = []
    for group in rows.defer("check_result"):
        size = sum(n for day, n in group.daily.items() if datetime.date.fromisoformat(day) >= first_day)
        if size or status in ("closed", "all"):
            groups.append((size, group))
    groups.sort(key=lambda pair: (-pair[0], pair[1].pk))
    total = sum(size for size, _ in groups)
    computed = GapGroup.objects.aggregate(at=Max("computed_at"))["at"]
    return {"window": window if window in GAP_WINDOWS else "7d", "status": status, "total": total,
            "groups": [gap_as_dict(g, size=size, trend=gap_trend(g.daily, first_day, days, g.first_seen))
                       for size, g in groups[:limit]],
            "shown": min(limit, len(groups)), "count": len(groups),
            "computed_at": computed.isoformat() if computed else None}


def gap_detail(group_id: int) -> dict | None:
    group = GapGroup.objects.filter(pk=group_id).first()
    if group is None:
        return None
    questions = list(GapQuestion.objects.filter(group=group).order_by("-times", "question")
                     .values("question", "kb", "times", "last_seen", "request_id", "channel", "reason", "classes")[:200])
    return {**gap_as_dict(group), "all_questions": questions}
