"""Generation (E8, E9): numbered evidence in, a cited answer out.

Two `Generator`s with the same `run()` and `stream()`: `LlmGenerator` asks an OpenAI-compatible chat model
(`llm.ChatClient`) through a circuit breaker (`breaker.CircuitBreaker`); `ExtractiveGenerator` builds a
cited answer from the evidence alone when no model is configured or the breaker is open. Citations of
either are checked against this request's evidence before the answer leaves the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterator, Protocol

from .breaker import CircuitBreaker
from .llm import ChatClient, GenerationError
from .types import Answer, Citation, Hit, Plan, Token, Usage

CITATION_RE = re.compile(r"\[(\d{1,3})\]")
SENTENCE_RE = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s+")
CONFIDENCE_ORDER = ("none", "low", "medium", "high")

CHITCHAT_REPLY = ("我是文档助手，只回答这套 SDK 文档里的问题，例如某个类怎么用、某个属性的默认值。"
                  " / I answer questions about this SDK's documentation: how a class is used, a member's default, and so on.")
INSUFFICIENT = "资料不足：文档中没有找到能回答这个问题的内容。 / Not enough material: the documentation has nothing that answers this."


class Generator(Protocol):
    """Write a cited answer from numbered evidence, whole (`run`) or as it is written (`stream`)."""

    uses_model: bool  # True when answers cost model tokens (a token pool is charged only then)

    def run(self, question: str, plan: Plan, hits: list[Hit]) -> Answer: ...

    def stream(self, question: str, plan: Plan, hits: list[Hit]) -> Iterator[Token | Answer]:
        """Yield `Token`s as the answer is written, then the checked `Answer` last."""
        ...


# -- prompt and citation check ------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You answer questions about an SDK's API documentation using only the numbered evidence given. "
    "Cite every fact with the number of its evidence in square brackets, like [1] or [2][3]. "
    "If the evidence does not answer the question, say so plainly instead of guessing. "
    "Do not mention file paths. Answer in the language of the question; use Markdown and code blocks where useful."
)


def inheritance_note(plan: Plan | None) -> str:
    """Say which page documents a member asked on a class that inherits it, in the question's language."""
    if plan is None or not plan.inherited or not plan.classes:
        return ""
    asked = plan.classes[0]
    if re.search(r"[\u3400-\u9fff]", plan.question):
        return "；".join(f"{asked} 的 `{member}` 继承自 {owner}，写在 {owner} 的页面上" for member, owner in plan.inherited) + "。"
    return " ".join(f"{asked} inherits `{member}`: it is documented on the page of {owner}." for member, owner in plan.inherited)


def build_messages(question: str, hits: list[Hit], plan: Plan | None = None) -> list[dict]:
    """Number the evidence and ask for a cited answer."""
    blocks = []
    for number, hit in enumerate(hits, start=1):
        chunk = hit.chunk
        heading = " > ".join(chunk.heading_path) or chunk.title
        blocks.append(f"[{number}] {heading}\n{chunk.text}")
    evidence = "\n\n".join(blocks)
    note = inheritance_note(plan)
    note = f"\n\nNote: {note}" if note else ""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Evidence:\n\n{evidence}{note}\n\nQuestion: {question}"},
    ]


def check_citations(text: str, hits: list[Hit]) -> tuple[str, tuple[Citation, ...], tuple[int, ...]]:
    """Keep the citations that point into this request's evidence; strip the others from the text."""
    valid: dict[int, Citation] = {}
    invalid: list[int] = []

    def keep(match: re.Match) -> str:
        number = int(match.group(1))
        if 1 <= number <= len(hits):
            chunk = hits[number - 1].chunk
            valid.setdefault(number, Citation(number, chunk.chunk_id, chunk.source, chunk.heading_path))
            return match.group(0)
        invalid.append(number)
        return ""

    cleaned = CITATION_RE.sub(keep, text)
    return cleaned, tuple(valid[n] for n in sorted(valid)), tuple(dict.fromkeys(invalid))


def lower(confidence: str, steps: int = 1) -> str:
    return CONFIDENCE_ORDER[max(0, CONFIDENCE_ORDER.index(confidence) - steps)]


def evidence_confidence(plan: Plan, hits: list[Hit]) -> str:
    """How much the evidence itself supports an answer: named classes found, or only loose matches."""
    if not hits:
        return "none"
    if plan.classes and any(h.chunk.class_name in plan.classes for h in hits[:3]):
        return "high"
    return "medium"


def finish(answer_text: str, hits: list[Hit], confidence: str, **fields) -> Answer:
    """Check citations, then lower confidence for each problem: invalid citations, or none valid at all."""
    text, citations, invalid = check_citations(answer_text, hits)
    if invalid:
        confidence = lower(confidence)
    if not citations:
        confidence = "low" if confidence != "none" else "none"
    return Answer(text=text.strip(), citations=citations, confidence=confidence, invalid_citations=invalid, **fields)


# -- generators ----------------------------------------------------------------------------------------


