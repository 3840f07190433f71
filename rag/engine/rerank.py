"""Rerank (E11): reorder the fused candidates before adoption, by a rerank API or by the generation model.

Three `Reranker`s with the same `run(question, hits) -> RerankResult`:
`ApiReranker` posts to a Jina/Cohere/DashScope-style `POST {base}/rerank` behind its own circuit breaker;
`LlmReranker` asks the chat model for a listwise order (a JSON array of passage numbers);
`NoReranker` keeps the fused order. None of them raises: on any failure the input order comes back with
`backend="none"` and the reason in `error`.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from .breaker import CircuitBreaker
from .llm import ChatClient, GenerationError, UpstreamError, post_json, reply_text
from .routes import elapsed_ms
from .types import Hit, Usage

RERANK_CANDIDATES = 30  # fused hits sent to a reranker; seed 002's default candidate count (top_k = 30)
PASSAGE_CHARS = 1500  # of each chunk sent to a rerank API (cross-encoders read about 512 tokens)
LLM_PASSAGE_CHARS = 400  # of each chunk in the listwise prompt: 30 passages stay a short prompt
CIRCUIT_OPEN = "rerank_circuit_open: skipped after repeated failures"


class RerankError(UpstreamError):
    """The rerank API gave no usable order: timeout, HTTP error or a malformed body."""


@dataclass(frozen=True, slots=True)
class RerankResult:
    """The candidates in their new order, and how that order was made."""

    hits: tuple[Hit, ...]  # every input hit once; reranked ones have source "rerank" and the rerank score
    backend: str  # the backend that ordered them: "api", "llm" or "none" (fused order)
    elapsed_ms: float = 0.0
    error: str = ""  # why a reranker fell back to the input order; "" when it did not
    usage: Usage = field(default_factory=Usage)  # tokens of an LLM rerank

    @property
    def fell_back(self) -> bool:
        return bool(self.error)


class Reranker(Protocol):
    """Reorder candidates for a question; never raise (fall back to the input order instead)."""

    backend: str  # "api", "llm" or "none"

    def run(self, question: str, hits: Sequence[Hit]) -> RerankResult: ...


def passage_text(hit: Hit, limit: int) -> str:
    """The text a reranker reads for a chunk: its heading path, then its text, cut to `limit` characters."""
    chunk = hit.chunk
    heading = " > ".join(chunk.heading_path) or chunk.title
    return f"{heading}\n{chunk.text}"[:limit]


def reordered(hits: Sequence[Hit], order: Sequence[tuple[int, float]]) -> tuple[Hit, ...]:
    """Put the hits at the given (position, score) pairs first, then the others in their input order.

    Reranked hits keep their input score as `raw_score`; a hit the reranker left out keeps its score and
    source, ranked after the reranked ones."""
    placed = {position for position, _ in order}
    first = [replace(hits[p], score=score, source="rerank", raw_score=hits[p].score) for p, score in order]
    rest = [hits[p] for p in range(len(hits)) if p not in placed]
    return tuple(replace(hit, rank=n) for n, hit in enumerate(first + rest, start=1))


def _unchanged(hits: Sequence[Hit], started: float, error: str = "", usage: Usage | None = None) -> RerankResult:
    return RerankResult(hits=tuple(hits), backend="none", elapsed_ms=elapsed_ms(started), error=error,
                        usage=usage or Usage())


@dataclass
class NoReranker:
    """Keep the fused order."""

    backend: str = field(default="none", init=False)

    def run(self, question: str, hits: Sequence[Hit]) -> RerankResult:
        return _unchanged(hits, time.perf_counter())


@dataclass
class ApiReranker:
    """A client for Jina/Cohere/DashScope-compatible rerank APIs: `POST {base_url}/rerank` with
    `{"model", "query", "documents", "top_n"}`, answered by `{"results": [{"index", "relevance_score"}]}`
    (DashScope nests them in `{"output": {"results": [...]}}`). Scores are the API's own (0 to 1 for these)."""

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout: tuple[float, float] = (5.0, 10.0)  # connect, read
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    passage_chars: int = PASSAGE_CHARS
    backend: str = field(default="api", init=False)

    def run(self, question: str, hits: Sequence[Hit]) -> RerankResult:
        """Reorder the hits by the API's relevance scores; on any failure keep their order."""
        started = time.perf_counter()
        order, failed = _guarded(self.breaker, hits, RerankError,
                                 lambda: self.scores(question, [passage_text(h, self.passage_chars) for h in hits]),
                                 timeout=self.timeout[1])
        if failed is not None:
            return _unchanged(hits, started, failed)
        return RerankResult(hits=reordered(hits, order), backend="api", elapsed_ms=elapsed_ms(started))

    def scores(self, query: str, documents: list[str]) -> list[tuple[int, float]]:
        """Return (document position, relevance score) pairs, best first; raise RerankError."""
        import requests

        payload = {"model": self.model, "query": query, "documents": documents, "top_n": len(documents)}
        response = post_json(self.base_url.rstrip("/") + "/rerank", payload, api_key=self.api_key,
                             timeout=self.timeout, error=RerankError, service="the rerank API")
        try:
            body = response.json()
        except (ValueError, requests.RequestException) as exc:
            raise RerankError("malformed", "the rerank API returned a body that is not JSON") from exc
        return parse_rerank_body(body, len(documents))


