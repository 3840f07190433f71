"""Vision (seed 004's vision/*): a screenshot (an error message, a stack trace, a UI, a code snippet) asked
of an OpenAI-compatible multimodal chat model.

- `decode_image(text, max_bytes=...) -> Image` reads one base64 image (plain or a `data:image/...;base64,` URL)
  and knows it by its magic bytes (PNG, JPEG, GIF, WebP); anything else raises `ImageError(reason)`.
- `user_message(text, images)` is the chat message with the OpenAI content parts (`text`, `image_url`).
- `parse_observation(reply, labels)` reads observe's `{"labels": [...], "description": "..."}`;
  `parse_step(reply)` reads an agentic step, `{"search": "<keywords>"}` or `{"answer": "..."}`;
  `cited(text, count)` keeps the `[cite^n]` markers that name one of `count` references and drops the others.
- `VisionModel` wraps `ChatClient`: `complete()` whole, or `stream()` yielding `Token`s, one `Reset` when the
  upstream stream broke and is retried once (the reader discards what it showed), then `Done`.
  `AnswerField` pulls the `answer` string out of a JSON reply as it streams, so an agentic answer streams too.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from .breaker import CircuitBreaker
from .llm import THINK_RE, ChatClient, Completion, GenerationError, reply_text
from .types import Reset, Token, Usage

# Labels of what a documentation screenshot shows; settings may replace them (RAG_VISION_LABELS).
DEFAULT_LABELS = ("error_message", "stack_trace", "code", "ui_screenshot", "console_log", "diagram", "other")

MAGIC = (  # (mime type, test of the first bytes)
    ("image/png", lambda raw: raw.startswith(b"\x89PNG\r\n\x1a\n")),
    ("image/jpeg", lambda raw: raw.startswith(b"\xff\xd8\xff")),
    ("image/gif", lambda raw: raw[:6] in (b"GIF87a", b"GIF89a")),
    ("image/webp", lambda raw: raw[:4] == b"RIFF" and raw[8:12] == b"WEBP"),
)
DATA_URL_RE = re.compile(r"data:(image/[\w.+-]+);base64,", re.I)
CITE_RE = re.compile(r"\[cite\^(\d+)\]")
REFERENCE_CHARS = 800  # of each reference's text in the prompt

ANSWER_PROMPT = (
    "You are the documentation assistant of an SDK's API. The user sends screenshots (an error message, "
    "a stack trace, a UI, a code snippet, a console log) and maybe a question. Read what the images show, "
    "explain it, and say concretely how to fix or do what is asked with the SDK's API. Answer in the "
    "user's language (Chinese when the question is Chinese)."
)
OBSERVE_PROMPT = (
    "You label screenshots sent to an SDK documentation assistant. Reply with a JSON object only: "
    '{{"labels": [<labels>], "description": "<what the images show, one or two sentences>"}}. '
    "Use only these labels: {labels}."
)
AGENTIC_PROMPT = (
    "You are the documentation assistant of an SDK's API. The user sends screenshots (an error message, a "
    "stack trace, a UI, a code snippet) and maybe a question. You may search the SDK's documentation "
    "before answering. Reply with a JSON object only, one of:\n"
    '{"search": "<keywords: API names, error text, class or method names>"} to search the documentation;\n'
    '{"answer": "<your answer>"} when you can answer.\n'
    "Search results are numbered references. In the answer cite each reference you use as [cite^n], n its "
    "number; cite nothing else. Answer in the user's language."
)
FINAL_PROMPT = 'No more searches. Reply now with {"answer": "<your answer>"}, citing references as [cite^n].'


class ImageError(ValueError):
    """An image that is not usable: `reason` is "invalid_base64", "too_large", "empty" or "unsupported_type"."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Image:
    mime: str
    data: str  # the base64 text, without a data: prefix
    size: int  # decoded bytes

    @property
    def url(self) -> str:
        return f"data:{self.mime};base64,{self.data}"


