"""The read-only ops site under /ops/: quality overview, request list and replay, realtime status, daily
reports, freshness. For the ops group (and superusers); the eval center beside it is the evaluation app's."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from infra.access import in_group, requires
from infra.errors import ServiceError
from infra.security import self_contained_document
from opsboard import charts, gaps, selectors
from opsboard.models import DailyReport
from opsboard.services import daily_report_json, replay_request
from rag.models import Channel


def can_read(user) -> bool:
    return user.is_superuser or in_group(user, settings.RAG_OPS_GROUP)


ops_required = requires(can_read, "The ops site is for the ops group.")


TOP_FAILING_WINDOW = datetime.timedelta(hours=24)  # a question scan over a month of rows would be slow


def _label(bucket, size: str) -> str:
    local = timezone.localtime(bucket)
    return local.strftime("%H:00") if size == "hour" else local.strftime("%m-%d")


def _overview(request, channels: tuple[Channel, ...], template_title: str, *, always=()):
    """One section per channel with traffic in the window (and the `always` ones even without); the channels
    without traffic are named in one line."""
    name = request.GET.get("window", "24h")
    since, until, size = selectors.window(name)
    overviews = selectors.channels_overview(channels, since, until, size)
    shown = [c for c in channels if c in always or overviews[c][1]["requests"]]
    failing = selectors.top_failing_questions(shown, max(since, until - TOP_FAILING_WINDOW), until)
    sections = []
    for channel in shown:
        series, totals = overviews[channel]
        for point in series:
            point["label"] = _label(point["bucket"], size)
        sections.append({
            "channel": channel.value, "label": channel.label, "totals": totals, "series": series,
            "requests_chart": charts.bars(series, value="requests", overlay="failures", label="label",
                                          title=f"{channel.label} requests and failures"),
            "latency_chart": charts.line(series, value="p95_ms", label="label",
                                         title=f"{channel.label} p95 latency"),
            "top_failing": failing[channel],
        })
    return render(request, "opsboard/overview.html", {
        "sections": sections, "quiet": [c.label for c in channels if c not in shown], "window": name,
        "windows": ("24h", "7d", "30d"), "title": template_title, "since": since, "until": until})


@require_GET
@ops_required
def overview(request):
    """User quality per channel (web assistant, MCP, the command line, the retrieval APIs), each counting
    only its own traffic."""
    return _overview(request, selectors.USER_CHANNELS, "Quality overview", always=selectors.CORE_CHANNELS)


@require_GET
@ops_required
def eval_traffic(request):
    """Evaluation traffic on its own, never mixed into user quality."""
    return _overview(request, (Channel.EVAL,), "Evaluation traffic", always=(Channel.EVAL,))


def _parse_moment(raw: str):
    if not raw:
        return None
    moment = parse_datetime(raw) or (datetime.datetime.combine(parse_date(raw), datetime.time())
                                     if parse_date(raw) else None)
    if moment is not None and timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


@require_GET
@ops_required
def request_list(request):
    get = request.GET
    try:
        before = int(get.get("before", "") or 0) or None
    except ValueError:
        before = None
    flt = selectors.RequestFilter(
        channel=get.get("channel", "") if get.get("channel") in Channel.values else "",
        outcome=get.get("outcome", "") if get.get("outcome") in selectors.OUTCOMES else "",
        key=get.get("key", "").strip()[:16], text=get.get("q", "").strip()[:200],
        since=_parse_moment(get.get("since", "")), until=_parse_moment(get.get("until", "")), before=before)
    page, next_before = selectors.request_page(flt)
    names = selectors.key_names(r.api_key_prefix for r in page if r.api_key_prefix)
    for record in page:
        record.key_name = names.get(record.api_key_prefix, "")
    query = get.copy()
    query.pop("before", None)
    return render(request, "opsboard/requests.html", {
        "records": page, "next_before": next_before, "filter": flt, "query": query.urlencode(),
        "outcomes": selectors.OUTCOMES, "channels": Channel.choices})


@require_GET
@ops_required
def request_detail(request, request_id: str):
    trace = selectors.request_trace(request_id)
    if trace is None:
        raise Http404("No request with this id.")
    prefix = trace["record"].api_key_prefix
    return render(request, "opsboard/request.html", {
        **trace, "key_name": selectors.key_names([prefix]).get(prefix, "") if prefix else ""})


@require_POST
@ops_required
def request_replay(request, request_id: str):
    """Ask again as eval traffic, against the recorded version (if kept) and the active one, side by side."""
    try:
        replay = replay_request(request_id)
    except ServiceError as exc:
        return HttpResponse(exc.message, status=exc.status)
    return render(request, "opsboard/replay.html", replay)


@require_GET
@ops_required
def live_page(request):
    return render(request, "opsboard/live.html", {"status": selectors.live_status()})


@require_GET
@ops_required
def live_json(request):
    return JsonResponse(selectors.live_status())


@require_GET
@ops_required
def report_list(request):
    return render(request, "opsboard/reports.html", {"reports": selectors.reports()})


@require_GET
@ops_required
def report_download(request, day: str, fmt: str):
    parsed = parse_date(day)
    report = DailyReport.objects.filter(day=parsed).first() if parsed else None
    if report is None:
        raise Http404("No report for this day.")
    if fmt == "json":
        response = HttpResponse(daily_report_json(report), content_type="application/json; charset=utf-8")
    else:
        response = self_contained_document(HttpResponse(report.html, content_type="text/html; charset=utf-8"))
    if request.GET.get("download") == "1":
        response["Content-Disposition"] = f'attachment; filename="ops-report-{report.day}.{fmt}"'
    return response


@require_GET
@ops_required
def freshness_page(request):
    return render(request, "opsboard/freshness.html", {"bases": selectors.freshness()})


def _back(request, notice: str):
    return redirect(f"{request.path.rsplit('/', 1)[0]}?{urlencode({'notice': notice + '.'})}")


def _gap_query(request) -> tuple[str, str]:
    window = request.GET.get("window", "7d")
    status = request.GET.get("status", "open")
    return (window if window in selectors.GAP_WINDOWS else "7d",
            status if status in selectors.GAP_STATUSES else "open")


@require_GET
@ops_required
def gaps_page(request):
    """Coverage gaps: unanswered questions grouped by meaning (recomputed by the gaps job, read here)."""
    window, status = _gap_query(request)
    return render(request, "opsboard/gaps.html", {
        **selectors.gap_groups(window, status), "windows": tuple(selectors.GAP_WINDOWS),
        "statuses": selectors.GAP_STATUSES, "notice": request.GET.get("notice", "")[:200]})


@require_GET
@ops_required
def gaps_json(request):
    window, status = _gap_query(request)
    return JsonResponse(selectors.gap_groups(window, status))


@require_GET
@ops_required
def gap_page(request, group_id: int):
    detail = selectors.gap_detail(group_id)
    if detail is None:
        raise Http404("No coverage gap with this number.")
    if request.GET.get("format") == "json":
        return JsonResponse(detail, json_dumps_params={"default": str})
    return render(request, "opsboard/gap.html", {"gap": detail, "notice": request.GET.get("notice", "")[:200]})


@require_POST
@ops_required
def gap_drafts(request, group_id: int):
    """Every question of the group becomes a draft golden case (the thumbs-down drafting, for the group)."""
    try:
        made, missing = gaps.gap_drafts(gaps.gap_get(group_id))
    except ServiceError as exc:
        return HttpResponse(exc.message, status=exc.status)
    notice = f"{made} draft golden case(s) ready in the admin's golden drafts"
    notice += f"; {missing} question(s) no longer have a kept request" if missing else ""
    return _back(request, notice)


@require_POST
@ops_required
def gap_covered(request, group_id: int):
    """The docs now cover it: re-checked against the next index of its knowledge base."""
    try:
        group = gaps.gap_mark_covered(gaps.gap_get(group_id), user=request.user)
    except ServiceError as exc:
        return HttpResponse(exc.message, status=exc.status)
    notice = f"Marked covered; re-checked once an index newer than {group.covered_version or 'none'} serves {group.kb}"
    return _back(request, notice)
