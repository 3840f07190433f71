"""The gated reindex (release gates, V5): build a candidate version, run the gating golden sets against it,
and activate it only if every gate passes. Installed as the `rag` app's release gate in
`EvaluationConfig.ready`, so `rag reindex --gate` reaches it without `rag` importing this app."""

from __future__ import annotations

from django.db import transaction

from evaluation.models import EvalRun, GoldenSet
from evaluation.services.golden import golden_set_latest
from evaluation.services.runs import eval_run_create, eval_run_execute
from infra.errors import ServiceError
from infra.queue import enqueue
from rag.models import KnowledgeBase
from rag.services.generation import generation_configured
from rag.services.knowledge import index_activate, index_build, index_version_note
from rag.services.release import GateOutcome


def gate_sets_for(kb: str) -> list[GoldenSet]:
    """The latest version of every golden set with questions for `kb`; generation sets only with a model."""
    names = GoldenSet.objects.filter(items__kb=kb).values_list("name", flat=True).distinct()
    sets = [golden_set_latest(name) for name in sorted(set(names))]
    sets = [s for s in sets if s.items.filter(kb=kb).exists()]
    if not generation_configured():
        sets = [s for s in sets if s.kind == "retrieval"]
    return sets


def gate_scope(kb: KnowledgeBase) -> tuple[str, str]:
    """Whose questions gate `kb`, and about which SDK version: its own, or (for an SDK version without questions of
    its own) its SDK's, asked about this version."""
    if kb.sdk_id is not None and not gate_sets_for(kb.slug):
        return kb.sdk.slug, kb.sdk_version
    return kb.slug, ""


def _has_baseline(golden_set: GoldenSet, kb: KnowledgeBase, items_kb: str) -> bool:
    active = KnowledgeBase.objects.filter(pk=kb.pk).values_list("active_version__name", flat=True).first()
    runs = EvalRun.objects.filter(golden_set__name=golden_set.name, status=EvalRun.Status.DONE, candidate=False)
    return any(r.index_versions.get(items_kb) == active for r in runs.order_by("-finished_at")[:50])


def gated_reindex_start(*, kb: KnowledgeBase, user=None) -> None:
    """Queue a gated reindex of `kb` on Celery (the eval center's button)."""
    from evaluation.tasks import gated_reindex_task

    if not gate_sets_for(gate_scope(kb)[0]):
        raise ServiceError("no_gate_sets", f"No golden set has questions for {kb.slug}.", status=409)
    user_id = user.pk if user else None
    transaction.on_commit(lambda: enqueue(gated_reindex_task, kb.pk, user_id))


def index_build_gated(kb: KnowledgeBase, *, progress=None, run_progress=None, user=None) -> GateOutcome:
    """Build a candidate version, run the gating golden sets against it, and activate it only if all pass.

    A failing candidate stays ready but inactive (its `error` says why), and the previous version keeps
    serving. Installed as the release gate of `rag reindex --gate` (see `EvaluationConfig.ready`).
    """
    items_kb, sdk_version = gate_scope(kb)
    sets = gate_sets_for(items_kb)
    if not sets:
        raise ServiceError("no_gate_sets", f"No golden set has questions for {kb.slug}; import one first "
                                           "(`manage.py eval import`).", status=409)
    if kb.active_version_id:  # the candidate is judged against the active version's run, so make sure there is one
        for golden_set in sets:
            if not _has_baseline(golden_set, kb, items_kb):
                eval_run_execute(eval_run_create(golden_set=golden_set, kb=items_kb, user=user,
                                                 sdk_version=sdk_version).pk)
    version = index_build(kb, progress=progress, activate=False)
    runs, failed = [], []
    for golden_set in sets:
        run = eval_run_create(golden_set=golden_set, kb=items_kb, index_version=version.name, user=user,
                              sdk_version=sdk_version)
        run = eval_run_execute(run.pk, progress=run_progress)
        runs.append(run)
        failed += [{"golden_set": str(golden_set), **g} for g in run.gates if g["status"] != "pass"
                   and g["status"] != "skipped"]
    activated = not failed and all(r.verdict == "pass" for r in runs)
    if activated:
        index_activate(version)
    else:
        summary = "; ".join(f"{f['metric']} {f['status']}" for f in failed) or "a run did not finish"
        index_version_note(version, f"not activated: {summary}")
    version.refresh_from_db()
    return GateOutcome(version=version, activated=activated, failed_gates=failed,
                       runs=[{"id": r.pk, "golden_set": str(r.golden_set), "verdict": r.verdict,
                              "report": r.report_path} for r in runs])