def decode_image(text: str, *, max_bytes: int) -> Image:
    """One base64 image, plain or as a data URL, of at most `max_bytes` decoded bytes, PNG/JPEG/GIF/WebP
    (known by its magic bytes; a data URL's declared type is not trusted)."""
    prefix = DATA_URL_RE.match(text)
    data = re.sub(r"\s+", "", text[prefix.end():] if prefix else text)
    if len(data) > (max_bytes + 2) // 3 * 4 + 4:  # refuse before decoding a huge string
        raise ImageError("too_large", f"The image is larger than {max_bytes} bytes.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("invalid_base64", "The image is not valid base64.") from None
    if not raw:
        raise ImageError("empty", "The image is empty.")
    if len(raw) > max_bytes:
        raise ImageError("too_large", f"The image is larger than {max_bytes} bytes.")
    mime = next((name for name, test in MAGIC if test(raw)), None)
    if mime is None:
        raise ImageError("unsupported_type", "The image is not PNG, JPEG, GIF or WebP.")
    return Image(mime=mime, data=base64.b64encode(raw).decode("ascii"), size=len(raw))


def user_message(text: str, images: Sequence[Image]) -> dict:
    parts: list[dict] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": image.url}} for image in images]
    return {"role": "user", "content": parts}


def answer_messages(query: str, images: Sequence[Image]) -> list[dict]:
    return [{"role": "system", "content": ANSWER_PROMPT},
            user_message(query or "What does this screenshot show, and what should I do?", images)]


def observe_messages(query: str, images: Sequence[Image], labels: Sequence[str]) -> list[dict]:
    text = "Label these images." + (f" The user's note: {query}" if query else "")
    return [{"role": "system", "content": OBSERVE_PROMPT.format(labels=", ".join(labels))}, user_message(text, images)]


def agentic_messages(query: str, images: Sequence[Image]) -> list[dict]:
    return [{"role": "system", "content": AGENTIC_PROMPT},
            user_message(query or "What does this screenshot show, and how do I fix or do it with the SDK?", images)]


def split_thinking(text: str) -> tuple[str, str]:
    """A reply without its <think> blocks, and what they said."""
    thoughts = "\n".join(m.group(0)[7:-8].strip() for m in THINK_RE.finditer(text))
    return THINK_RE.sub("", text).strip(), thoughts


def _json_object(text: str) -> dict | None:
    try:
        body = json.loads(reply_text(text))
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


@dataclass(frozen=True, slots=True)
class Observation:
    labels: tuple[str, ...]
    description: str
    dropped: tuple = ()  # labels the model gave that are not in the label set (or not strings)
    status: str = "ok"  # "ok": every label valid; "partial": some dropped


def parse_observation(text: str, labels: Sequence[str]) -> Observation:
    """Read `{"labels": [...], "description": "..."}`; labels outside `labels` are dropped. Raise ValueError
    when nothing is usable (not that object, or neither a valid label nor a description)."""
    body = _json_object(text)
    if body is None:
        raise ValueError("the reply is not a JSON object")
    given = body.get("labels")
    given = given if isinstance(given, list) else [] if given is None else [given]
    description = body.get("description")
    description = description.strip() if isinstance(description, str) else ""
    allowed = set(labels)
    kept = tuple(dict.fromkeys(label.strip() for label in given if isinstance(label, str) and label.strip() in allowed))
    dropped = tuple(label for label in given if not (isinstance(label, str) and label.strip() in allowed))
    if not kept and not description:
        raise ValueError("the reply has no valid label and no description")
    return Observation(labels=kept, description=description, dropped=dropped,
                       status="partial" if dropped or not isinstance(body.get("labels"), list) else "ok")


@dataclass(frozen=True, slots=True)
class Step:
    """One agentic step: keywords to search, or the answer."""

    search: str = ""
    answer: str = ""


def parse_step(text: str, *, final: bool = False) -> Step:
    """Read `{"search": "..."}` or `{"answer": "..."}` (only an answer when `final`); raise ValueError otherwise."""
    body = _json_object(text)
    if body is None:
        raise ValueError("the reply is not a JSON object")
    answer, search = body.get("answer"), body.get("search")
    if isinstance(answer, str) and answer.strip():
        return Step(answer=answer.strip())
    if not final and isinstance(search, str) and search.strip():
        return Step(search=search.strip()[:500])
    raise ValueError('the reply is neither {"search": "..."} nor {"answer": "..."}')


def references_message(keywords: str, references: Sequence[tuple[int, str, str]]) -> dict:
    """The search results fed back to the model: (number, name, text) of each new reference."""
    if not references:
        return {"role": "user", "content": f'Search "{keywords}": no new references.'}
    listed = "\n\n".join(f"[cite^{n}] {name}\n{text[:REFERENCE_CHARS]}" for n, name, text in references)
    return {"role": "user", "content": f'Search "{keywords}" found these references:\n\n{listed}'}


def cited(text: str, count: int) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """The text with only the `[cite^n]` markers for n in 1..count kept; the numbers kept (in order of first
    use) and the numbers dropped."""
    kept: dict[int, None] = {}
    dropped: dict[int, None] = {}

    def keep(match: re.Match) -> str:
        number = int(match.group(1))
        if 1 <= number <= count:
            kept[number] = None
            return match.group(0)
        dropped[number] = None
        return ""

    clean = CITE_RE.sub(keep, text)
    if dropped:
        clean = re.sub(r"[ \t]+([,.;:!?，。；：！？])", r"\1", re.sub(r"[ \t]{2,}", " ", clean)).strip()
    return clean, tuple(kept), tuple(dropped)


def usage_sum(*usages: Usage) -> Usage:
    return Usage(sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages))


