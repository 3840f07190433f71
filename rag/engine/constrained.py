"""Constrained generation (seed 004): the chat model chooses among numbered candidates and may not invent any.

`ConstrainedChooser.run(question, candidates, max_items=..., thinking=...) -> Choice` asks for JSON
`{"indices": [n, ...]}` (1-based candidate numbers, best first) with the provider's JSON response format,
and builds the answer text from the chosen candidates' names only. A reply that is not that object, or
names a number outside the candidates, is refused (`ChoiceError("invalid")`): nothing the model writes
reaches the caller except through a candidate.

Thinking (reasoning) is switched per call or by configuration, the way each provider takes it: DeepSeek
reads `thinking: {"type": "enabled" | "disabled"}`; Qwen-style servers (vLLM, SGLang, DashScope's
compatible mode) read `chat_template_kwargs: {"enable_thinking": true}`, sent only when enabled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .breaker import CircuitBreaker
from .llm import THINK_RE, ChatClient, GenerationError, reply_text
from .types import Usage

CONTENT_CHARS = 600  # of each candidate's text in the prompt: 78 candidates stay within a 32k context
HEADER_ZH = "我根据在线检索与候选筛选结果，整理出以下最相关条文："
HEADER_EN = "From the retrieved candidates, these are the most relevant sections:"
HAN_RE = re.compile(r"[\u4e00-\u9fff]")

SYSTEM_PROMPT = (
    "You select documentation passages. The user gives a question and numbered candidate passages. "
    "Choose the candidates that directly answer the question, most relevant first, at most {max_items}. "
    'Reply with a JSON object only: {{"indices": [<candidate numbers>]}}, for example {{"indices": [3, 1]}}; '
    'reply {{"indices": []}} when no candidate answers the question. Never use a number that is not a candidate.'
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate as a caller names it: the document (`title`), the place in it (`article`), the text."""

    title: str
    article: str
    text: str
    chunk_id: str = ""  # set when the candidate is one of our chunks
    source: str = ""

    @property
    def item(self) -> str:
        """The seed's `pred_items` entry: "<law_name> <article_number>"."""
        return f"{self.title} {self.article}".strip()


@dataclass(frozen=True, slots=True)
class Choice:
    """What the model chose: 1-based candidate numbers in its order, and what it cost."""

    indices: tuple[int, ...]
    items: tuple[str, ...]
    answer_text: str
    raw: str  # the model's reply as received
    thinking: str = ""
    thinking_enabled: bool = False
    usage: Usage = field(default_factory=Usage)


class ChoiceError(Exception):
    """The model gave no usable choice: kind "invalid" (not the JSON asked for, or numbers out of range),
    or the GenerationError kinds ("timeout", "http", "connection", "malformed", "circuit_open")."""

    def __init__(self, kind: str, message: str, *, raw: str = "", usage: Usage | None = None):
        super().__init__(message)
        self.kind = kind
        self.raw = raw
        self.usage = usage or Usage()


def provider_of(base_url: str, model: str, configured: str = "") -> str:
    """"deepseek" or "openai" (any other OpenAI-compatible server): as configured, else from the host or model."""
    if configured:
        return configured
    host = (urlsplit(base_url).hostname or "").lower()
    return "deepseek" if "deepseek" in host or model.lower().startswith("deepseek") else "openai"


def thinking_fields(provider: str, enabled: bool) -> dict:
    """The request fields that switch the provider's thinking on or off (see the module docstring)."""
    if provider == "deepseek":
        return {"thinking": {"type": "enabled" if enabled else "disabled"}}
    return {"chat_template_kwargs": {"enable_thinking": True}} if enabled else {}


def choice_messages(question: str, candidates: Sequence[Candidate], max_items: int) -> list[dict]:
    numbered = "\n\n".join(f"[{n}] {c.item}\n{c.text[:CONTENT_CHARS]}" for n, c in enumerate(candidates, start=1))
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(max_items=max_items)},
        {"role": "user", "content": f"Question: {question}\n\nCandidates:\n\n{numbered}\n\n"
                                    f'JSON object {{"indices": [...]}} with at most {max_items} numbers '
                                    f"from 1 to {len(candidates)}:"},
    ]


