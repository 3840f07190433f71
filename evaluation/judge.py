"""The judge model: reads a question, the reference facts, an answer and its evidence, and scores grounding,
answering and citation alignment 1-5 and flags hallucinations (seed 001, "生成发版指标"). Plain Python.

Verdicts must repeat: temperature 0, a fixed seed, and a cache keyed by (judge model, prompt version,
question, answer, evidence, repeat). With `repeats` > 1 the item is judged that many times and marked flaky
when the verdicts disagree on pass or hallucination; the caller keeps flaky items out of the gate.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Callable

from rag.services.generation import ChatClient, GenerationError

PROMPT_VERSION = "judge-v1"
SCORES = ("grounding", "answering", "citation_alignment", "api_usage")

SYSTEM = (
    "You are a strict reviewer of answers about an SDK's API documentation. You are given a question, the "
    "reference facts a correct answer states, the answer under review and the numbered evidence it was allowed "
    "to use. Score from 1 to 5 (5: fully, 3: partly, 1: clearly not):\n"
    "- grounding: every statement of the answer is supported by the evidence;\n"
    "- answering: the answer answers the question asked;\n"
    "- citation_alignment: each [n] citation points to evidence that says what the sentence claims;\n"
    "- api_usage: the API names, parameters and usage in the answer are correct per the evidence and reference.\n"
    "Set hallucination to true when the answer states any fact, API, member or parameter that is not in the "
    "evidence. Set contradicts_reference to true when the answer contradicts the reference facts.\n"
    "Reply with one JSON object and nothing else: {\"grounding\": n, \"answering\": n, "
    "\"citation_alignment\": n, \"api_usage\": n, \"hallucination\": true|false, "
    "\"contradicts_reference\": true|false, \"notes\": \"one short sentence\"}"
)


class JudgeError(Exception):
    """The judge could not give a verdict (unreachable, or malformed twice)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Verdict:
    grounding: int
    answering: int
    citation_alignment: int
    api_usage: int
    hallucination: bool
    contradicts_reference: bool
    notes: str = ""

    @property
    def passed(self) -> bool:
        """Judge pass: grounding, answering and citation alignment at least 4, and no hallucination."""
        return min(self.grounding, self.answering, self.citation_alignment) >= 4 and not self.hallucination

    @property
    def correct(self) -> bool:
        """A correct answer: API usage and answering at least 4, no hallucination, nothing against the reference."""
        return (self.api_usage >= 4 and self.answering >= 4 and not self.hallucination
                and not self.contradicts_reference)

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed, "correct": self.correct}


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict  # the first verdict; with repeats, the others only decide `flaky`
    flaky: bool
    verdicts: tuple[Verdict, ...]
    cached: int  # how many of the verdicts came from the cache

    def as_dict(self) -> dict:
        return {**self.verdict.as_dict(), "flaky": self.flaky, "repeats": len(self.verdicts), "cached": self.cached,
                "all": [v.as_dict() for v in self.verdicts] if len(self.verdicts) > 1 else []}


def parse_verdict(text: str) -> Verdict:
    """The JSON object in the judge's reply (code fences and text around it are tolerated), strictly checked."""
    # Decode from each "{" rather than take the span from the first "{" to the last "}": prose around the
    # verdict may quote code with braces, and at temperature 0 the retry would repeat that reply.
    decoder, data = json.JSONDecoder(), None
    for match in re.finditer(r"\{", text or ""):
        try:
            candidate, _end = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(candidate, dict) and any(name in candidate for name in SCORES):
            data = candidate
            break
    if data is None:
        raise ValueError("no JSON verdict object in the reply")
    scores = {}
    for name in SCORES:
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
            raise ValueError(f"{name} must be an integer from 1 to 5")
        scores[name] = value
    flags = {}
    for name in ("hallucination", "contradicts_reference"):
        if not isinstance(data.get(name), bool):
            raise ValueError(f"{name} must be true or false")
        flags[name] = data[name]
    notes = data.get("notes", "")
    return Verdict(**scores, **flags, notes=notes[:500] if isinstance(notes, str) else "")


def evidence_block(evidence: list[dict]) -> str:
    return "\n\n".join(f"[{n}] {e.get('source', '')} · {e.get('heading_path', '')}\n{e.get('text', '')}"
                       for n, e in enumerate(evidence, start=1))


def cache_key(model: str, question: str, answer: str, evidence: list[dict], reference: str, repeat: int) -> str:
    payload = json.dumps([model, PROMPT_VERSION, question, answer, evidence_block(evidence), reference, repeat],
                         ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class Judge:
    """Judge answers with one model; `cache_get(key)` / `cache_put(key, verdict_dict)` persist verdicts."""

    client: ChatClient
    repeats: int = 1
    cache_get: Callable[[str], dict | None] = lambda key: None
    cache_put: Callable[[str, dict], None] = lambda key, verdict: None

    @property
    def model(self) -> str:
        return self.client.model

    def describe(self) -> dict:
        return {"model": self.model, "prompt_version": PROMPT_VERSION, "repeats": self.repeats,
                "seed": self.client.seed}

    def run(self, *, question: str, answer: str, evidence: list[dict], reference: str = "") -> Judgement:
        verdicts, cached = [], 0
        for repeat in range(self.repeats):
            key = cache_key(self.model, question, answer, evidence, reference, repeat)
            stored = self.cache_get(key)
            if stored is not None:
                verdicts.append(parse_verdict(json.dumps(stored)))
                cached += 1
                continue
            verdict = self._ask(question, answer, evidence, reference)
            self.cache_put(key, {k: v for k, v in verdict.as_dict().items() if k not in ("passed", "correct")})
            verdicts.append(verdict)
        flaky = len({(v.passed, v.hallucination) for v in verdicts}) > 1
        return Judgement(verdict=verdicts[0], flaky=flaky, verdicts=tuple(verdicts), cached=cached)

    def _ask(self, question: str, answer: str, evidence: list[dict], reference: str) -> Verdict:
        user = (f"Question:\n{question}\n\nReference facts:\n{reference or '(none given)'}\n\n"
                f"Answer under review:\n{answer}\n\nEvidence:\n{evidence_block(evidence) or '(none)'}")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        for attempt in range(2):  # a malformed reply is retried once
            try:
                text, _usage = self.client.complete(messages)
            except GenerationError as exc:
                raise JudgeError("unavailable", f"the judge model failed: {exc}") from exc
            try:
                return parse_verdict(text)
            except (ValueError, TypeError):
                if attempt == 1:
                    raise JudgeError("malformed", "the judge model returned a malformed verdict twice") from None
        raise AssertionError("unreachable")