class AnswerField:
    """Pull the `answer` string of a JSON reply out as it streams: `feed(delta)` returns the newly decoded
    text of `{"answer": "..."}` (nothing for a `{"search": ...}` reply)."""

    START_RE = re.compile(r'^\s*(?:```(?:json)?\s*)?\{\s*"(\w+)"\s*:\s*"')

    def __init__(self):
        self.buffer = ""
        self.state = "start"  # "start", "string", "off" (another key, or the string ended)

    def feed(self, delta: str) -> str:
        self.buffer += delta
        if self.state == "start":
            match = self.START_RE.match(self.buffer)
            if match is None:
                if len(self.buffer) > 200 or (self.buffer.strip() and not self.buffer.lstrip().startswith(("{", "`"))):
                    self.state = "off"
                return ""
            self.state = "string" if match.group(1) == "answer" else "off"
            self.buffer = self.buffer[match.end():]
        if self.state != "string":
            return ""
        return self._decode()

    def _decode(self) -> str:
        end, i, text = None, 0, self.buffer
        while i < len(text):
            char = text[i]
            if char == "\\":
                need = 6 if text[i + 1:i + 2] == "u" else 2
                if i + need > len(text):
                    break
                i += need
                continue
            if char == '"':
                end = i
                break
            i += 1
        segment = text[:end if end is not None else i]
        self.buffer = text[len(segment):]
        if end is not None:
            self.state = "off"
        try:
            return json.loads(f'"{segment}"')
        except ValueError:
            return segment


@dataclass(frozen=True, slots=True)
class Done:
    text: str
    reasoning: str
    usage: Usage


BROKEN_KINDS = ("timeout", "connection")  # a stream that stopped mid-way; an HTTP error or bad event is not retried


def _urllib3_error() -> type[Exception]:
    """urllib3's base error: a body cut mid-chunk surfaces as its ProtocolError, not as a requests error."""
    try:
        from urllib3.exceptions import HTTPError
    except ImportError:  # pragma: no cover - requests always brings urllib3
        return GenerationError
    return HTTPError


CIRCUIT_OPEN = "circuit_open"  # the GenerationError kind of a call the breaker did not let out


@dataclass
class VisionModel:
    """The multimodal model: `complete()` a whole reply, or `stream()` one, retrying a broken stream once; behind its
    own circuit breaker, so a failing model is not called again until it cools down (GenerationError `circuit_open`).
    """

    client: ChatClient
    retries: int = 1
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)

    def complete(self, messages: list[dict], *, extra: dict | None = None) -> Completion:
        with self._attempt() as attempt:
            try:
                completion = self.client.complete_full(messages, extra=extra)
            except GenerationError as exc:
                attempt.failed(exc)
                raise
            attempt.succeeded()
            return completion

    def stream(self, messages: list[dict], *, extra: dict | None = None,
               cancelled: Callable[[], bool] = lambda: False) -> Iterator[Token | Reset | Done]:
        """`_stream` behind the breaker: a stream that ends is a success, one that breaks for good a failure, and
        one its reader left reports nothing (a left trial counts as abandoned)."""
        with self._attempt() as attempt:
            try:
                for item in self._stream(messages, extra=extra, cancelled=cancelled):
                    if isinstance(item, Done):
                        attempt.succeeded()
                    yield item
            except GenerationError as exc:
                attempt.failed(exc)
                raise

    def _attempt(self):
        attempt = self.breaker.attempt(timeout=self.client.timeout[1])
        if attempt is None:
            raise GenerationError(CIRCUIT_OPEN, "the vision model failed repeatedly; it is not called until it "
                                                "cools down")
        return attempt

    def _stream(self, messages: list[dict], *, extra: dict | None = None,
                cancelled: Callable[[], bool] = lambda: False) -> Iterator[Token | Reset | Done]:
        """Yield `Token`s as the model writes, `Reset` before a retry of a stream that broke after some text,
        then `Done`; stop (closing the upstream response) as soon as `cancelled()` is true. A stream that
        breaks again raises GenerationError."""
        broken = (GenerationError, OSError, _urllib3_error())
        attempt = 0
        while True:
            usage_out: list = []
            reasoning_out: list = []
            parts: list[str] = []
            deltas = self.client.stream(messages, usage_out, extra=extra, reasoning_out=reasoning_out)
            try:
                for text in deltas:
                    if cancelled():
                        return
                    parts.append(text)
                    yield Token(text)
            except broken as exc:
                kind = exc.kind if isinstance(exc, GenerationError) else "connection"
                if kind not in BROKEN_KINDS or attempt >= self.retries or cancelled():
                    if isinstance(exc, GenerationError):
                        raise
                    raise GenerationError("connection", "the model's stream broke off") from exc
                attempt += 1
                if parts:
                    yield Reset("upstream_stream_interrupted")
                continue
            finally:
                deltas.close()
            yield Done("".join(parts), "".join(reasoning_out), usage_out[0] if usage_out else Usage())
            return
