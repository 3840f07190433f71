"""Generation (E8, E9): numbered evidence in, a cited answer out.

`LlmGenerator` calls an OpenAI-compatible chat-completions endpoint (streaming or not) through a circuit
breaker; `ExtractiveGenerator` builds a cited answer from the evidence alone when no model is configured
or the breaker is open. Both have the same `run()`. Citations of either are checked against this
request's evidence before the answer leaves the engine.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Iterator, Protocol

from .types import Hit, Plan

CITATION_RE = re.compile(r"\[(\d{1,3})\]")
SENTENCE_RE = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s+")
CONFIDENCE_ORDER = ("none", "low", "medium", "high")

CHITCHAT_REPLY = ("我是文档助手，只回答这套 SDK 文档里的问题，例如某个类怎么用、某个属性的默认值。"
                  " / I answer questions about this SDK's documentation: how a class is used, a member's default, and so on.")
INSUFFICIENT = "资料不足：文档中没有找到能回答这个问题的内容。 / Not enough material: the documentation has nothing that answers this."


class GenerationError(Exception):
    """The model could not give a usable answer: timeout, HTTP error or malformed output."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout", "http", "connection", "malformed"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


@dataclass(frozen=True, slots=True)
class Citation:
    number: int  # the evidence number the answer used, from 1
    chunk_id: str
    source: str
    heading_path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    citations: tuple[Citation, ...]
    confidence: str  # "high", "medium", "low" or "none"
    mode: str  # "llm", "extractive", "chitchat" or "empty"
    degraded: bool = False
    reason: str = ""  # why the answer is empty, insufficient or degraded
    usage: Usage = field(default_factory=Usage)
    invalid_citations: tuple[int, ...] = ()
    model_called: bool = False


# -- prompt and citation check ------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You answer questions about an SDK's API documentation using only the numbered evidence given. "
    "Cite every fact with the number of its evidence in square brackets, like [1] or [2][3]. "
    "If the evidence does not answer the question, say so plainly instead of guessing. "
    "Do not mention file paths. Answer in the language of the question; use Markdown and code blocks where useful."
)


def build_messages(question: str, hits: list[Hit]) -> list[dict]:
    """Number the evidence and ask for a cited answer."""
    blocks = []
    for number, hit in enumerate(hits, start=1):
        chunk = hit.chunk
        heading = " > ".join(chunk.heading_path) or chunk.title
        blocks.append(f"[{number}] {heading}\n{chunk.text}")
    evidence = "\n\n".join(blocks)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Evidence:\n\n{evidence}\n\nQuestion: {question}"},
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


# -- the OpenAI-compatible client ---------------------------------------------------------------------


