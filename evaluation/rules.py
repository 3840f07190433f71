"""Scoring by rules, plain Python: generation rules per question, generation metrics, attribution of failed
questions. Metric names follow seed 001 ("生成发版指标"); retrieval scoring and the gate type are
`rag.metrics` (shared with `make bench`), the gate tables `evaluation.services.gates`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rag.metrics import QuestionScore, RetrievedChunk, rate

USABLE_CONFIDENCE = ("high", "medium")  # "low" says the evidence is insufficient; "none" is an empty answer

# A file path (dir/name.ext) or an example-scene path in an answer leaks internals the reader cannot open.
PATH_RE = re.compile(
    r"(?:[A-Za-z]:\\|(?<![\w.])/(?:[\w.-]+/)+[\w.-]*|\b[\w.-]+/(?:[\w.-]+/)*[\w-]+\.(?:md|html?|js|mjs|ts|json|glb"
    r"|gltf|fbx|obj|png|jpe?g|gif|webp|hdr|exr|ktx2|wasm|css|txt|py)\b"
    r"|\b(?:examples?|scenes?)/[\w-]+(?:/[\w.-]+)+|\b(?:examples?|scenes?)/[\w-]+\.\w+)")
CODE_FENCE_RE = re.compile(r"```")


@dataclass(frozen=True)
class GenerationOutcome:
    """What the engine answered for one golden question, as the rules need it."""

    text: str
    confidence: str
    mode: str
    citations: tuple[str, ...]  # cited chunk ids (valid ones)
    invalid_citations: int
    evidence: tuple[RetrievedChunk, ...]  # adopted chunks, in order
    evidence_ids: tuple[str, ...]
    discarded: tuple[RetrievedChunk, ...]  # found by retrieval but not adopted
    model_called: bool
    degraded: bool = False
    evidence_text: str = ""  # the adopted chunks' text, to tell "generation missed it" from "never had it"


@dataclass
class GenerationScore:
    id: str
    answerable: bool
    rules: dict = field(default_factory=dict)  # rule -> True (ok), False (broken) or None (not applicable)

    @property
    def rules_passed(self) -> bool:
        return all(value is not False for value in self.rules.values())


def _mentions(text: str, word: str) -> bool:
    return word.lower() in text.lower()


def _from_class(chunk: RetrievedChunk, name: str) -> bool:
    return chunk.class_name == name or chunk.source.rsplit("/", 1)[-1].rsplit(".", 1)[0] == name


def score_generation(item: dict, outcome: GenerationOutcome) -> GenerationScore:
    """Seed 001's generation rules for one question; None marks a rule that does not apply to it."""
    answerable = bool(item["answerable"])
    expected = item.get("expected_classes") or []
    members = item.get("expected_members") or []
    text = outcome.text or ""
    parses = isinstance(outcome.text, str) and outcome.confidence in ("high", "medium", "low", "none")
    confidence_ok = (outcome.confidence in USABLE_CONFIDENCE) if answerable else outcome.confidence == "none"
    answered = answerable and confidence_ok
    rules = {
        "answer_parses": parses,
        "confidence_expected": confidence_ok,
        "citations_valid": (bool(outcome.citations) and outcome.invalid_citations == 0
                            and all(c in outcome.evidence_ids for c in outcome.citations)) if answered else None,
        "class_mentioned": all(_mentions(text, name) for name in expected) if answered and expected else None,
        "member_mentioned": all(_mentions(text, m) for m in members) if answerable and members else None,
        "path_clean": not PATH_RE.search(text) and not any(c.source and c.source in text for c in outcome.evidence),
        "negative_refused": (outcome.confidence == "none" and not outcome.evidence and not outcome.model_called)
        if not answerable else None,
        "expected_class_not_discarded": (not any(
            all(not _from_class(c, name) for c in outcome.evidence)
            and any(_from_class(c, name) for c in outcome.discarded)
            for name in expected)) if answerable and expected else None,
        "must_mention": all(_mentions(text, w) for w in item.get("must_mention") or []) if answerable and item.get(
            "must_mention") else None,
        "no_forbidden_claim": not any(_mentions(text, claim) for claim in item.get("forbidden") or [])
        if item.get("forbidden") else None,
        "code_block": bool(CODE_FENCE_RE.search(text)) if item.get("needs_code") else None,
    }
    return GenerationScore(id=item["id"], answerable=answerable, rules=rules)


@dataclass(frozen=True)
class JudgeSummary:
    """The judge's verdicts over a run: None when no judge is configured."""

    judged: int  # questions with a verdict that is not flaky
    passed: int
    hallucinations: int
    correct: int
    flaky: int
    errors: int


