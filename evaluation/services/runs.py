"""Evaluation runs: create and start (queued on Celery), cancel, retry, reap runs whose worker died, and
execute: score every question, then store the gate table, the comparison with the baseline run and the
report."""

from __future__ import annotations

import logging
import subprocess

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluation.judge import Judge
from evaluation.models import EvalResult, EvalRun, GoldenSet
from evaluation.services.gates import baseline_gate, run_gate_table, verdict_of
from evaluation.services.reports import write_report
from evaluation.services.scoring import golden_item_score, make_judge
from infra.errors import ServiceError
from infra.queue import enqueue
from rag.models import IndexVersion, KnowledgeBase
from rag.services.sdk import kb_serving

log = logging.getLogger(__name__)


def current_commit() -> str:
    """Return the short git commit of the code scoring a run ("" outside a checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=settings.BASE_DIR, capture_output=True,
                             text=True, timeout=5, check=False)
        return out.stdout.strip()[:40]
    except OSError:
        return ""


def eval_run_create(*, golden_set: GoldenSet, kb: str = "", index_version: str = "", user=None,
                    sdk_version: str = "") -> EvalRun:
    """A queued run of a golden set over the active versions (or one named version of `kb`); `sdk_version` asks
    every question of an SDK's knowledge base about that SDK version (default: its latest)."""
    items = golden_set.items.all()
    if kb:
        items = items.filter(kb=kb)
    kbs = sorted(set(items.values_list("kb", flat=True)))
    if not kbs:
        raise ServiceError("golden_set_empty", "The golden set has no questions for this knowledge base.")
    if index_version and not kb:
        raise ServiceError("kb_required", "Name the knowledge base whose version to evaluate.")
    versions, candidate = {}, False
    for slug in kbs:
        served = kb_serving(slug, sdk_version or None)  # an SDK's questions read one of its versions
        base = KnowledgeBase.objects.select_related("active_version").filter(slug=served.kb).first()
        if base is None:
            raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404)
        if index_version:
            row = base.versions.filter(name=index_version, status=IndexVersion.Status.READY).first()
            if row is None:
                raise ServiceError("version_not_found", f"Version {index_version} of {slug} is not ready.", status=404)
            versions[slug] = row.name
            candidate = base.active_version_id != row.pk
        elif base.active_version is None:
            raise ServiceError("no_active_version", f"{slug} has no index yet.", status=409)
        else:
            versions[slug] = base.active_version.name
    return EvalRun.objects.create(golden_set=golden_set, kb=kb, index_versions=versions, candidate=candidate,
                                  sdk_version=sdk_version,
                                  total=items.count(), started_by=user, commit=current_commit())


def eval_run_start(*, golden_set: GoldenSet, kb: str = "", index_version: str = "", user=None) -> EvalRun:
    """Create a run and queue it on Celery once the row is committed."""
    from evaluation.tasks import eval_run_execute_task

    with transaction.atomic():
        run = eval_run_create(golden_set=golden_set, kb=kb, index_version=index_version, user=user)
        transaction.on_commit(lambda: enqueue(eval_run_execute_task, run.pk, on_unavailable=lambda reason: _not_queued(
            run, reason)))
    return run


def _not_queued(run: EvalRun, reason: str) -> None:
    """A run the broker would not take ends failed, saying why (retry it once the queue is back)."""
    EvalRun.objects.filter(pk=run.pk, status=EvalRun.Status.QUEUED).update(
        status=EvalRun.Status.FAILED, error=reason, finished_at=timezone.now())


def eval_run_cancel(run: EvalRun) -> EvalRun:
    """Cancel a queued run at once, or a running one after the question it is on."""
    if run.status == EvalRun.Status.QUEUED:
        EvalRun.objects.filter(pk=run.pk, status=EvalRun.Status.QUEUED).update(
            status=EvalRun.Status.CANCELLED, finished_at=timezone.now())
    elif run.status == EvalRun.Status.RUNNING:
        EvalRun.objects.filter(pk=run.pk).update(cancel_requested=True)  # the worker stops after this question
    else:
        raise ServiceError("run_finished", f"Run #{run.pk} is already {run.status}.", status=409)
    run.refresh_from_db()
    return run


def eval_run_retry(run: EvalRun) -> EvalRun:
    """Queue a failed or cancelled run again; questions it already scored are kept, not scored twice."""
    from evaluation.tasks import eval_run_execute_task

    if run.status not in (EvalRun.Status.FAILED, EvalRun.Status.CANCELLED):
        raise ServiceError("run_not_retryable", f"Run #{run.pk} is {run.status}.", status=409)
    EvalRun.objects.filter(pk=run.pk).update(status=EvalRun.Status.QUEUED, cancel_requested=False, error="",
                                             verdict="", finished_at=None)
    transaction.on_commit(lambda: enqueue(eval_run_execute_task, run.pk, on_unavailable=lambda reason: _not_queued(
        run, reason)))
    run.refresh_from_db()
    return run


