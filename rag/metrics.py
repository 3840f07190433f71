"""Retrieval scoring by rules (seed 001, "检索发版指标"): class hit, member hit, false empty, layers; the
release gate type every gate table uses (retrieval here, generation and the baseline in the evaluation app); and
the registry of every metric a run, a report or a bench prints (`METRICS`: its kind, which direction is better,
its label and what it is computed over). A new metric is one `Metric` entry.

Plain Python, no Django: `make bench` and the evaluation app score with the same functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

OPERATORS = (">=", "<=")
ANSWERABLE_LAYERS = ("plain", "colloquial", "member", "typo", "multi")  # SCHEMA.md's layers, negatives aside
HALVES = ("A", "B")


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: a share (`rate`, 0..1), a mean (`mean`) or a count (`count`), and which way is better."""

    name: str
    kind: str  # "rate", "mean" or "count"
    better: str  # "higher" or "lower"
    label: str  # as tables and reports print it
    of: str  # what it is computed over

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"


_RETRIEVAL_METRICS = (
    Metric("class_hit", "rate", "higher", "class hit", "answerable questions: every expected class in the window"),
    Metric("member_hit", "rate", "higher", "member hit (first 3)", "questions with expected members"),
    Metric("false_empty", "rate", "lower", "false empty", "answerable questions answered with nothing"),
    Metric("colloquial_class_hit", "rate", "higher", "colloquial class hit", "the colloquial layer"),
    Metric("member_layer_member_hit", "rate", "higher", "member-layer member hit", "the member layer"),
    Metric("typo_class_hit", "rate", "higher", "typo class hit", "the typo layer"),
    Metric("multi_class_hit", "rate", "higher", "multi-class class hit", "the multi layer"),
    Metric("hit_at_1", "rate", "higher", "hit@1", "answerable questions: an expected page first"),
    Metric("hit_at_3", "rate", "higher", "hit@3", "answerable questions: an expected page in the first 3"),
    Metric("member_first_hit", "rate", "higher", "member first", "questions with expected members"),
    Metric("member_mrr", "mean", "higher", "member MRR", "questions with expected members, over the window"),
    Metric("strict_class_hit", "rate", "higher", "strict class hit", "answerable questions, class names only"),
    Metric("negative_empty", "rate", "higher", "negatives empty", "chitchat and out-of-catalog questions"),
    Metric("chitchat_empty", "rate", "higher", "chitchat empty", "chitchat questions"),
    Metric("out_of_catalog_empty", "rate", "higher", "out-of-catalog empty", "out-of-catalog questions"),
    Metric("no_answer_empty", "rate", "higher", "no-answer empty", "questions the docs do not answer"),
)
_GENERATION_METRICS = (
    Metric("answer_parses", "rate", "higher", "answer parses", "every question"),
    Metric("confidence_expected", "rate", "higher", "confidence as expected", "every question"),
    Metric("citations_valid", "rate", "higher", "citations valid", "answerable questions"),
    Metric("class_mentioned", "rate", "higher", "class named", "answerable questions"),
    Metric("member_mentioned", "rate", "higher", "member named", "answerable questions"),
    Metric("path_clean", "rate", "higher", "no file paths", "every question"),
    Metric("negative_refused", "rate", "higher", "negatives refused", "questions the docs cannot answer"),
    Metric("expected_class_discarded", "rate", "lower", "expected class only discarded", "answerable questions"),
    Metric("must_mention", "rate", "higher", "every must-mention fact", "answerable questions with must_mention"),
    Metric("no_forbidden_claim", "rate", "higher", "no forbidden claim", "questions with forbidden claims"),
    Metric("code_block", "rate", "higher", "code block when needed", "questions that need code"),
    Metric("judge_pass", "rate", "higher", "judge pass", "judged questions"),
    Metric("hallucination_count", "count", "lower", "hallucinations", "judged questions"),
    Metric("correct_rate", "rate", "higher", "judged correct", "judged questions"),
    Metric("unexpected_degraded_count", "count", "lower", "unexpected degraded answers", "every question"),
    Metric("low_confidence_model_call_count", "count", "lower", "model calls on low confidence", "every question"),
    Metric("newly_failing_count", "count", "lower", "newly failing", "questions that passed in the baseline run"),
)
METRICS: dict[str, Metric] = {m.name: m for m in (*_RETRIEVAL_METRICS, *_GENERATION_METRICS)}
LAYER_PREFIX = "layer:"  # "layer:<layer>": class hit of one layer's answerable questions


def metric(name: str) -> Metric | None:
    """The registered metric of a name, a layer's class hit for "layer:<layer>", None for an unknown name."""
    if name.startswith(LAYER_PREFIX):
        layer = name[len(LAYER_PREFIX):]
        return Metric(name, "rate", "higher", f"class hit · {layer}", f"the {layer} layer's answerable questions")
    return METRICS.get(name)