@dataclass
class ChatClient:
    """A client for any OpenAI-compatible `/chat/completions` endpoint (DeepSeek, DashScope, vLLM, llama.cpp)."""

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout: tuple[float, float] = (5.0, 60.0)  # connect, read (between streamed chunks)
    temperature: float = 0.2
    max_tokens: int = 1024
    seed: int | None = None  # for repeatable output where the provider takes one (the judge)

    def _request(self, messages: list[dict], *, stream: bool):
        import requests

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        payload = {"model": self.model, "messages": messages, "temperature": self.temperature,
                   "max_tokens": self.max_tokens, "stream": stream}
        if stream:
            payload["stream_options"] = {"include_usage": True}
        if self.seed is not None:
            payload["seed"] = self.seed
        try:
            response = requests.post(self.base_url.rstrip("/") + "/chat/completions", json=payload,
                                     headers=headers, timeout=self.timeout, stream=stream)
        except requests.Timeout as exc:
            raise GenerationError("timeout", "the generation model did not answer in time") from exc
        except requests.RequestException as exc:
            raise GenerationError("connection", f"cannot reach the generation model ({type(exc).__name__})") from exc
        if response.status_code != 200:
            response.close()
            raise GenerationError("http", f"the generation model answered HTTP {response.status_code}")
        return response

    def complete(self, messages: list[dict]) -> tuple[str, Usage]:
        """Return the whole answer and its token usage."""
        import requests

        response = self._request(messages, stream=False)
        try:
            body = response.json()
            text = body["choices"][0]["message"]["content"]
            usage = body.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise GenerationError("malformed", "the generation model returned a malformed body") from exc
        except requests.RequestException as exc:
            raise GenerationError("timeout", "the generation model stopped mid-answer") from exc
        if not isinstance(text, str):
            raise GenerationError("malformed", "the generation model returned no text")
        return text, Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))

    def stream(self, messages: list[dict], usage_out: list | None = None) -> Iterator[str]:
        """Yield text deltas as the model writes them (server-sent events); append the Usage to usage_out.

        Closing the generator (a client that went away) closes the HTTP response, which stops the model.
        """
        import requests

        response = self._request(messages, stream=True)
        usage = Usage()
        received = False
        try:
            for raw in _lines_as_they_arrive(response.raw):
                if not raw or raw.startswith(":"):
                    continue
                if not raw.startswith("data:"):
                    continue
                data = raw[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                except ValueError as exc:
                    raise GenerationError("malformed", "the generation model sent a malformed event") from exc
                if event.get("usage"):
                    usage = Usage(int(event["usage"].get("prompt_tokens") or 0),
                                  int(event["usage"].get("completion_tokens") or 0))
                for choice in event.get("choices") or []:
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        received = True
                        yield delta
        except requests.RequestException as exc:
            raise GenerationError("timeout", "the generation model stopped mid-answer") from exc
        finally:
            response.close()
        if not received:
            raise GenerationError("malformed", "the generation model streamed no text")
        if usage_out is not None:
            usage_out.append(usage)


def _lines_as_they_arrive(raw) -> Iterator[str]:
    """Yield lines of a streamed body as soon as each arrives: `iter_lines` waits for a whole 512-byte
    block, which delays tokens and leaves a reader that hung up waiting for the model."""
    buffer = b""
    while True:
        chunk = raw.read1(8192)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.decode("utf-8", "replace")


# -- circuit breaker -----------------------------------------------------------------------------------


class BreakerStore(Protocol):
    """Where the breaker keeps its state; the Django app shares it across processes through its cache."""

    def load(self) -> dict: ...

    def save(self, state: dict) -> None: ...


@dataclass
class MemoryBreakerStore:
    state: dict = field(default_factory=dict)

    def load(self) -> dict:
        return dict(self.state)

    def save(self, state: dict) -> None:
        self.state = dict(state)


@dataclass
class CircuitBreaker:
    """Closed → open after `threshold` consecutive failures → half-open after `cooldown` s (one trial).

    A trial that succeeds closes the breaker; one that fails opens it again for another cool-down.
    """

    store: BreakerStore = field(default_factory=MemoryBreakerStore)
    threshold: int = 3
    cooldown: float = 30.0
    clock: object = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def state(self) -> dict:
        """Return {state, failures, opened_at, last_failures} with `state` one of closed, open, half_open."""
        data = {"state": "closed", "failures": 0, "opened_at": None, "last_failures": [], **self.store.load()}
        if data["state"] == "open" and self.clock() - (data["opened_at"] or 0) >= self.cooldown:
            data["state"] = "half_open"
        return data

    def allow(self) -> bool:
        """May a call go out now? In half-open only one trial does, until it reports back."""
        with self._lock:
            data = self.state()
            if data["state"] == "closed":
                return True
            if data["state"] == "half_open" and not data.get("trial"):
                data["trial"] = True
                self.store.save({**data, "state": "open"})  # stays open for everyone else until the trial ends
                return True
            return False

    def record_success(self) -> None:
        with self._lock:
            data = self.state()
            self.store.save({"state": "closed", "failures": 0, "opened_at": None,
                             "last_failures": data["last_failures"][-5:]})

    def record_failure(self, kind: str) -> None:
        with self._lock:
            data = self.state()
            failures = data["failures"] + 1
            last = (data["last_failures"] + [{"at": self.clock(), "kind": kind}])[-5:]
            if data.get("trial") or failures >= self.threshold:
                self.store.save({"state": "open", "failures": failures, "opened_at": self.clock(),
                                 "last_failures": last, "trial": False,
                                 "openings": data.get("openings", 0) + 1})
            else:
                self.store.save({**data, "state": "closed", "failures": failures, "last_failures": last})


# -- generators ----------------------------------------------------------------------------------------


@dataclass
class ExtractiveGenerator:
    """Answer from the evidence alone: each cited chunk's member heading, the sentences sharing the
    question's words, and its first code example."""

    max_chunks: int = 3
    max_sentences: int = 2

    def run(self, question: str, plan: Plan, hits: list[Hit], *, note: str = "") -> Answer:
        from .text import tokenize

        words = {t for t in tokenize(question) if len(t) > 1}
        parts = [note] if note else []
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

    def unavailable(self, question: str, plan: Plan, hits: list[Hit], reason: str) -> Answer:
        note = "生成模型暂不可用，以下是检索到的文档片段。 / The generation model is temporarily unavailable; here is the evidence found."
        answer = self.fallback.run(question, plan, hits, note=note)
        return replace(answer, degraded=True, reason=reason)

    def run(self, question: str, plan: Plan, hits: list[Hit]) -> Answer:
        if not self.breaker.allow():
            return self.unavailable(question, plan, hits, "circuit_open")
        try:
            text, usage = self.client.complete(build_messages(question, hits))
        except GenerationError as exc:
            self.breaker.record_failure(exc.kind)
            return self.unavailable(question, plan, hits, f"generation_{exc.kind}")
        self.breaker.record_success()
        return finish(text, hits, evidence_confidence(plan, hits), mode="llm", usage=usage, model_called=True)

    def stream(self, question: str, plan: Plan, hits: list[Hit]) -> Iterator[tuple[str, object]]:
        """Yield ("token", text) as the model writes, then ("final", Answer).

        A failure mid-answer ends with the degraded evidence answer instead; closing this generator
        (the reader went away) closes the model's HTTP stream.
        """
        if not self.breaker.allow():
            yield "final", self.unavailable(question, plan, hits, "circuit_open")
            return
        pieces: list[str] = []
        usage: list[Usage] = []
        deltas = self.client.stream(build_messages(question, hits), usage_out=usage)
        try:
            for delta in deltas:
                pieces.append(delta)
                yield "token", delta
        except GenerationError as exc:
            self.breaker.record_failure(exc.kind)
            yield "final", self.unavailable(question, plan, hits, f"generation_{exc.kind}")
            return
        finally:
            deltas.close()  # a reader that left closes this generator: hang up on the model now
        self.breaker.record_success()
        yield "final", finish("".join(pieces), hits, evidence_confidence(plan, hits), mode="llm",
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
