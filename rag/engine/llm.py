"""The OpenAI-compatible chat-completions client, used by generation (E8) and by evaluation's judge.

Any `/chat/completions` endpoint works (DeepSeek, Qwen/DashScope, vLLM, llama.cpp server); answers are
read whole or as server-sent events as they arrive. Another thread can hang up on the calls a thread makes
(`Hangup`), even while it is blocked reading a model that has stopped writing.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Iterator

from .types import Usage


THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
FENCE_RE = re.compile(r"^```[\w-]*[ \t]*\n?|\n?[ \t]*```$")


def reply_text(text: str) -> str:
    """Drop a reasoning model's <think> block and a Markdown code fence around a short reply."""
    return FENCE_RE.sub("", THINK_RE.sub("", text).strip()).strip()


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    reasoning: str
    usage: Usage


class UpstreamError(Exception):
    """A model or API gave no usable answer: `kind` says how; an HTTP error also has its `status`, and a 429
    the seconds its Retry-After asked to wait (`retry_after`, None without one)."""

    def __init__(self, kind: str, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind  # "timeout", "http", "connection", "malformed"
        self.status = status
        self.retry_after = retry_after


class GenerationError(UpstreamError):
    """The model could not give a usable answer: timeout, HTTP error or malformed output."""


class HungUp(BaseException):
    """The call was hung up on from another thread (`Hangup.now()`). Like asyncio's CancelledError it is not an
    Exception, so no `except Exception` on its way out takes it for the model's failure (a degraded answer, a
    failure counted by the breaker): the request ends as cancelled."""


_watched = threading.local()  # .hangup: the Hangup watching this thread's calls, if any


class Hangup:
    """Hang up, from another thread, on the model calls one thread makes inside `watching()`.

    Each connection those calls open is kept (weakly) and `now()` shuts it down: a thread blocked reading a model
    that stalls wakes at once, which closing the response from another thread would not do (the read waits on
    for data or its timeout). A call the thread starts after `now()` raises HungUp before it connects."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: weakref.WeakSet = weakref.WeakSet()
        self.fired = False

    @contextlib.contextmanager
    def watching(self) -> Iterator[Hangup]:
        """Let `now()` hang up on the calls this thread makes inside the block."""
        previous = getattr(_watched, "hangup", None)
        _watched.hangup = self
        try:
            yield self
        finally:
            _watched.hangup = previous

    def now(self) -> None:
        """Hang up on every call in flight and refuse the next ones; safe from any thread, any number of times."""
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def _opened(self, sock: socket.socket) -> None:
        with self._lock:
            if not self.fired:
                self._sockets.add(sock)
                return
        _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        # The plain socket's shutdown, also under TLS: the thread reading it wakes with an end of stream. A socket
        # its call has closed since has no descriptor left, so this cannot reach another connection.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _raise_if_hung_up(cause: BaseException | None = None) -> None:
    """Raise HungUp when this thread's calls were hung up on: what looked like a broken connection was that."""
    hangup = getattr(_watched, "hangup", None)
    if hangup is not None and hangup.fired:
        raise HungUp("the call was hung up on") from cause


@functools.cache
def _watched_adapter() -> type:
    """requests' HTTP adapter, with connections that a `Hangup` watching the calling thread can shut."""
    import urllib3
    from requests.adapters import HTTPAdapter

    class Watched:
        def connect(self) -> None:
            super().connect()
            hangup = getattr(_watched, "hangup", None)
            if hangup is not None:
                hangup._opened(self.sock)  # noqa: SLF001 - the connection hands its socket to its watcher

    class Connection(Watched, urllib3.connection.HTTPConnection):
        pass

    class SecureConnection(Watched, urllib3.connection.HTTPSConnection):
        pass

    class Pool(urllib3.HTTPConnectionPool):
        ConnectionCls = Connection

    class SecurePool(urllib3.HTTPSConnectionPool):
        ConnectionCls = SecureConnection

    pools = {"http": Pool, "https": SecurePool}

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy, **kwargs):
            manager = super().proxy_manager_for(proxy, **kwargs)
            if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:  # not SOCKS's own
                manager.pool_classes_by_scheme = pools
            return manager

    return Adapter


