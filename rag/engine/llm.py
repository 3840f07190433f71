"""The OpenAI-compatible chat-completions client, used by generation (E8) and by evaluation's judge.

Any `/chat/completions` endpoint works (DeepSeek, Qwen/DashScope, vLLM, llama.cpp server); answers are
read whole or as server-sent events as they arrive.
"""

from __future__ import annotations

import json
import re
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


class GenerationError(Exception):
    """The model could not give a usable answer: timeout, HTTP error or malformed output."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout", "http", "connection", "malformed"


def post_json(url: str, payload: dict, *, api_key: str, timeout, error: type[Exception], service: str,
              stream: bool = False):
    """POST JSON with an optional Bearer key; return the 200 response, else raise `error(kind, message)` with
    kind "timeout", "connection" or "http" (the key never appears in a message)."""
    import requests

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        response = requests.post(url, json=payload, headers=headers, timeout=timeout, stream=stream)
    except requests.Timeout as exc:
        raise error("timeout", f"{service} did not answer in time") from exc
    except requests.RequestException as exc:
        raise error("connection", f"cannot reach {service} ({type(exc).__name__})") from exc
    if response.status_code != 200:
        response.close()
        raise error("http", f"{service} answered HTTP {response.status_code}")
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
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise GenerationError("malformed", "the generation model returned a malformed body") from exc
        except requests.RequestException as exc:
            raise GenerationError("timeout", "the generation model stopped mid-answer") from exc
        if not isinstance(text, str):
            raise GenerationError("malformed", "the generation model returned no text")
        return Completion(text, reasoning if isinstance(reasoning, str) else "",
                          Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)))

    def stream(self, messages: list[dict], usage_out: list | None = None, *, extra: dict | None = None,
               reasoning_out: list | None = None) -> Iterator[str]:
        """Yield text deltas as the model writes them (server-sent events); append the Usage to usage_out and
        reasoning deltas (DeepSeek's `reasoning_content`) to reasoning_out.

        Closing the generator (a client that went away) closes the HTTP response, which stops the model.
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
                if event.get("usage"):
                    usage = Usage(int(event["usage"].get("prompt_tokens") or 0),
                                  int(event["usage"].get("completion_tokens") or 0))
                for choice in event.get("choices") or []:
                    thought = (choice.get("delta") or {}).get("reasoning_content")
                    if thought and reasoning_out is not None:
                        reasoning_out.append(thought)
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        received = True
                        yield delta
        except requests.RequestException as exc:
            raise GenerationError("timeout", "the generation model stopped mid-answer") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # the body read itself: a cut or a stalled stream
            kind = "timeout" if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)) else "connection"
            raise GenerationError(kind, "the generation model's stream broke off mid-answer") from exc
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

