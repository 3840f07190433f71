"""The eval center, served on the ops site under /ops/eval/: list and launch runs, watch progress, open and
compare reports, see gate verdicts and active versions. QA may launch, cancel and retry; ops staff read."""

from __future__ import annotations


from django.conf import settings
from django.contrib import messages
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from evaluation.models import EvalRun, GoldenDraft, GoldenSet
from evaluation.report import render_compare
from evaluation.selectors import run_as_report, run_summary
from evaluation.services.reindex import gated_reindex_start
from evaluation.services.runs import eval_run_cancel, eval_run_retry, eval_run_start
from infra.access import in_group, requires
from infra.errors import ServiceError
from infra.security import self_contained_document
from rag.models import IndexVersion, KnowledgeBase


def can_launch(user) -> bool:
    return user.is_superuser or in_group(user, settings.RAG_QA_GROUP)


def can_view(user) -> bool:
    return can_launch(user) or in_group(user, settings.RAG_OPS_GROUP)


viewer_required = requires(can_view, "The eval center is for the QA and ops groups.")
qa_required = requires(can_launch, "Only the QA group may launch, cancel or retry runs.")


@require_GET
@viewer_required
def run_list(request):
    runs = EvalRun.objects.select_related("golden_set", "started_by")[:100]
    latest = {}
    for golden_set in GoldenSet.objects.order_by("name", "-version"):
        latest.setdefault(golden_set.name, golden_set)
    bases = KnowledgeBase.objects.select_related("active_version").order_by("slug")
    versions = IndexVersion.objects.filter(status=IndexVersion.Status.READY).select_related("kb").order_by(
        "kb__slug", "-created_at")
    return render(request, "evaluation/center.html", {
        "runs": runs, "golden_sets": list(latest.values()), "knowledge_bases": bases, "versions": versions,
        "can_launch": can_launch(request.user),
        "open_drafts": GoldenDraft.objects.filter(status=GoldenDraft.Status.OPEN).count(),
        # What the last launch said, from the session (never from the URL: a link must not put words on the page).
        "error": " ".join(m.message for m in messages.get_messages(request) if m.level == messages.ERROR),
        "notice": " ".join(m.message for m in messages.get_messages(request) if m.level != messages.ERROR),
    })


@require_POST
@qa_required
def run_launch(request):
    golden_set = GoldenSet.objects.filter(pk=request.POST.get("golden_set") or 0).first()
    if golden_set is None:
        return _center(request, error="Choose a golden set.")
    try:
        run = eval_run_start(golden_set=golden_set, kb=request.POST.get("kb", "").strip(),
                             index_version=request.POST.get("index_version", "").strip(), user=request.user)
    except ServiceError as exc:
        return _center(request, error=exc.message)
    return redirect("evaluation:run", run_id=run.pk)


@require_POST
@qa_required
def gated_reindex(request):
    """Build a candidate version and let the golden sets decide whether it goes live (runs in the worker)."""
    kb = KnowledgeBase.objects.filter(slug=request.POST.get("kb", "")).first()
    if kb is None:
        return _center(request, error="Choose a knowledge base.")
    try:
        gated_reindex_start(kb=kb, user=request.user)
    except ServiceError as exc:
        return _center(request, error=exc.message)
    return _center(request, notice=f"A gated reindex of {kb.slug} is queued; its runs appear below as they start.")


def _center(request, *, error: str = "", notice: str = ""):
    """Back to the eval center, with a message for its next view (kept in the session by django.contrib.messages)."""
    if error:
        messages.error(request, error)
    if notice:
        messages.success(request, notice)
    return redirect("evaluation:center")


@require_GET
@viewer_required
def run_detail(request, run_id: int):
    run = get_object_or_404(EvalRun.objects.select_related("golden_set", "started_by"), pk=run_id)
    failed = run.results.filter(passed=False).select_related("item").order_by("position")[:200]
    return render(request, "evaluation/run.html", {
        "run": run, "summary": run_summary(run), "failed": failed, "can_launch": can_launch(request.user),
        "finished": run.status in (EvalRun.Status.DONE, EvalRun.Status.FAILED, EvalRun.Status.CANCELLED),
    })


@require_GET
@viewer_required
def run_progress(request, run_id: int):
    run = get_object_or_404(EvalRun.objects.select_related("golden_set"), pk=run_id)
    return JsonResponse(run_summary(run))


def _run_action(service):
    """A QA button on a run (cancel, retry): call the service, then show the run again."""
    @require_POST
    @qa_required
    def view(request, run_id: int):
        run = get_object_or_404(EvalRun, pk=run_id)
        try:
            service(run)
        except ServiceError as exc:
            return HttpResponse(exc.message, status=exc.status)
        return redirect("evaluation:run", run_id=run.pk)
    return view


run_cancel = _run_action(eval_run_cancel)
run_retry = _run_action(eval_run_retry)


@require_GET
@viewer_required
def run_report(request, run_id: int):
    run = get_object_or_404(EvalRun, pk=run_id)
    if not run.report_path:
        raise Http404("This run has no report yet.")
    try:
        handle = open(run.report_path, "rb")  # noqa: SIM115 (FileResponse closes it)
    except OSError:
        raise Http404("The report file is gone.") from None
    download = request.GET.get("download") == "1"
    return self_contained_document(FileResponse(handle, content_type="text/html; charset=utf-8",
                                                as_attachment=download, filename=f"eval-run-{run.pk}.html"))


@require_GET
@viewer_required
def run_compare(request):
    try:
        a, b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        return HttpResponse("Give two run ids: ?a=&b=", status=400)
    run_a, run_b = get_object_or_404(EvalRun, pk=a), get_object_or_404(EvalRun, pk=b)
    return self_contained_document(HttpResponse(render_compare(run_as_report(run_a), run_as_report(run_b))))