def generation_metrics(scores: list[GenerationScore], judge: JudgeSummary | None,
                       extras: dict | None = None) -> tuple[dict, dict]:
    """Metrics and counts of a generation run (rates are fractions; *_count are counts)."""
    answerable = [s for s in scores if s.answerable]
    negatives = [s for s in scores if not s.answerable]
    rule = lambda name, group: [s.rules.get(name) for s in group]  # noqa: E731
    metrics = {
        "answer_parses": rate(rule("answer_parses", scores)),
        "confidence_expected": rate(rule("confidence_expected", scores)),
        "citations_valid": rate(rule("citations_valid", answerable)),
        "class_mentioned": rate(rule("class_mentioned", answerable)),
        "member_mentioned": rate(rule("member_mentioned", answerable)),
        "path_clean": rate(rule("path_clean", scores)),
        "negative_refused": rate(rule("negative_refused", negatives)),
        # The share of answerable questions whose expected class was found but only in discarded chunks.
        "expected_class_discarded": (lambda r: None if r is None else 1 - r)(
            rate(rule("expected_class_not_discarded", answerable))),
        "must_mention": rate(rule("must_mention", answerable)),
        "no_forbidden_claim": rate(rule("no_forbidden_claim", scores)),
        "code_block": rate(rule("code_block", scores)),
        "judge_pass": (judge.passed / judge.judged if judge.judged else None) if judge else None,
        "hallucination_count": judge.hallucinations if judge else None,
        "correct_rate": (judge.correct / judge.judged if judge.judged else None) if judge else None,
        **(extras or {}),
    }
    counts = {"questions": len(scores), "answerable": len(answerable), "negatives": len(negatives),
              "judged": judge.judged if judge else 0, "flaky": judge.flaky if judge else 0,
              "judge_errors": judge.errors if judge else 0}
    return metrics, counts


# -- attribution --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attribution:
    code: str
    detail: str = ""


def attribute_retrieval(item: dict, score: QuestionScore, plan: dict, ranked: list[RetrievedChunk],
                        adopted: list[RetrievedChunk], excluded: list[RetrievedChunk]) -> Attribution:
    """Why a retrieval question failed: the plan, exclusion, the window, or retrieval itself.

    `ranked` is every chunk any route found, best first (the fused ranking); `adopted` what was kept.
    """
    if not item["answerable"]:
        return Attribution("plan_error", f"should be empty ({item.get('negative_kind') or 'negative'}) but "
                                         f"{len(adopted)} chunk(s) were adopted")
    expected = item.get("expected_classes") or []
    if plan.get("kind") in ("chitchat", "out_of_catalog"):
        return Attribution("plan_error", f"planned as {plan['kind']}")
    corrections = plan.get("corrections") or []
    wrong = [c for c in corrections if c.get("to") not in expected]
    missing = [n for n in expected if not any(_from_class(c, n) for c in adopted[: score.window])]
    if wrong and missing:
        return Attribution("plan_error", "corrected " + ", ".join(f"{c['from']}→{c['to']}" for c in wrong))
    members = set(item.get("expected_members") or [])
    if not missing and members:  # the class is there: the member is what failed
        def is_member(c):
            return c.member in members and any(_from_class(c, n) for n in expected)
        if any(is_member(c) for c in excluded):
            return Attribution("adopted_but_excluded", "the member's chunk was excluded")
        rank = next((n for n, c in enumerate(ranked, start=1) if is_member(c)), None)
        if rank is not None:
            return Attribution("outside_window", f"member found at rank {rank}, outside the first 3")
        return Attribution("not_retrieved", "no route found the member")
    for name in missing:
        if any(_from_class(c, name) for c in excluded):
            return Attribution("adopted_but_excluded", f"{name} was only in excluded chunks")
    for name in missing:
        rank = next((n for n, c in enumerate(ranked, start=1) if _from_class(c, name)), None)
        if rank is not None:
            return Attribution("outside_window", f"{name} found at rank {rank}, outside the window of {score.window}")
    return Attribution("not_retrieved", "no route found " + ", ".join(missing))


def attribute_generation(item: dict, score: GenerationScore, outcome: GenerationOutcome,
                         retrieval: Attribution | None, judge: dict | None) -> Attribution:
    """Why a generation question failed, first cause first: retrieval, then the answer, then the judge."""
    rules = score.rules
    if not item["answerable"]:
        if rules.get("negative_refused") is False:
            return Attribution("plan_error", "answered a question that should be refused"
                               + (" (the model was called)" if outcome.model_called else ""))
    if rules.get("expected_class_not_discarded") is False:
        return Attribution("expected_class_discarded", "the expected class was only in discarded chunks")
    if retrieval is not None:
        return retrieval
    if rules.get("citations_valid") is False:
        return Attribution("citation_wrong", "no valid citation" if not outcome.citations
                           else f"{outcome.invalid_citations} citation(s) outside the evidence")
    for name in ("confidence_expected", "class_mentioned", "member_mentioned", "must_mention", "code_block",
                 "no_forbidden_claim", "path_clean", "answer_parses"):
        if rules.get(name) is False:
            return Attribution("generation_missed", f"rule {name} failed")
    if judge and (not judge.get("passed") or judge.get("hallucination")):
        return Attribution("judge_flagged", (judge.get("notes") or "")[:200])
    return Attribution("", "")