def eval_run_versions_in_use(kb: str) -> set[str]:
    """The versions of knowledge base `kb` that queued and running runs evaluate (pruning keeps them)."""
    rows = EvalRun.objects.filter(status__in=[EvalRun.Status.QUEUED, EvalRun.Status.RUNNING]).values_list(
        "index_versions", flat=True)
    return {versions[kb] for versions in rows if isinstance(versions, dict) and versions.get(kb)}


def eval_runs_reap() -> int:
    """Mark running runs whose worker stopped beating as failed (a crashed worker never leaves one running)."""
    cutoff = timezone.now() - timezone.timedelta(seconds=settings.RAG_EVAL_STALE_SECONDS)
    return EvalRun.objects.filter(status=EvalRun.Status.RUNNING, heartbeat_at__lt=cutoff).update(
        status=EvalRun.Status.FAILED, finished_at=timezone.now(),
        error="the worker stopped reporting progress (it crashed or was killed); retry to resume")


def eval_run_execute(run_id: int, *, progress=None) -> EvalRun:
    """Score every question of a run not scored yet, then its metrics, gates, baseline and report.

    Safe to call twice: a finished or failed run returns at once, and results are keyed by (run, item).
    """
    eval_runs_reap()
    claimed = EvalRun.objects.filter(pk=run_id, status=EvalRun.Status.QUEUED).update(
        status=EvalRun.Status.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now())
    run = EvalRun.objects.select_related("golden_set").get(pk=run_id)
    if not claimed:
        return run  # running elsewhere, finished, failed or cancelled
    try:
        return _execute(run, progress)
    except Exception as exc:
        log.exception("eval run %s failed", run_id)
        EvalRun.objects.filter(pk=run_id).update(status=EvalRun.Status.FAILED, finished_at=timezone.now(),
                                                 error=f"{type(exc).__name__}: {exc}"[:2000])
        raise


def _execute(run: EvalRun, progress) -> EvalRun:
    kind = run.golden_set.kind
    items = run.golden_set.items.all()
    if run.kb:
        items = items.filter(kb=run.kb)
    items = list(items)
    done_ids = set(run.results.values_list("item_id", flat=True))
    judge = make_judge() if kind == "generation" else None
    if judge:
        EvalRun.objects.filter(pk=run.pk).update(judge=judge.describe())
    for position, item in enumerate(items):
        if item.pk in done_ids:
            continue
        run.refresh_from_db(fields=["cancel_requested"])
        if run.cancel_requested:
            EvalRun.objects.filter(pk=run.pk).update(status=EvalRun.Status.CANCELLED, finished_at=timezone.now(),
                                                     current_question="")
            run.refresh_from_db()
            return run
        EvalRun.objects.filter(pk=run.pk).update(current_question=item.question[:300], heartbeat_at=timezone.now())
        version = run.index_versions[item.kb]
        fields = golden_item_score(item, kind=kind, version=version, judge=judge,
                                   sdk_version=run.sdk_version or None)
        EvalResult.objects.update_or_create(run=run, item=item, defaults={"position": position, **fields})
        done_ids.add(item.pk)
        done = len(done_ids)
        EvalRun.objects.filter(pk=run.pk).update(done=done, heartbeat_at=timezone.now())
        if progress:
            progress(done, len(items), item)
    _finish(run, judge)
    run.refresh_from_db()
    return run


def _finish(run: EvalRun, judge: Judge | None) -> None:
    results = list(run.results.select_related("item").order_by("position"))
    table = run_gate_table(run.golden_set.kind, results, judge_configured=judge is not None)
    baseline, diff = _baseline_of(run, results)
    gates = [*table.gates, baseline_gate(len(diff["newly_failing"]) if baseline else None,
                                         settings.RAG_EVAL_MAX_NEWLY_FAILING)]
    EvalRun.objects.filter(pk=run.pk).update(
        status=EvalRun.Status.DONE, verdict=verdict_of(gates), metrics=table.metrics, counts=table.counts,
        gates=gates, layers=table.layers, baseline=baseline, baseline_diff=diff, finished_at=timezone.now(),
        current_question="", done=len(results))
    run.refresh_from_db()
    write_report(run)


def _baseline_of(run: EvalRun, results) -> tuple[EvalRun | None, dict]:
    """The last finished run of the same set over the active versions; which questions flipped since."""
    active = {slug: name for slug, name in KnowledgeBase.objects.filter(slug__in=list(run.index_versions))
              .values_list("slug", "active_version__name")}
    candidates = (EvalRun.objects.filter(golden_set__name=run.golden_set.name, status=EvalRun.Status.DONE,
                                         candidate=False).exclude(pk=run.pk).order_by("-finished_at")[:50])
    baseline = next((c for c in candidates if all(c.index_versions.get(k) == v for k, v in active.items())), None)
    if baseline is None:
        return None, {"newly_failing": [], "newly_passing": []}
    before = dict(EvalResult.objects.filter(run=baseline).values_list("item__item_id", "passed"))
    now = {r.item.item_id: r.passed for r in results}
    return baseline, {
        "newly_failing": [i for i, ok in now.items() if not ok and before.get(i) is True],
        "newly_passing": [i for i, ok in now.items() if ok and before.get(i) is False],
    }