def _session():
    """A session for one call, as `requests.post` makes, whose connections a watching `Hangup` can shut."""
    import requests

    session = requests.Session()
    adapter = _watched_adapter()()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def retry_after_seconds(value: str | None) -> float | None:
    """Read a Retry-After header (RFC 9110 10.2.3): delay-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - time.time())


def post_json(url: str, payload: dict, *, api_key: str, timeout, error: type[UpstreamError], service: str,
              stream: bool = False):
    """POST JSON with an optional Bearer key; return the 200 response, else raise `error(kind, message)` with
    kind "timeout", "connection" or "http" (the key never appears in a message). An HTTP error carries its
    status, and a 429 its Retry-After, so the breaker can tell a refusal or a rate limit from an outage.
    Raise HungUp when a `Hangup` watching this thread has fired, before or during the call."""
    import requests

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    _raise_if_hung_up()
    try:
        with _session() as session:
            response = session.post(url, json=payload, headers=headers, timeout=timeout, stream=stream)
    except requests.Timeout as exc:
        _raise_if_hung_up(exc)
        raise error("timeout", f"{service} did not answer in time") from exc
    except requests.RequestException as exc:
        _raise_if_hung_up(exc)
        raise error("connection", f"cannot reach {service} ({type(exc).__name__})") from exc
    if response.status_code != 200:
        response.close()
        limited = response.status_code == 429
        retry_after = retry_after_seconds(response.headers.get("Retry-After")) if limited else None
        raise error("http", f"{service} answered HTTP {response.status_code}", status=response.status_code,
                    retry_after=retry_after)
    return response


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

    def _request(self, messages: list[dict], *, stream: bool, extra: dict | None = None):
        payload = {"model": self.model, "messages": messages, "temperature": self.temperature,
                   "max_tokens": self.max_tokens, "stream": stream, **(extra or {})}
        if stream:
            payload["stream_options"] = {"include_usage": True}
        if self.seed is not None:
            payload["seed"] = self.seed
        return post_json(self.base_url.rstrip("/") + "/chat/completions", payload, api_key=self.api_key,
                         timeout=self.timeout, stream=stream, error=GenerationError, service="the generation model")

    def complete(self, messages: list[dict]) -> tuple[str, Usage]:
        """Return the whole answer and its token usage."""
        completion = self.complete_full(messages)
        return completion.text, completion.usage

    def complete_full(self, messages: list[dict], *, extra: dict | None = None) -> Completion:
        """Return the whole answer, the provider's separate reasoning text (DeepSeek's `reasoning_content`;
        "" when none) and the usage. `extra` adds request fields (`response_format`, thinking switches)."""
        import requests

        response = self._request(messages, stream=False, extra=extra)
        try:
            body = response.json()
            message = body["choices"][0]["message"]
            text = message["content"]
            reasoning = message.get("reasoning_content") or ""
            usage = body.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            _raise_if_hung_up(exc)  # a body cut by a hangup is no JSON either
            raise GenerationError("malformed", "the generation model returned a malformed body") from exc
        except requests.RequestException as exc:
            _raise_if_hung_up(exc)
            raise GenerationError("timeout", "the generation model stopped mid-answer") from exc
        if not isinstance(text, str):
            raise GenerationError("malformed", "the generation model returned no text")
        return Completion(text, reasoning if isinstance(reasoning, str) else "", reported_usage(usage))

    def stream(self, messages: list[dict], usage_out: list | None = None, *, extra: dict | None = None,
               reasoning_out: list | None = None) -> Iterator[str]:
        """Yield text deltas as the model writes them (server-sent events); append the Usage to usage_out and
        reasoning deltas (DeepSeek's `reasoning_content`) to reasoning_out.

        Closing the generator (a client that went away) closes the HTTP response, which stops the model; a
        `Hangup` watching this thread does the same from another thread, and the stream raises HungUp.
        """
        import requests
        import urllib3

        response = self._request(messages, stream=True, extra=extra)
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
                # Valid JSON of another shape (a list, a string, a choice that is not an object) is as
                # malformed as invalid JSON: the caller degrades, it never sees an AttributeError.
                if not isinstance(event, dict):
                    raise GenerationError("malformed", "the generation model sent an event that is not an object")
                if event.get("usage"):
                    usage = reported_usage(event["usage"])
                choices = event.get("choices") or []
                if not isinstance(choices, list):
                    raise GenerationError("malformed", "the generation model sent choices that are not a list")
                for choice in choices:
                    delta = (choice.get("delta") or {}) if isinstance(choice, dict) else None
                    if not isinstance(delta, dict):
                        raise GenerationError("malformed", "the generation model sent a delta that is not an object")
                    thought = delta.get("reasoning_content")
                    if thought and reasoning_out is not None:
                        reasoning_out.append(str(thought))
                    text = delta.get("content")
                    if text:
                        if not isinstance(text, str):
                            raise GenerationError("malformed", "the generation model sent content that is not text")
                        received = True
                        yield text
        except requests.RequestException as exc:
            _raise_if_hung_up(exc)
            raise GenerationError("timeout", "the generation model stopped mid-answer") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # the body read itself: a cut or a stalled stream
            _raise_if_hung_up(exc)
            kind = "timeout" if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)) else "connection"
            raise GenerationError(kind, "the generation model's stream broke off mid-answer") from exc
        finally:
            response.close()
        _raise_if_hung_up()  # a hangup can also read as the end of the body
        if not received:
            raise GenerationError("malformed", "the generation model streamed no text")
        if usage_out is not None:
            usage_out.append(usage)


def reported_usage(usage: object) -> Usage:
    """The provider's `usage` object as a Usage; raise GenerationError("malformed") for any other shape."""
    if not usage:
        return Usage()
    try:
        return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    except (AttributeError, TypeError, ValueError) as exc:
        raise GenerationError("malformed", "the generation model reported its usage in another shape") from exc


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