def parse_indices(text: str, count: int, max_items: int) -> tuple[int, ...]:
    """Read `{"indices": [...]}` (1-based numbers from 1 to `count`) from a reply; duplicates dropped, at most
    `max_items` kept. Anything else raises ValueError."""
    body = json.loads(reply_text(text))
    indices = body.get("indices") if isinstance(body, dict) else None
    if not isinstance(indices, list):
        raise ValueError('the reply is not a JSON object with an "indices" list')
    for number in indices:
        if type(number) is not int or not 1 <= number <= count:
            raise ValueError(f"the reply names {number!r}, not a candidate number from 1 to {count}")
    return tuple(dict.fromkeys(indices))[:max_items]


def answer_text(question: str, items: Sequence[str]) -> str:
    header = HEADER_ZH if HAN_RE.search(question) else HEADER_EN
    return header + "".join(f"\n{n}. {item}" for n, item in enumerate(items, start=1))


def answer_pieces(text: str) -> list[str]:
    """The answer text in the pieces a stream sends: the header line, then one line per item."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


@dataclass
class ConstrainedChooser:
    """Choose candidates with the chat model (see the module docstring)."""

    client: ChatClient
    provider: str = "openai"  # "deepseek" or "openai"
    thinking: bool = False  # the configured default; a call may override it
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    uses_model: bool = field(default=True, init=False)

    @property
    def model(self) -> str:
        return self.client.model

    def run(self, question: str, candidates: Sequence[Candidate], *, max_items: int, thinking: bool | None = None,
            stream: bool = False, cancelled: Callable[[], bool] = lambda: False) -> Choice:
        """Ask the model to choose; raise ChoiceError. With `stream`, the reply is read as the model writes it,
        so a call whose `cancelled()` turns true hangs up on the model (raising ChoiceError("cancelled"))."""
        enabled = self.thinking if thinking is None else thinking
        extra = {"response_format": {"type": "json_object"}, **thinking_fields(self.provider, enabled)}
        messages = choice_messages(question, candidates, max_items)
        attempt = self.breaker.attempt(timeout=self.client.timeout[1])
        if attempt is None:
            raise ChoiceError("circuit_open", "the generation model is skipped after repeated failures")
        reasoning: list[str] = []
        with attempt:  # a cancelled trial ends as a failure, so it cannot keep the breaker open
            try:
                if stream:
                    text, usage = self._streamed(messages, extra, reasoning, cancelled)
                else:
                    completion = self.client.complete_full(messages, extra=extra)
                    text, usage = completion.text, completion.usage
                    reasoning.append(completion.reasoning)
            except GenerationError as exc:
                attempt.failed(exc)
                raise ChoiceError(exc.kind, str(exc)) from exc
            attempt.succeeded()
        thought = "".join(reasoning) + "".join(m[7:-8] for m in THINK_RE.findall(text))
        try:
            indices = parse_indices(text, len(candidates), max_items)
        except ValueError as exc:
            raise ChoiceError("invalid", str(exc), raw=text, usage=usage) from exc
        items = tuple(candidates[n - 1].item for n in indices)
        return Choice(indices=indices, items=items, answer_text=answer_text(question, items), raw=text,
                      thinking=thought.strip(), thinking_enabled=enabled, usage=usage)

    def _streamed(self, messages, extra, reasoning: list, cancelled) -> tuple[str, Usage]:
        usage_out: list[Usage] = []
        pieces: list[str] = []
        deltas: Iterator[str] = self.client.stream(messages, usage_out, extra=extra, reasoning_out=reasoning)
        try:
            for delta in deltas:
                if cancelled():
                    raise ChoiceError("cancelled", "the reader went away")
                pieces.append(delta)
        finally:
            deltas.close()  # hang up on the model when the reader left
        return "".join(pieces), (usage_out[0] if usage_out else Usage())
