"""Reads of the evaluation app: runs as plain dicts for reports, pages and the JSON progress endpoint."""

from __future__ import annotations

from evaluation.models import EvalRun


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def run_summary(run: EvalRun) -> dict:
    """The small live view of a run (progress polling, lists)."""
    return {"id": run.pk, "golden_set": {"name": run.golden_set.name, "version": run.golden_set.version,
                                         "kind": run.golden_set.kind},
            "kind": run.golden_set.kind, "kb": run.kb or None, "index_versions": run.index_versions,
            "candidate": run.candidate, "status": run.status, "verdict": run.verdict or None, "done": run.done,
            "total": run.total, "current_question": run.current_question, "cancel_requested": run.cancel_requested,
            "error": run.error, "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
            "failed_gates": [g["metric"] for g in run.gates if g["status"] in ("fail", "not_scored")]}


def run_as_report(run: EvalRun) -> dict:
    """Everything the HTML report shows (see evaluation.report)."""
    results = []
    for result in run.results.select_related("item").order_by("position"):
        item, detail, scores = result.item, result.detail, result.scores
        results.append({
            "item_id": item.item_id, "question": item.question, "layer": item.layer, "kb": item.kb,
            "answerable": item.answerable, "negative_kind": item.negative_kind,
            "expected_classes": item.expected_classes, "expected_members": item.expected_members,
            "passed": result.passed, "attribution": result.attribution,
            "attribution_detail": result.attribution_detail, "plan": detail.get("plan"),
            "retrieved": detail.get("retrieved", []), "excluded": detail.get("excluded", []),
            "answer": detail.get("answer", ""), "confidence": detail.get("confidence", ""),
            "citations": detail.get("citations", []), "rules": scores.get("rules", {}),
            "judge": detail.get("judge") if detail.get("judge") and "error" not in detail["judge"] else None,
            "judge_error": (detail.get("judge") or {}).get("error", ""),
            "flaky": bool((detail.get("judge") or {}).get("flaky")), "request_id": result.request_id,
        })
    diff = run.baseline_diff or {}
    baseline_gate = next((g for g in run.gates if g["metric"] == "newly_failing_count"), None)
    return {
        **run_summary(run), "commit": run.commit, "judge": run.judge or None, "metrics": run.metrics,
        "counts": run.counts, "gates": run.gates, "layers": run.layers,
        "baseline": {"run_id": run.baseline_id, "newly_failing": diff.get("newly_failing", []),
                     "newly_passing": diff.get("newly_passing", []),
                     "max_newly_failing": baseline_gate["threshold"] if baseline_gate else None,
                     "status": baseline_gate["status"] if baseline_gate else None} if run.baseline_id else None,
        "results": results,
    }
