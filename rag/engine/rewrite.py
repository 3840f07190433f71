"""Query rewriting (seed 002's "agent enhanced search"): the generation model turns a question into search
keywords, and those keywords are searched beside the question and fused with it by RRF.

`QueryRewriter.run(question) -> Rewrite` asks the model; the search puts the keywords in its query, and the
rewrite routes (rag.engine.routes: `dense:rewrite` and `bm25:rewrite`) search them.
A rewrite that fails gives no keywords and no routes: the question is searched as without it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from .breaker import CircuitBreaker
from .llm import ChatClient, GenerationError, reply_text
from .routes import elapsed_ms
from .types import Usage

MAX_KEYWORD_CHARS = 300  # a longer reply is an answer or an essay, not keywords

REWRITE_PROMPT = (
    "You turn a developer's question about an SDK's API documentation into search keywords for its "
    "documentation search. Keep every API identifier in the question exactly as written (class, method, "
    "property, constant and option names). Add the class and member names the answer most likely lives "
    "under. Write the other keywords in the language of the question, and add the English identifiers. "
    "Reply with the keywords only, on one line, separated by spaces: no explanation, no numbering."
)
LABEL_RE = re.compile(r"^(?:search\s+)?(?:keywords?|关键词|关键字|检索词)\s*[:：]\s*", re.I)
BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)、])\s+")


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The model's keywords for a question, or why there are none."""

    keywords: str  # "" when the model gave nothing usable (or only the question again)
    elapsed_ms: float = 0.0
    error: str = ""  # why the rewrite failed; "" when it did not
    usage: Usage = field(default_factory=Usage)


def rewrite_messages(question: str) -> list[dict]:
    return [{"role": "system", "content": REWRITE_PROMPT}, {"role": "user", "content": question}]


def parse_keywords(text: str, *, max_chars: int = MAX_KEYWORD_CHARS) -> str:
    """Read the model's reply as one line of keywords; raise ValueError when it is empty or too long.

    A reasoning block, a code fence, a "Keywords:" label and list bullets are dropped; lines are joined."""
    lines = [BULLET_RE.sub("", LABEL_RE.sub("", line.strip())) for line in reply_text(text).splitlines()]
    keywords = " ".join(" ".join(lines).split())
    if not keywords:
        raise ValueError("the model gave no keywords")
    if len(keywords) > max_chars:
        raise ValueError(f"the model's keywords are longer than {max_chars} characters")
    return keywords


@dataclass
class QueryRewriter:
    """Ask the chat model for a question's search keywords; never raise (no keywords on failure)."""

    client: ChatClient
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    max_chars: int = MAX_KEYWORD_CHARS

    def run(self, question: str) -> Rewrite:
        """Return the model's keywords for the question, or none with the reason."""
        started = time.perf_counter()
        attempt = self.breaker.attempt(timeout=self.client.timeout[1])
        if attempt is None:
            return Rewrite("", elapsed_ms(started), "rewrite_circuit_open: skipped after repeated failures")
        with attempt:
            try:
                text, usage = self.client.complete(rewrite_messages(question))
            except GenerationError as exc:
                attempt.failed(exc)
                return Rewrite("", elapsed_ms(started), f"rewrite_{exc.kind}: {exc}")
            attempt.succeeded()  # the model answered; an unusable reply is not a failure of the model
        try:
            keywords = parse_keywords(text, max_chars=self.max_chars)
        except ValueError as exc:
            return Rewrite("", elapsed_ms(started), f"rewrite_malformed: {exc}", usage)
        if " ".join(keywords.casefold().split()) == " ".join(question.casefold().split()):
            keywords = ""  # the question again: searching it twice would only count it twice
        return Rewrite(keywords, elapsed_ms(started), "", usage)
