"""Retrieval scoring by rules (seed 001, "检索发版指标"): class hit, member hit, false empty, layers, gates."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

# Default release gates and the minimum question count under which a layer gate is skipped (seed 001).
RETRIEVAL_GATES = (
    ("class_hit", ">=", 0.90, None, 0),
    ("member_hit", ">=", 0.75, None, 0),
    ("false_empty", "<=", 0.02, None, 0),
    ("colloquial_class_hit", ">=", 0.70, "colloquial", 5),
    ("member_layer_member_hit", ">=", 0.70, "member", 5),
    ("typo_class_hit", ">=", 0.50, "typo", 3),
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


def _page_matches(chunk: RetrievedChunk, name: str) -> bool:
    """A chunk comes from the page of a class when its structured name or its file name is that class."""
    return chunk.class_name == name or PurePosixPath(chunk.source).stem == name


def score_question(item: dict, results: list[RetrievedChunk]) -> QuestionScore:
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
        match = (lambda c, n: c.class_name == n) if strict else _page_matches
        return bool(expected) and all(any(match(c, name) for c in chunks) for name in expected)

    score.class_hit = all_classes_in(window)
    score.strict_class_hit = all_classes_in(window, strict=True)
    score.hit_at_1 = any(_page_matches(c, n) for c in results[:1] for n in expected)
    score.hit_at_3 = any(_page_matches(c, n) for c in results[:3] for n in expected)
    if members:
        def is_member(c: RetrievedChunk) -> bool:
            return c.member in members and any(_page_matches(c, n) for n in expected)

        score.member_hit = any(is_member(c) for c in results[:3])
        score.member_first = bool(results) and is_member(results[0])
        rank = next((n for n, c in enumerate(window, start=1) if is_member(c)), None)
        score.member_rr = 1.0 / rank if rank else 0.0
    return score


def _rate(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class RetrievalReport:
    metrics: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    gates: list = field(default_factory=list)  # (metric, op, threshold, value, status)

    @property
    def passed(self) -> bool:
        return all(status != "fail" for *_, status in self.gates)


def summarize(scores: list[QuestionScore]) -> RetrievalReport:
    answerable = [s for s in scores if s.answerable]
    with_members = [s for s in answerable if s.member_hit is not None]
    layer = lambda name: [s for s in answerable if s.layer == name]  # noqa: E731
    member_layer = [s for s in layer("member") if s.member_hit is not None]
    negatives = [s for s in scores if not s.answerable]
    must_be_empty = [s for s in negatives if s.negative_kind in ("chitchat", "out_of_catalog")]
    metrics = {
        "class_hit": _rate([s.class_hit for s in answerable]),
        "member_hit": _rate([s.member_hit for s in with_members]),
        "false_empty": _rate([s.empty and not s.class_hit for s in answerable]),
        "colloquial_class_hit": _rate([s.class_hit for s in layer("colloquial")]),
        "member_layer_member_hit": _rate([s.member_hit for s in member_layer]),
        "typo_class_hit": _rate([s.class_hit for s in layer("typo")]),
        "multi_class_hit": _rate([s.class_hit for s in layer("multi")]),
        "hit_at_1": _rate([s.hit_at_1 for s in answerable]),
        "hit_at_3": _rate([s.hit_at_3 for s in answerable]),
        "member_first_hit": _rate([s.member_first for s in with_members]),
        "member_mrr": (sum(s.member_rr for s in with_members) / len(with_members)) if with_members else None,
        "strict_class_hit": _rate([s.strict_class_hit for s in answerable]),
        "negative_empty": _rate([s.empty for s in must_be_empty]),
        "chitchat_empty": _rate([s.empty for s in negatives if s.negative_kind == "chitchat"]),
        "out_of_catalog_empty": _rate([s.empty for s in negatives if s.negative_kind == "out_of_catalog"]),
        "no_answer_empty": _rate([s.empty for s in negatives if s.negative_kind == "no_answer"]),
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
    gates = []
    for metric, op, threshold, layer_name, minimum in RETRIEVAL_GATES:
        value = metrics[metric]
        if layer_name and counts[layer_name] < minimum:
            gates.append((metric, op, threshold, value, "skipped"))
        elif value is None:
            gates.append((metric, op, threshold, value, "skipped"))
        else:
            ok = value >= threshold if op == ">=" else value <= threshold
            gates.append((metric, op, threshold, value, "pass" if ok else "fail"))
    return RetrievalReport(metrics=metrics, counts=counts, gates=gates)
