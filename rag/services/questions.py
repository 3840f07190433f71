"""The one question path (E12): every face asks through `question_search` or `question_answer`.

A face (web, MCP, CLI, eval, replay, and the retrieval APIs after them) parses its own request shape into
a `QuestionRequest`, calls one of these, and shapes the outcome its own way. The service validates the
request, counts it in flight, resolves the knowledge base's version, runs the engine and writes exactly
one request record, for a success and for every failure, under one policy (`records.py`). A face keeps
only its own limits: the web's token pool reaches the service as a `TokenMeter`, a key's quota stays with
the MCP gate (which records what it refuses through `question_refused`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ContextManager, Literal, Protocol, overload

from django.conf import settings

from rag import live
from rag.engine.generate import answer_without_model
from rag.engine.search import MODES
from rag.engine.types import Answer, SearchResult, Token
from rag.errors import ServiceError
from rag.models import Channel, IndexVersion, RequestRecord
from rag.pipeline import get_engine
from rag.services.knowledge import BUILDING_RETRY_AFTER, aliases_for, building_message, index_building, kb_get_current
from rag.services.records import MAX_KB_CHARS, MAX_QUESTION_CHARS, new_request_id, request_record_write

MAX_TOP_K = 50
MAX_EXCLUDE = 100
MAX_CHUNK_ID_CHARS = 64
Kind = RequestRecord.Kind
INTERNAL = ServiceError("internal_error", "The request failed on the server.", status=500)
CANCELLED = ServiceError("cancelled", "The reader went away before the answer was complete.", status=499)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks through what. Only the key's public prefix is recorded; `key_id` is for the face's own
    usage counters. `arguments` are the call's raw arguments (an MCP tool call), recorded as received."""

    key_id: int | None = None
    key_prefix: str = ""
    tool: str = ""
    arguments: dict = field(default_factory=dict)
    session_id: str = ""
    transport: str = ""
    app: str = ""


class TokenReservation(Protocol):
    def settle(self, tokens: int) -> None:
        """Report what the answer really cost."""


class TokenMeter(Protocol):
    """A face's token budget (the web's daily pool), entered only around a real model call."""

    def reserve(self) -> ContextManager[TokenReservation]:
        """Reserve an answer's expected tokens, or raise a ServiceError (429) when the budget is spent."""


@dataclass(frozen=True, slots=True)
class QuestionRequest:
    """One question as a face received it; the service validates every field (so a bad one is a recorded
    failure with a stable code, whatever the face)."""

    question: object
    channel: Channel
    kb: object = None  # a knowledge base slug; None: RAG_DEFAULT_KB
    top_k: object = None  # results for a single-class question; None: the engine's default (5)
    mode: object = "hybrid"
    exclude: object = ()  # chunk ids the user disabled (E6)
    version: str | None = None  # a named ready version (eval runs, replay); None: the active one
    rerank: object = None  # True/False: rerank this question or not; None: as configured (RAG_RERANK_*)
    rewrite: object = None  # True/False: search the model's keyword rewrite too or not; None: as configured
    caller: Caller = field(default_factory=Caller)
    meter: TokenMeter | None = None
    record: bool = True  # False only for batch use that asks not to be recorded (`rag search - --no-record`)


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    request_id: str
    question: str  # as asked
    kb: str
    version: str
    built_at: str | None  # when that version was built (ISO 8601): which docs the reader saw
    result: SearchResult
    latency_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    request_id: str
    question: str
    kb: str
    version: str
    built_at: str | None
    result: SearchResult
    answer: Answer
    generate_ms: float = 0.0
    latency_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class RetrievalEvent:
    """The evidence was found; the answer is being written next."""

    search: SearchOutcome


@dataclass(frozen=True, slots=True)
class TokenEvent:
    text: str


@dataclass(frozen=True, slots=True)
class FinalEvent:
    outcome: AnswerOutcome


AnswerEvent = RetrievalEvent | TokenEvent | FinalEvent


# -- the two questions ----------------------------------------------------------------------------------


def question_search(request: QuestionRequest) -> SearchOutcome:
    """Plan and search one question; record it."""
    with _Call(request, Kind.SEARCH) as call:
        outcome = call.search()
        call.record(result=outcome.result)
        return outcome


@overload
def question_answer(request: QuestionRequest, *, stream: Literal[False] = False) -> AnswerOutcome: ...


@overload
def question_answer(request: QuestionRequest, *, stream: Literal[True],
                    cancelled: Callable[[], bool] = ...) -> Iterator[AnswerEvent]: ...