def metric_label(name: str) -> str:
    found = metric(name)
    return found.label if found is not None else name


def lower_is_better(name: str) -> bool:
    found = metric(name)
    return found is not None and found.lower_is_better


@dataclass(frozen=True, slots=True)
class Gate:
    """A release gate: `metric op threshold`.

    A layer gate is skipped while its layer has fewer than `minimum` questions; a judge gate is not scored
    without a judge model.
    """

    metric: str
    op: str  # ">=" or "<="
    threshold: float  # a fraction for a rate, an integer for a *_count metric
    layer: str = ""
    minimum: int = 0
    needs_judge: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"a gate's op is one of {', '.join(OPERATORS)}, not {self.op!r}")

    def check(self, value: float | None, *, counts: Mapping[str, int] | None = None, judge_configured: bool = True,
              unmeasured: str = "no question this metric applies to") -> GateResult:
        """Compare a metric's value with this gate; say why when it cannot be compared.

        `counts` holds the question count per layer (for a layer gate); `unmeasured` is the note when the
        value is None because nothing was measured.
        """
        if self.needs_judge and not judge_configured:
            return self._result(None, "not_scored", "no judge model configured")
        if self.layer and (questions := (counts or {})[self.layer]) < self.minimum:
            # Decided by the count, not the value: a small layer's rate says too little either way.
            return self._result(value, "skipped", f"the {self.layer} layer has {questions} question(s), "
                                                  f"needs {self.minimum}")
        if value is None:
            if self.needs_judge:
                return self._result(None, "not_scored", "no judged question")
            return self._result(None, "skipped", unmeasured)
        passed = value >= self.threshold if self.op == ">=" else value <= self.threshold
        return self._result(value, "pass" if passed else "fail")

    def _result(self, value, status: str, note: str = "") -> GateResult:
        return GateResult(metric=self.metric, op=self.op, threshold=self.threshold, value=value, status=status,
                          note=note)


@dataclass(frozen=True, slots=True)
class GateResult:
    """One row of a gate table: the gate, the measured value and its status, with a note when not compared."""

    metric: str
    op: str
    threshold: float
    value: float | None
    status: str  # "pass", "fail", "skipped" (does not block) or "not_scored" (blocks a pass verdict)
    note: str = ""

    def as_dict(self) -> dict:
        """The stored shape of a gate row (`EvalRun.gates`, reports, the eval center, `rag reindex --gate`)."""
        return {"metric": self.metric, "op": self.op, "threshold": self.threshold, "value": self.value,
                "status": self.status, "note": self.note}


# Default release gates and the minimum question count under which a layer gate is skipped (seed 001).
RETRIEVAL_GATES = (
    Gate("class_hit", ">=", 0.90),
    Gate("member_hit", ">=", 0.75),
    Gate("false_empty", "<=", 0.02),
    Gate("colloquial_class_hit", ">=", 0.70, layer="colloquial", minimum=5),
    Gate("member_layer_member_hit", ">=", 0.70, layer="member", minimum=5),
    Gate("typo_class_hit", ">=", 0.50, layer="typo", minimum=3),
)


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    class_name: str
    member: str
    source: str


@dataclass
class QuestionScore:
    id: str
    layer: str
    answerable: bool
    empty: bool
    class_hit: bool = False
    strict_class_hit: bool = False
    hit_at_1: bool = False
    hit_at_3: bool = False
    member_hit: bool | None = None  # None: the question asks for no member
    member_first: bool | None = None
    member_rr: float | None = None
    negative_kind: str = ""
    window: int = 5


def class_window(expected_classes: list[str]) -> int:
    """Single class: the first 5; several: max(5, 3 x number of classes) (seed 001)."""
    return max(5, 3 * len(expected_classes))


def page_matches(chunk: RetrievedChunk, name: str) -> bool:
    """A chunk comes from the page of a class when its structured name or its file name is that class."""
    return chunk.class_name == name or PurePosixPath(chunk.source).stem == name