@dataclass
class ExtractiveGenerator:
    """Answer from the evidence alone: each cited chunk's member heading, the sentences sharing the
    question's words, and its first code example."""

    max_chunks: int = 3
    max_sentences: int = 2
    uses_model: bool = field(default=False, init=False)

    def stream(self, question: str, plan: Plan, hits: list[Hit]) -> Iterator[Token | Answer]:
        answer = self.run(question, plan, hits)
        yield Token(answer.text)
        yield answer

    def run(self, question: str, plan: Plan, hits: list[Hit], *, note: str = "") -> Answer:
        from .text import tokenize

        words = {t for t in tokenize(question) if len(t) > 1}
        parts = [n for n in (note, inheritance_note(plan)) if n]
        for number, hit in enumerate(hits[: self.max_chunks], start=1):
            chunk = hit.chunk
            lines = chunk.text.splitlines()
            heading = next((l.lstrip("#").strip() for l in lines if l.startswith("#")), chunk.title)
            prose, code, in_code = [], [], False
            for line in lines:
                if line.lstrip().startswith(("```", "~~~")):
                    in_code = not in_code
                    if in_code and code:
                        break
                    code.append(line)
                elif in_code:
                    code.append(line)
                elif line.strip() and not line.startswith("#"):
                    prose.append(line.strip())
            sentences = [s.strip() for s in SENTENCE_RE.split(" ".join(prose)) if s and s.strip()]
            scored = sorted(sentences, key=lambda s: -len(words & set(tokenize(s))))
            chosen = [s for s in sentences if s in scored[: self.max_sentences]] or sentences[:1]
            block = f"**{chunk.class_name}{'.' + chunk.member if chunk.member and chunk.member != chunk.class_name else ''}** — {heading} [{number}]"
            if chosen:
                block += "\n\n" + " ".join(chosen)
            if code and len(code) > 1:
                block += "\n\n" + "\n".join(code if code[-1].lstrip().startswith("```") else code + ["```"])
            parts.append(block)
        confidence = lower(evidence_confidence(plan, hits))  # no model read it: one step less sure
        return finish("\n\n".join(parts), hits, confidence, mode="extractive")


@dataclass
class LlmGenerator:
    """Ask the chat model through the breaker; fall back to the extractive answer when it cannot."""

    client: ChatClient
    breaker: CircuitBreaker
    fallback: ExtractiveGenerator = field(default_factory=ExtractiveGenerator)
    uses_model: bool = field(default=True, init=False)

    def unavailable(self, question: str, plan: Plan, hits: list[Hit], reason: str) -> Answer:
        note = "生成模型暂不可用，以下是检索到的文档片段。 / The generation model is temporarily unavailable; here is the evidence found."
        answer = self.fallback.run(question, plan, hits, note=note)
        return replace(answer, degraded=True, reason=reason)

    def run(self, question: str, plan: Plan, hits: list[Hit]) -> Answer:
        if not self.breaker.allow():
            return self.unavailable(question, plan, hits, "circuit_open")
        try:
            text, usage = self.client.complete(build_messages(question, hits, plan))
        except GenerationError as exc:
            self.breaker.record_failure(exc.kind)
            return self.unavailable(question, plan, hits, f"generation_{exc.kind}")
        self.breaker.record_success()
        return finish(text, hits, evidence_confidence(plan, hits), mode="llm", usage=usage, model_called=True)

    def stream(self, question: str, plan: Plan, hits: list[Hit]) -> Iterator[Token | Answer]:
        """Yield a `Token` per piece the model writes, then the `Answer`.

        A failure mid-answer ends with the degraded evidence answer instead; closing this generator
        (the reader went away) closes the model's HTTP stream.
        """
        if not self.breaker.allow():
            yield self.unavailable(question, plan, hits, "circuit_open")
            return
        pieces: list[str] = []
        usage: list[Usage] = []
        deltas = self.client.stream(build_messages(question, hits, plan), usage_out=usage)
        try:
            for delta in deltas:
                pieces.append(delta)
                yield Token(delta)
        except GenerationError as exc:
            self.breaker.record_failure(exc.kind)
            yield self.unavailable(question, plan, hits, f"generation_{exc.kind}")
            return
        finally:
            deltas.close()  # a reader that left closes this generator: hang up on the model now
        self.breaker.record_success()
        yield finish("".join(pieces), hits, evidence_confidence(plan, hits), mode="llm",
                     usage=usage[0] if usage else Usage(), model_called=True)


def answer_without_model(plan: Plan, hits: list[Hit], *, excluded_all: bool = False,
                         weak_evidence: bool = False) -> Answer | None:
    """The paths that never call a model (E7): chitchat, out-of-catalog, and no usable evidence — none
    adopted, all excluded, or (for a question naming no class or member) none closer than small talk."""
    if plan.kind == "chitchat":
        return Answer(text=CHITCHAT_REPLY, citations=(), confidence="none", mode="chitchat", reason="chitchat")
    if plan.kind == "out_of_catalog":
        names = ", ".join(plan.unknown_identifiers)
        return Answer(text=f"{INSUFFICIENT}（{names}）", citations=(), confidence="none", mode="empty",
                      reason="class_not_in_catalog")
    if not hits:
        return Answer(text=INSUFFICIENT, citations=(), confidence="low", mode="empty",
                      reason="all_evidence_excluded" if excluded_all else
                      ("no_class_matched" if not plan.classes else "no_evidence_for_class"))
    if weak_evidence and not plan.classes and not plan.members:
        return Answer(text=INSUFFICIENT, citations=(), confidence="low", mode="empty", reason="below_threshold")
    return None