def question_answer(request: QuestionRequest, *, stream: bool = False,
                    cancelled: Callable[[], bool] = lambda: False):
    """Search, then answer from the adopted evidence: the whole `AnswerOutcome` (the model is asked without
    streaming), or with `stream=True` an iterator of events as the model writes (see `_answer_events`)."""
    if stream:
        return _answer_events(request, cancelled)
    return _answer_whole(request)


def _answer_whole(request: QuestionRequest) -> AnswerOutcome:
    with _Call(request, Kind.CHAT) as call:
        search = call.search()
        started = time.perf_counter()
        answer = _answer_without_model(request, search.result)
        if answer is None:
            generator = get_engine().generator
            with _metered(request, generator) as reservation:
                answer = generator.run(search.result.plan.corrected_question, search.result.plan,
                                       list(search.result.hits))
                if reservation is not None:
                    reservation.settle(answer.usage.total_tokens)
        return call.answered(search, answer, started)


def _answer_events(request: QuestionRequest, cancelled: Callable[[], bool]) -> Iterator[AnswerEvent]:
    """Search, then answer as the model writes: a RetrievalEvent, TokenEvents, then the FinalEvent.

    Chitchat, out-of-catalog and empty evidence never reach the model (E7). When `cancelled()` turns true
    (the reader went away), or the consumer closes this iterator, the model's stream is closed and the
    request is recorded as cancelled. A failure is recorded, then raised from the iterator.
    """
    with _Call(request, Kind.CHAT) as call:
        search = call.search()
        yield RetrievalEvent(search)
        started = time.perf_counter()
        answer = _answer_without_model(request, search.result)
        if answer is None:
            generator = get_engine().generator
            with _metered(request, generator) as reservation:
                events = generator.stream(search.result.plan.corrected_question, search.result.plan,
                                          list(search.result.hits))
                try:
                    for event in events:
                        if isinstance(event, Token):
                            if cancelled():
                                call.fail(CANCELLED)
                                return
                            yield TokenEvent(event.text)
                        else:
                            answer = event
                finally:
                    events.close()  # a reader that left: hang up on the model now
                if reservation is not None:
                    reservation.settle(answer.usage.total_tokens)
        else:
            yield TokenEvent(answer.text)
        yield FinalEvent(call.answered(search, answer, started))


def _answer_without_model(request: QuestionRequest, result: SearchResult) -> Answer | None:
    """The answers no model is asked for (E7): chitchat, out-of-catalog, and no usable evidence."""
    return answer_without_model(result.plan, list(result.hits), excluded_all=bool(request.exclude) and not result.hits,
                                weak_evidence=result.weak_evidence)


def question_refused(request: QuestionRequest, *, kind: str, error: ServiceError) -> None:
    """Record a request a face refused before asking (a key's rate limit or quota): every request leaves
    one record, refused ones too."""
    with live.in_flight(request.channel):
        call = _Call(request, kind)
        call.fail(error)


# -- one request on its way through -----------------------------------------------------------------------


class _Call:
    """One request: its id and start, validation, the version it reads, and the one record it leaves.

    As a context manager it counts the request in flight and records any failure that escapes it (a
    ServiceError with its code, anything else as `internal_error`); a block left without a record (a
    stream closed by its reader) is recorded as cancelled.
    """

    def __init__(self, request: QuestionRequest, kind: str):
        self.request = request
        self.kind = kind
        self.request_id = new_request_id()
        self.started = time.perf_counter()
        self.kb = request.kb if request.kb is not None else settings.RAG_DEFAULT_KB
        self.recorded = False
        self.result: SearchResult | None = None  # kept for the record when answering fails after the search
        self._in_flight = None

    def __enter__(self) -> _Call:
        self._in_flight = live.in_flight(self.request.channel)
        self._in_flight.__enter__()
        return self

    def __exit__(self, kind, exc, traceback) -> bool:
        try:
            if isinstance(exc, ServiceError):
                exc.request_id = self.request_id
            if exc is not None and not self.recorded:
                self.fail(exc if isinstance(exc, ServiceError) else INTERNAL if isinstance(exc, Exception)
                          else CANCELLED)
            elif not self.recorded:
                self.fail(CANCELLED)
        finally:
            self._in_flight.__exit__(kind, exc, traceback)
        return False

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def search(self) -> SearchOutcome:
        request = self.request
        question, top_k, mode, exclude = _validated(request)
        knowledge_base = kb_get_current(self.kb)
        row = _version_of(knowledge_base, request.version)
        engine = get_engine()
        searcher = engine.searcher(knowledge_base.slug, row.name, aliases_for(knowledge_base))
        result = self.result = searcher.run(question, mode=mode, top_k=top_k, exclude=exclude,
                                            rerank=request.rerank, rewrite=request.rewrite)
        return SearchOutcome(request_id=self.request_id, question=question, kb=knowledge_base.slug, version=row.name,
                             built_at=row.built_at.isoformat() if row.built_at else None, result=result,
                             latency_ms=round(self.elapsed_ms(), 3))

    def answered(self, search: SearchOutcome, answer: Answer, generate_started: float) -> AnswerOutcome:
        generate_ms = round((time.perf_counter() - generate_started) * 1000, 3)
        outcome = AnswerOutcome(request_id=self.request_id, question=search.question, kb=search.kb, version=search.version,
                                built_at=search.built_at, result=search.result, answer=answer,
                                generate_ms=generate_ms, latency_ms=round(self.elapsed_ms(), 3))
        self.record(result=search.result, answer=answer, generate_ms=generate_ms)
        return outcome

    def record(self, *, result=None, answer=None, error=None, generate_ms=None) -> None:
        if self.recorded:
            return
        self.recorded = True
        if not self.request.record:
            return
        request_record_write(request_id=self.request_id, channel=self.request.channel, kind=self.kind,
                             question=self.request.question, kb=self.kb, caller=self.request.caller,
                             options=_options(self.request), result=result, answer=answer, error=error,
                             latency_ms=self.elapsed_ms(), generate_ms=generate_ms)

    def fail(self, error: ServiceError) -> None:
        self.record(result=self.result, error=error)