def score_question(item: dict, results: list[RetrievedChunk]) -> QuestionScore:
    """Score one golden question (the SCHEMA.md shape) against the chunks retrieved for it, best first."""
    expected = item.get("expected_classes") or []
    members = set(item.get("expected_members") or [])
    score = QuestionScore(
        id=item["id"], layer=item["layer"], answerable=bool(item["answerable"]), empty=not results,
        negative_kind=item.get("negative_kind", ""), window=class_window(expected),
    )
    if not score.answerable:
        return score
    window = results[: score.window]

    def all_classes_in(chunks, strict=False) -> bool:
        match = (lambda c, n: c.class_name == n) if strict else page_matches
        return bool(expected) and all(any(match(c, name) for c in chunks) for name in expected)

    score.class_hit = all_classes_in(window)
    score.strict_class_hit = all_classes_in(window, strict=True)
    score.hit_at_1 = any(page_matches(c, n) for c in results[:1] for n in expected)
    score.hit_at_3 = any(page_matches(c, n) for c in results[:3] for n in expected)
    if members:
        def is_member(c: RetrievedChunk) -> bool:
            return c.member in members and any(page_matches(c, n) for n in expected)

        score.member_hit = any(is_member(c) for c in results[:3])
        score.member_first = bool(results) and is_member(results[0])
        rank = next((n for n, c in enumerate(window, start=1) if is_member(c)), None)
        score.member_rr = 1.0 / rank if rank else 0.0
    return score


def rate(values) -> float | None:
    """The share of true values; None values (a rule that does not apply) are left out."""
    values = [v for v in values if v is not None]
    return sum(bool(v) for v in values) / len(values) if values else None


@dataclass
class RetrievalReport:
    metrics: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    gates: list[GateResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(gate.status != "fail" for gate in self.gates)


def summarize(scores: list[QuestionScore]) -> RetrievalReport:
    """Rates and counts over scored questions, and the retrieval gate table."""
    answerable = [s for s in scores if s.answerable]
    with_members = [s for s in answerable if s.member_hit is not None]
    layer = lambda name: [s for s in answerable if s.layer == name]  # noqa: E731
    member_layer = [s for s in layer("member") if s.member_hit is not None]
    negatives = [s for s in scores if not s.answerable]
    must_be_empty = [s for s in negatives if s.negative_kind in ("chitchat", "out_of_catalog")]
    metrics = {
        "class_hit": rate([s.class_hit for s in answerable]),
        "member_hit": rate([s.member_hit for s in with_members]),
        "false_empty": rate([s.empty and not s.class_hit for s in answerable]),
        "colloquial_class_hit": rate([s.class_hit for s in layer("colloquial")]),
        "member_layer_member_hit": rate([s.member_hit for s in member_layer]),
        "typo_class_hit": rate([s.class_hit for s in layer("typo")]),
        "multi_class_hit": rate([s.class_hit for s in layer("multi")]),
        "hit_at_1": rate([s.hit_at_1 for s in answerable]),
        "hit_at_3": rate([s.hit_at_3 for s in answerable]),
        "member_first_hit": rate([s.member_first for s in with_members]),
        "member_mrr": (sum(s.member_rr for s in with_members) / len(with_members)) if with_members else None,
        "strict_class_hit": rate([s.strict_class_hit for s in answerable]),
        "negative_empty": rate([s.empty for s in must_be_empty]),
        "chitchat_empty": rate([s.empty for s in negatives if s.negative_kind == "chitchat"]),
        "out_of_catalog_empty": rate([s.empty for s in negatives if s.negative_kind == "out_of_catalog"]),
        "no_answer_empty": rate([s.empty for s in negatives if s.negative_kind == "no_answer"]),
    }
    counts = {
        "answerable": len(answerable),
        "with_members": len(with_members),
        "colloquial": len(layer("colloquial")),
        "member": len(member_layer),
        "typo": len(layer("typo")),
        "multi": len(layer("multi")),
        "negatives": len(negatives),
    }
    gates = [gate.check(metrics[gate.metric], counts=counts) for gate in RETRIEVAL_GATES]
    return RetrievalReport(metrics=metrics, counts=counts, gates=gates)


def id_half(question_id: str) -> str:
    """Name the fixed half of a golden question: "A" when its id ends in an odd number, "B" when even.

    The rule reads only the id (`r-001` is A, `rd-064` is B), so the halves never change between runs and
    a question keeps its half when others are added.
    """
    suffix = re.search(r"(\d+)$", question_id)
    if suffix is None:
        raise ValueError(f"a golden question's id ends in a number (r-001, rd-017), not {question_id!r}")
    return "A" if int(suffix.group(1)) % 2 else "B"


def split_halves(scores: list[QuestionScore]) -> dict[str, list[QuestionScore]]:
    """Split scored questions into the two fixed halves of `id_half`, each in the given order."""
    halves: dict[str, list[QuestionScore]] = {half: [] for half in HALVES}
    for score in scores:
        halves[id_half(score.id)].append(score)
    return halves


def class_hit_by_layer(scores: list[QuestionScore]) -> dict[str, float | None]:
    """Class hit of the answerable questions of each layer; None for a layer with no question."""
    return {layer: rate([s.class_hit for s in scores if s.answerable and s.layer == layer])
            for layer in ANSWERABLE_LAYERS}
