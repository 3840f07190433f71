"""Gate tables: the generation gates, and a finished run's metrics, counts, gates, per-layer rates and verdict.

Every gate is a `rag.metrics.Gate` and every row its `check()`, stored as a dict (`EvalRun.gates`): the
retrieval gates come from `rag.metrics.summarize` (shared with `make bench`), the generation gates and the
baseline gate from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluation import rules
from evaluation.services.golden import LAYERS
from rag.metrics import Gate, QuestionScore, rate, summarize

# Default generation gates (seed 001, "生成发版指标"); the judge's two are not scored without a judge model.
GENERATION_GATES = (
    Gate("answer_parses", ">=", 1.0),
    Gate("confidence_expected", ">=", 1.0),
    Gate("citations_valid", ">=", 1.0),
    Gate("class_mentioned", ">=", 0.95),
    Gate("member_mentioned", ">=", 0.85),
    Gate("path_clean", ">=", 1.0),
    Gate("negative_refused", ">=", 1.0),
    Gate("expected_class_discarded", "<=", 0.0),
    Gate("judge_pass", ">=", 0.80, needs_judge=True),
    Gate("hallucination_count", "<=", 0, needs_judge=True),
)


@dataclass(frozen=True)
class GateTable:
    """What a finished run stores besides its results: rates, counts, gate rows and per-layer rates."""

    metrics: dict
    counts: dict
    gates: list[dict]
    layers: list[dict]


def retrieval_gates(scores: list[QuestionScore]) -> tuple[dict, dict, list[dict]]:
    """Return a retrieval run's metrics, counts and gate table."""
    report = summarize(scores)
    return report.metrics, report.counts, [gate.as_dict() for gate in report.gates]


def generation_gates(metrics: dict, *, judge_configured: bool) -> list[dict]:
    """Return a generation run's gate table from its metrics."""
    return [gate.check(metrics.get(gate.metric), judge_configured=judge_configured,
                       unmeasured="no question this rule applies to").as_dict() for gate in GENERATION_GATES]


def baseline_gate(newly_failing: int | None, limit: int) -> dict:
    """Allow at most `limit` questions that passed in the baseline run to fail now (None: no baseline run)."""
    gate = Gate("newly_failing_count", "<=", limit)
    return gate.check(newly_failing, unmeasured="no baseline run of the active version").as_dict()


def verdict_of(gates: list[dict]) -> str:
    """Return "fail" if any gate fails, else "not_scored" if any gate could not be scored, else "pass"."""
    statuses = {g["status"] for g in gates}
    if "fail" in statuses:
        return "fail"
    if "not_scored" in statuses:
        return "not_scored"
    return "pass"


def run_gate_table(kind: str, results: list, *, judge_configured: bool) -> GateTable:
    """Build a run's gate table from its stored results (`EvalResult` rows with their items, in order)."""
    if kind == "retrieval":
        scores = [QuestionScore(id=r.item.item_id, **r.scores) for r in results]
        metrics, counts, gates = retrieval_gates(scores)
        return GateTable(metrics, counts, gates, _retrieval_layers(scores))
    scores = [rules.GenerationScore(id=r.item.item_id, answerable=r.item.answerable, rules=r.scores["rules"])
              for r in results]
    verdicts = [r.detail.get("judge") for r in results]
    summary = None
    if judge_configured:
        good = [v for v in verdicts if v and "error" not in v and not v.get("flaky")]
        summary = rules.JudgeSummary(
            judged=len(good), passed=sum(v["passed"] for v in good),
            hallucinations=sum(v["hallucination"] for v in good), correct=sum(v["correct"] for v in good),
            flaky=sum(1 for v in verdicts if v and v.get("flaky")),
            errors=sum(1 for v in verdicts if v and "error" in v))
    extras = {"unexpected_degraded_count": sum(bool(r.scores.get("unexpected_degraded")) for r in results),
              "low_confidence_model_call_count": sum(bool(r.scores.get("low_confidence_model_call"))
                                                     for r in results)}
    metrics, counts = rules.generation_metrics(scores, summary, extras)
    gates = generation_gates(metrics, judge_configured=judge_configured)
    return GateTable(metrics, counts, gates, _generation_layers(scores))


def _retrieval_layers(scores: list[QuestionScore]) -> list[dict]:
    rows = []
    for layer in LAYERS:
        group = [s for s in scores if s.layer == layer]
        if not group:
            continue
        answerable = [s for s in group if s.answerable]
        members = [s for s in answerable if s.member_hit is not None]
        rows.append({"layer": layer, "questions": len(group), "metrics": {
            "class_hit": rate([s.class_hit for s in answerable]),
            "member_hit": rate([s.member_hit for s in members]),
            "hit_at_1": rate([s.hit_at_1 for s in answerable]),
            "hit_at_3": rate([s.hit_at_3 for s in answerable]),
            "empty": rate([s.empty for s in group])}})
    return rows


def _generation_layers(scores: list[rules.GenerationScore]) -> list[dict]:
    rows = []
    for label, group in (("answerable", [s for s in scores if s.answerable]),
                         ("negative", [s for s in scores if not s.answerable])):
        if not group:
            continue
        names = sorted({name for s in group for name, v in s.rules.items() if v is not None})
        rows.append({"layer": label, "questions": len(group), "metrics": {
            name: rate([s.rules.get(name) for s in group]) for name in names}})
    return rows