def _options(request: QuestionRequest) -> dict:
    """The request options a face set (top_k, mode, rerank, rewrite), as asked: recorded so a replay asks the same."""
    options = {"top_k": request.top_k, "mode": None if request.mode == "hybrid" else request.mode,
               "rerank": request.rerank, "rewrite": request.rewrite}
    return {name: value for name, value in options.items() if value is not None}


def _validated(request: QuestionRequest) -> tuple[str, int | None, str, tuple[str, ...]]:
    """Check a request's values; raise a ServiceError with a stable code for the first bad one."""
    question, top_k, mode, exclude = request.question, request.top_k, request.mode, request.exclude
    if not isinstance(question, str) or not question.strip() or "\x00" in question:
        raise ServiceError("invalid_question", "The question must be a non-empty string (without NUL characters).")
    if len(question) > MAX_QUESTION_CHARS:
        raise ServiceError("question_too_long", f"The question is longer than {MAX_QUESTION_CHARS} characters.")
    kb = request.kb
    if kb is not None and (not isinstance(kb, str) or not kb or len(kb) > MAX_KB_CHARS):
        raise ServiceError("invalid_kb", "kb must be the slug of a knowledge base.")
    if mode not in MODES:
        raise ServiceError("invalid_mode", f"Mode must be one of: {', '.join(MODES)}.")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K):
        raise ServiceError("invalid_top_k", f"top_k must be an integer from 1 to {MAX_TOP_K}.")
    if exclude is None:
        exclude = ()
    if (not isinstance(exclude, list | tuple) or len(exclude) > MAX_EXCLUDE
            or not all(isinstance(c, str) and 0 < len(c) <= MAX_CHUNK_ID_CHARS for c in exclude)):
        raise ServiceError("invalid_exclude", f"exclude must be a list of at most {MAX_EXCLUDE} chunk ids.")
    for name in ("rerank", "rewrite"):
        if getattr(request, name) is not None and not isinstance(getattr(request, name), bool):
            raise ServiceError(f"invalid_{name}", f"{name} must be true, false or null.")
    return question, top_k, mode, tuple(exclude)


def _version_of(knowledge_base, name: str | None) -> IndexVersion:
    if name:
        row = knowledge_base.versions.filter(name=name, status=IndexVersion.Status.READY).first()
        if row is None:
            raise ServiceError("version_not_found", f"Version {name} of {knowledge_base.slug} is not available.",
                               status=404)
        return row
    if knowledge_base.active_version is None:
        building = index_building(knowledge_base)
        if building is not None:
            raise ServiceError("index_building", building_message(knowledge_base, building), status=503,
                               headers={"Retry-After": str(BUILDING_RETRY_AFTER)})
        raise ServiceError("no_active_version",
                           f"{knowledge_base.slug} has no index yet; run `rag reindex --kb {knowledge_base.slug}`.",
                           status=409)
    return knowledge_base.active_version


def _metered(request: QuestionRequest, generator) -> ContextManager[TokenReservation | None]:
    """The face's token budget around a real model call; nothing when the answer costs no tokens."""
    if request.meter is None or not generator.uses_model:
        return contextlib.nullcontext()
    return request.meter.reserve()