def parse_rerank_body(body: object, count: int) -> list[tuple[int, float]]:
    """Validate a rerank response for `count` documents: (index, relevance score) pairs, best first.

    Every index must be an integer in range and appear once, every score a finite number; documents the
    API left out (a smaller top_n) are not in the list."""
    if isinstance(body, dict) and isinstance(body.get("output"), dict) and "results" not in body:
        body = body["output"]  # DashScope's native shape
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or (count and not results):
        raise RerankError("malformed", "the rerank API returned no results list")
    pairs: list[tuple[int, float]] = []
    seen: set[int] = set()
    for item in results:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score") if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count:
            raise RerankError("malformed", "the rerank API returned an index outside the documents sent")
        if index in seen:
            raise RerankError("malformed", "the rerank API returned a document twice")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise RerankError("malformed", "the rerank API returned a score that is not a number")
        seen.add(index)
        pairs.append((index, float(score)))
    pairs.sort(key=lambda pair: -pair[1])  # stable: equal scores keep the API's order
    return pairs


# -- listwise rerank through the generation model ----------------------------------------------------------

LLM_RERANK_PROMPT = (
    "You rank passages of an SDK's API documentation by how well each answers a question. "
    "Reply with a JSON array of passage numbers, the most useful first, for example [3, 1, 2]. "
    "Include every passage that helps; reply with the array only, no explanation."
)
ARRAY_RE = re.compile(r"\[[^\[\]]*\]")


def llm_rerank_messages(question: str, hits: Sequence[Hit], passage_chars: int = LLM_PASSAGE_CHARS) -> list[dict]:
    """Number the passages from 1 and ask for their order as a JSON array."""
    passages = "\n\n".join(f"[{n}] {passage_text(hit, passage_chars)}" for n, hit in enumerate(hits, start=1))
    return [
        {"role": "system", "content": LLM_RERANK_PROMPT},
        {"role": "user", "content": f"Question: {question}\n\nPassages:\n\n{passages}\n\n"
                                    f"JSON array of passage numbers (1 to {len(hits)}), best first:"},
    ]


def parse_llm_order(text: str, count: int) -> list[int]:
    """Read the model's JSON array of passage numbers (1 to `count`) as 0-based positions, duplicates dropped.

    The reply is the array itself, or the longest JSON array in it (a model may write "[2] is best: [2, 1]").
    Anything but integers in range is refused with a ValueError."""
    text = reply_text(text)
    try:
        numbers = json.loads(text)
    except ValueError:
        numbers = None
    if not isinstance(numbers, list):
        arrays = []
        for match in ARRAY_RE.findall(text):
            try:
                value = json.loads(match)
            except ValueError:
                continue
            if isinstance(value, list):
                arrays.append(value)
        if not arrays:
            raise ValueError("the model's reply holds no JSON array")
        numbers = max(arrays, key=len)
    if not numbers:
        raise ValueError("the model ranked no passage")
    for number in numbers:
        if type(number) is not int or not 1 <= number <= count:
            raise ValueError(f"the model's ranking holds {number!r}, not a passage number from 1 to {count}")
    return list(dict.fromkeys(n - 1 for n in numbers))


@dataclass
class LlmReranker:
    """Listwise rerank by the chat model: numbered passages in, a JSON array of their numbers out.

    Passages the model leaves out follow the ranked ones in fused order. A ranked passage's score is
    (count - position) / count, 1.0 for the best, so scores fall with the model's order."""

    client: ChatClient
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    passage_chars: int = LLM_PASSAGE_CHARS
    backend: str = field(default="llm", init=False)

    def run(self, question: str, hits: Sequence[Hit]) -> RerankResult:
        """Reorder the hits as the model ranks them; on any failure keep their order."""
        started = time.perf_counter()
        # The model answered when this succeeds; an unusable ranking below is not a failure of the model.
        reply, failed = _guarded(self.breaker, hits, GenerationError,
                                 lambda: self.client.complete(llm_rerank_messages(question, hits, self.passage_chars)),
                                 timeout=self.client.timeout[1])
        if failed is not None:
            return _unchanged(hits, started, failed)
        text, usage = reply
        try:
            positions = parse_llm_order(text, len(hits))
        except ValueError as exc:
            return _unchanged(hits, started, f"rerank_malformed: {exc}", usage)
        count = len(hits)
        order = [(p, (count - n) / count) for n, p in enumerate(positions)]
        return RerankResult(hits=reordered(hits, order), backend="llm", elapsed_ms=elapsed_ms(started), usage=usage)


def _guarded(breaker: CircuitBreaker, hits: Sequence[Hit], errors: type[UpstreamError], call, *, timeout: float):
    """Run one backend call through the breaker: (result, None), or (None, why the order stays as it is).
    No hits asks nothing ("" as the reason: nothing failed); `timeout` is the call's read timeout."""
    if not hits:
        return None, ""
    attempt = breaker.attempt(timeout=timeout)
    if attempt is None:
        return None, CIRCUIT_OPEN
    with attempt:
        try:
            result = call()
        except errors as exc:
            attempt.failed(exc)
            return None, f"rerank_{exc.kind}: {exc}"
        attempt.succeeded()
    return result, None
