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
from dataclasses import dataclass, field, replace
from typing import ContextManager, Literal, Protocol, overload

from django.conf import settings

from infra import live
from infra.errors import ServiceError
from rag.engine.constrained import Candidate, Choice, ChoiceError, answer_pieces
from rag.engine.embed import EmbeddingBusy
from rag.engine.generate import answer_without_model
from rag.engine.sdk import VersionNote, is_chinese
from rag.engine.search import MODES
from rag.engine.types import Answer, Citation, Hit, SearchOptions, SearchResult, Token, Usage
from rag.models import Channel, IndexVersion, RequestRecord
from rag.pipeline import get_engine
from rag.retrieval_cache import retrieval_cache
from rag.services.knowledge import BUILDING_RETRY_AFTER, aliases_for, building_message, index_building, kb_get_current
from rag.services.profiles import Profile, profile_of
from rag.services.sdk import kb_serving, version_notes
from rag.services.records import (MAX_KB_CHARS, MAX_QUESTION_CHARS, VISIBLE_RE, new_request_id,
                                  request_record_write)

MAX_TOP_K = 50
MAX_CANDIDATES = 200  # ranked candidates a face may list beside the adopted evidence (CG_RAG's topk)
MAX_CHOICES = 20  # candidates constrained generation may choose (CG_RAG's max_items)
MAX_EXCLUDE = 100
MAX_CHUNK_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """What the question service accepts: the faces write their schemas and help from this one object."""

    question_chars: int = MAX_QUESTION_CHARS
    kb_chars: int = MAX_KB_CHARS
    top_k: int = MAX_TOP_K
    candidates: int = MAX_CANDIDATES
    choices: int = MAX_CHOICES
    exclude: int = MAX_EXCLUDE
    chunk_id_chars: int = MAX_CHUNK_ID_CHARS


LIMITS = Limits()
BUSY_RETRY_AFTER = 2  # seconds: a queue of embeddings drains in about that
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
    def settle(self, tokens: int, *, model_called: bool = True) -> None:
        """Report what the answer really cost; `model_called` False (an open breaker, a failed call) costs nothing."""


class CapacityGate(Protocol):
    """A face's concurrency limits (infra.capacity), held around the engine's search and the model's call."""

    def hold(self, resource: str) -> ContextManager[None]:
        """Hold a slot of "retrieval" or "generation", or raise a ServiceError (429) after waiting."""


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
    kb: object = None  # a knowledge base slug, or `sdk@version`; None: RAG_DEFAULT_KB
    sdk_version: object = None  # an SDK version or alias of the knowledge base (rag.services.sdk); None: `latest`
    top_k: object = None  # results for a single-class question; None: the engine's default (5)
    mode: object = "hybrid"
    exclude: object = ()  # chunk ids the user disabled (E6)
    version: str | None = None  # a named ready version (eval runs, replay); None: the active one
    rerank: object = None  # True/False: rerank this question or not; None: as configured (RAG_RERANK_*)
    rewrite: object = None  # True/False: search the model's keyword rewrite too or not; None: as configured
    candidates: object = None  # also list up to this many ranked candidates (SearchOutcome.candidates); None: none
    cache: bool = False  # reuse an identical search's outcome from the retrieval cache (rag.retrieval_cache)
    caller: Caller = field(default_factory=Caller)
    meter: TokenMeter | None = None
    capacity: CapacityGate | None = None
    record: bool = True  # False only for batch use that asks not to be recorded (`rag search - --no-record`)
    # A reason not to ask the model for this answer (a face whose per-client limits cannot be counted): the answer
    # is extractive, degraded with this reason, and spends nothing. "": ask the model as configured.
    no_model: str = ""


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    request_id: str
    question: str  # as asked
    kb: str
    version: str
    built_at: str | None  # when that version was built (ISO 8601): which docs the reader saw
    result: SearchResult
    latency_ms: float = 0.0
    candidates: tuple[Hit, ...] = ()  # the adopted hits, then the next ranked ones (QuestionRequest.candidates)
    profile: Profile | None = None  # what served the search (its fingerprint)
    cached: SearchOutcome | None = None  # on a cache hit: the outcome as it was first computed
    source_revision: str = ""  # the git commit, or the website crawl, that version was built from; "" for a folder
    sdk: str = ""  # the SDK whose version was read ("" for a knowledge base without versions)
    sdk_version: str = ""  # the SDK version read: every face says which one it served
    version_notes: tuple[VersionNote, ...] = ()  # API names asked that this version lacks and another documents


@dataclass(frozen=True, slots=True)
class ChoiceOutcome:
    """Constrained generation's outcome: the candidates offered, and the model's choice or why there is none."""

    request_id: str
    question: str
    candidates: tuple[Candidate, ...]
    search: SearchOutcome | None  # the search that found the candidates; None when the caller gave them
    choice: Choice | None
    error: ServiceError | None  # generation_not_configured, generation_response_invalid, no_stable_article, …
    generate_ms: float = 0.0
    latency_ms: float = 0.0
    raw: str = ""  # the model's reply as received, also when it was unusable
    usage: Usage = field(default_factory=Usage)  # what the model call cost, also when it failed


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
    source_revision: str = ""
    sdk: str = ""
    sdk_version: str = ""
    version_notes: tuple[VersionNote, ...] = ()


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


@dataclass(frozen=True, slots=True)
class GenerationEvent:
    """The candidates are found; the model is choosing among them next."""


@dataclass(frozen=True, slots=True)
class ChoiceEvent:
    outcome: ChoiceOutcome


AnswerEvent = RetrievalEvent | TokenEvent | FinalEvent
ChoiceStreamEvent = RetrievalEvent | GenerationEvent | TokenEvent | ChoiceEvent


# -- the two questions ----------------------------------------------------------------------------------


def question_search(request: QuestionRequest) -> SearchOutcome:
    """Plan and search one question; record it."""
    with QuestionCall(request, Kind.SEARCH) as call:
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
    with QuestionCall(request, Kind.CHAT) as call:
        search = call.search()
        started = time.perf_counter()
        answer = _answer_without_model(request, search.result)
        if answer is None:
            generator = get_engine().generator
            with _metered(request, generator) as reservation:
                answer = generator.run(search.result.plan.corrected_question, search.result.plan,
                                       list(search.result.hits))
                if reservation is not None:
                    reservation.settle(answer.usage.total_tokens, model_called=answer.model_called)
        return call.answered(search, _noted(answer, notes_text(search)), started)


def _answer_events(request: QuestionRequest, cancelled: Callable[[], bool]) -> Iterator[AnswerEvent]:
    """Search, then answer as the model writes: a RetrievalEvent, TokenEvents, then the FinalEvent.

    Chitchat, out-of-catalog and empty evidence never reach the model (E7). When `cancelled()` turns true
    (the reader went away), or the consumer closes this iterator, the model's stream is closed and the
    request is recorded as cancelled. A failure is recorded, then raised from the iterator.
    """
    with QuestionCall(request, Kind.CHAT) as call:
        search = call.search()
        yield RetrievalEvent(search)
        started = time.perf_counter()
        notes = notes_text(search)
        if notes:  # what the asked version lacks comes first, whoever writes the rest
            yield TokenEvent(notes)
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
                    reservation.settle(answer.usage.total_tokens, model_called=answer.model_called)
        else:
            yield TokenEvent(answer.text)
        yield FinalEvent(call.answered(search, _noted(answer, notes), started))


def notes_text(search: SearchOutcome) -> str:
    """The version notes as the answer's opening lines, in the question's language; "" when there are none."""
    chinese = is_chinese(search.question)
    return "\n\n".join(note.text(chinese) for note in search.version_notes) + ("\n\n" if search.version_notes else "")


def _noted(answer: Answer, notes: str) -> Answer:
    return replace(answer, text=notes + answer.text) if notes else answer


def _answer_without_model(request: QuestionRequest, result: SearchResult) -> Answer | None:
    """The answers no model is asked for (E7): chitchat, out-of-catalog, and no usable evidence; and, when the
    face says so (`no_model`), the extractive answer degraded with its reason."""
    answer = answer_without_model(result.plan, list(result.hits),
                                  excluded_all=bool(request.exclude) and not result.hits,
                                  weak_evidence=result.weak_evidence)
    generator = get_engine().generator
    if answer is None and request.no_model and generator.uses_model:
        answer = generator.unavailable(result.plan.corrected_question, result.plan, list(result.hits),
                                       reason=request.no_model)
    return answer


def question_refused(request: QuestionRequest, *, kind: str, error: ServiceError) -> None:
    """Record a request a face refused before asking (a key's rate limit or quota): every request leaves
    one record, refused ones too."""
    with live.in_flight(request.channel):
        call = QuestionCall(request, kind)
        call.fail(error)


# -- constrained generation (CG_RAG) ---------------------------------------------------------------------

NOT_CONFIGURED = ServiceError("generation_not_configured", "检索服务生成接口未配置，请检查服务配置。")
NO_STABLE_ARTICLE = ServiceError("no_stable_article", "当前在线候选中未稳定选出明确条文。")
RESPONSE_INVALID = ServiceError("generation_response_invalid", "生成接口返回的结果无法解析为有效的候选编号。")
UNAVAILABLE = ServiceError("generation_unavailable", "生成接口暂时不可用（超时或上游错误），请稍后重试。")


def question_choose(request: QuestionRequest, *, candidates: list[Candidate] | None = None, max_items: int = 10,
                    thinking: bool | None = None) -> ChoiceOutcome:
    """Constrained generation: the model chooses up to `max_items` of the candidates. Without `candidates`,
    search first and offer the search's candidates (CG_RAG's /rag). One record either way."""
    outcome = None
    for event in question_choose_stream(request, candidates=candidates, max_items=max_items, thinking=thinking):
        if isinstance(event, ChoiceEvent):
            outcome = event.outcome
    return outcome


def question_choose_stream(request: QuestionRequest, *, candidates: list[Candidate] | None = None,
                           max_items: int = 10, thinking: bool | None = None, token_delay: float = 0.0,
                           cancelled: Callable[[], bool] = lambda: False) -> Iterator[ChoiceStreamEvent]:
    """`question_choose` as events: RetrievalEvent (when it searched), GenerationEvent, the answer text as
    TokenEvents (`token_delay` seconds apart), then ChoiceEvent. The model's reply is read as it is written,
    so a reader that leaves (`cancelled()`) hangs up on it; the request is then recorded as cancelled.

    A choice that cannot be made is not an exception: the outcome says why (`error`), and the model is not
    asked when nothing is configured or there is no candidate. Capacity and validation failures raise."""
    with QuestionCall(request, Kind.CHAT) as call:
        if type(max_items) is not int or not 1 <= max_items <= MAX_CHOICES:
            raise ServiceError("invalid_max_items", f"max_items must be an integer from 1 to {MAX_CHOICES}.")
        search = None
        if candidates is None:
            search = call.search()
            yield RetrievalEvent(search)
            candidates = [candidate_of(hit) for hit in (search.candidates or search.result.hits)]
        else:
            validated_question(request.question)
        yield GenerationEvent()
        started = time.perf_counter()
        chooser = get_engine().chooser
        choice, error, raw, usage = None, None, "", Usage()
        if not candidates or (search is not None and not search.result.hits):
            error = NO_STABLE_ARTICLE  # nothing to choose from, or the engine adopted nothing (not about the docs)
        elif chooser is None:
            error = NOT_CONFIGURED
        else:
            with held(request, "generation"):
                try:
                    choice = chooser.run(request.question.strip(), candidates, max_items=max_items,
                                         thinking=thinking, stream=True, cancelled=cancelled)
                except ChoiceError as exc:
                    if exc.kind == "cancelled":
                        call.fail(CANCELLED)
                        return
                    error = RESPONSE_INVALID if exc.kind in ("invalid", "malformed") else UNAVAILABLE
                    raw, usage = exc.raw, exc.usage
            if choice is not None:
                raw, usage = choice.raw, choice.usage
            if choice is not None and not choice.indices:
                error = NO_STABLE_ARTICLE
        if choice is not None and error is None:
            for piece in answer_pieces(choice.answer_text):
                if cancelled():
                    call.fail(CANCELLED)
                    return
                yield TokenEvent(piece)
                if token_delay:
                    time.sleep(token_delay)
        generate_ms = round((time.perf_counter() - started) * 1000, 3)
        outcome = ChoiceOutcome(request_id=call.request_id, question=request.question, candidates=tuple(candidates),
                                search=search, choice=choice, error=error, generate_ms=generate_ms,
                                latency_ms=round(call.elapsed_ms(), 3), raw=raw, usage=usage)
        call.record(result=search.result if search else None, answer=_choice_answer(outcome),
                    generate_ms=generate_ms)
        yield ChoiceEvent(outcome)


def candidate_of(hit: Hit) -> Candidate:
    """A chunk as a constrained-generation candidate: the page title, the heading path (or member), the text."""
    chunk = hit.chunk
    article = " > ".join(chunk.heading_path[1:]) or chunk.member or chunk.title
    return Candidate(title=chunk.title, article=article, text=chunk.text, chunk_id=chunk.chunk_id, source=chunk.source)


def _choice_answer(outcome: ChoiceOutcome) -> Answer:
    """The record's answer: the chosen candidates as citations; a choice that could not be made is empty
    (no candidate) or degraded (no model, or an unusable reply), with the reason."""
    choice, error, usage = outcome.choice, outcome.error, outcome.usage
    if error is not None:
        mode = "empty" if error is NO_STABLE_ARTICLE else "constrained"
        return Answer(text="", citations=(), confidence="none", mode=mode, degraded=error is not NO_STABLE_ARTICLE,
                      reason=error.code, usage=usage, model_called=error in (RESPONSE_INVALID, UNAVAILABLE))
    cited = tuple(Citation(number=n, chunk_id=outcome.candidates[n - 1].chunk_id,
                           source=outcome.candidates[n - 1].source or outcome.candidates[n - 1].title,
                           heading_path=(outcome.candidates[n - 1].article,)) for n in choice.indices)
    return Answer(text=choice.answer_text, citations=cited, confidence="none", mode="constrained", usage=usage,
                  model_called=True)


def question_call(request: QuestionRequest, kind: str = Kind.CHAT) -> QuestionCall:
    """One request of a face whose model call is its own (CG_RAG's vision routes): a context manager that
    counts it in flight and records it once; `call.search()` searches as every face does, `call.record(...)`
    records the outcome, and a failure that escapes is recorded with its code."""
    return QuestionCall(request, kind)


# -- one request on its way through -----------------------------------------------------------------------


class QuestionCall:
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

    def __enter__(self) -> QuestionCall:
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
        # An answer's evidence gets the sections its structure calls for (complete).
        question, options = _validated(request, complete=self.kind == Kind.CHAT)
        served = kb_serving(self.kb, request.sdk_version)
        self.kb = served.kb  # the record names the version read (`three@2.0`): traffic and failures per version
        knowledge_base = kb_get_current(served.kb)
        row = version_of(knowledge_base, request.version)
        profile = profile_of(knowledge_base.slug, row) if request.cache else None
        # The profile names the version (and the models): a reindex never hits an old entry.
        key = (knowledge_base.slug, profile.id, question.strip(), options) if profile is not None else None
        cached = retrieval_cache().get(key) if key is not None else None
        if cached is not None:
            self.result = cached.result
            return replace(cached, request_id=self.request_id, question=question,
                           latency_ms=round(self.elapsed_ms(), 3), cached=cached,
                           version_notes=version_notes(served, question))
        engine = get_engine()
        searcher = engine.searcher(knowledge_base.slug, row.name, aliases_for(knowledge_base))
        with held(request, "retrieval"):
            try:
                result = self.result = searcher.run(question, options)
            except EmbeddingBusy as exc:  # the model is queued past its bound: refuse now, not after a long wait
                raise ServiceError("busy", f"The server is busy ({exc}); try again shortly.", status=503,
                                   headers={"Retry-After": str(BUSY_RETRY_AFTER)}) from None
        outcome = SearchOutcome(request_id=self.request_id, question=question, kb=knowledge_base.slug, version=row.name,
                                built_at=row.built_at.isoformat() if row.built_at else None, result=result,
                                latency_ms=round(self.elapsed_ms(), 3),
                                candidates=_candidates(result, request.candidates), profile=profile,
                                source_revision=row.source_revision, sdk=served.sdk, sdk_version=served.sdk_version,
                                version_notes=version_notes(served, question))
        if key is not None:
            retrieval_cache().put(key, outcome)
        return outcome

    def answered(self, search: SearchOutcome, answer: Answer, generate_started: float) -> AnswerOutcome:
        generate_ms = round((time.perf_counter() - generate_started) * 1000, 3)
        outcome = AnswerOutcome(request_id=self.request_id, question=search.question, kb=search.kb, version=search.version,
                                built_at=search.built_at, result=search.result, answer=answer,
                                generate_ms=generate_ms, latency_ms=round(self.elapsed_ms(), 3),
                                source_revision=search.source_revision, sdk=search.sdk,
                                sdk_version=search.sdk_version, version_notes=search.version_notes)
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


def held(request: QuestionRequest, resource: str) -> ContextManager[None]:
    return request.capacity.hold(resource) if request.capacity is not None else contextlib.nullcontext()


def _candidates(result: SearchResult, count: int | None) -> tuple[Hit, ...]:
    """The adopted hits, then the reranked and fused order after them, each chunk once, excluded ones left out."""
    if not count:
        return ()
    excluded = set(result.excluded)
    ranked: dict[str, Hit] = {}
    for hit in (*result.hits, *result.reranked, *result.fused):
        chunk_id = hit.chunk.chunk_id
        if chunk_id not in ranked and chunk_id not in excluded:
            ranked[chunk_id] = hit
            if len(ranked) == count:
                break
    return tuple(ranked.values())


def _options(request: QuestionRequest) -> dict:
    """The request options a face set (top_k, mode, rerank, rewrite), as asked: recorded so a replay asks the same."""
    options = {"top_k": request.top_k, "mode": None if request.mode == "hybrid" else request.mode,
               "rerank": request.rerank, "rewrite": request.rewrite, "candidates": request.candidates}
    return {name: value for name, value in options.items() if value is not None}


def validated_question(question) -> str:
    if not isinstance(question, str) or "\x00" in question or not VISIBLE_RE.search(question):
        raise ServiceError("invalid_question", "The question must be a non-empty string (without NUL characters).")
    if len(question) > MAX_QUESTION_CHARS:
        raise ServiceError("question_too_long", f"The question is longer than {MAX_QUESTION_CHARS} characters.")
    return question


def _validated(request: QuestionRequest, *, complete: bool = False) -> tuple[str, SearchOptions]:
    """Check a request's values, and return the question and the engine's options for it; raise a ServiceError with
    a stable code for the first bad one."""
    question, top_k, mode, exclude = validated_question(request.question), request.top_k, request.mode, request.exclude
    candidates = request.candidates
    if candidates is not None and (type(candidates) is not int or not 1 <= candidates <= MAX_CANDIDATES):
        raise ServiceError("invalid_candidates", f"candidates must be an integer from 1 to {MAX_CANDIDATES}.")
    kb = request.kb
    if kb is not None and (not isinstance(kb, str) or not kb or len(kb) > MAX_KB_CHARS or "\x00" in kb):
        raise ServiceError("invalid_kb", "kb must be the slug of a knowledge base.")
    if mode not in MODES:
        raise ServiceError("invalid_mode", f"Mode must be one of: {', '.join(MODES)}.")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K):
        raise ServiceError("invalid_top_k", f"top_k must be an integer from 1 to {MAX_TOP_K}.")
    if exclude is None:
        exclude = ()
    if (not isinstance(exclude, list | tuple) or len(exclude) > MAX_EXCLUDE
            or not all(isinstance(c, str) and 0 < len(c) <= MAX_CHUNK_ID_CHARS and "\x00" not in c
                       for c in exclude)):
        raise ServiceError("invalid_exclude", f"exclude must be a list of at most {MAX_EXCLUDE} chunk ids.")
    for name in ("rerank", "rewrite"):
        if getattr(request, name) is not None and not isinstance(getattr(request, name), bool):
            raise ServiceError(f"invalid_{name}", f"{name} must be true, false or null.")
    return question, SearchOptions(mode=mode, top_k=top_k, exclude=tuple(exclude), rerank=request.rerank,
                                   rewrite=request.rewrite, fused_depth=candidates, complete=complete)


def version_of(knowledge_base, name: str | None) -> IndexVersion:
    """The named ready version, else the active one, opened in this process; while the active one does not open
    (missing or corrupt files), the version active before it that does. Raise version_not_found, index_building,
    no_active_version, or index_unavailable (503 with Retry-After) when no version opens."""
    from rag.engine.index import IndexError_
    from rag.services.knowledge import index_fallback, index_unavailable, index_version_mark_used

    engine = get_engine()
    if name:
        row = knowledge_base.versions.filter(name=name, status=IndexVersion.Status.READY).first()
        if row is None:
            raise ServiceError("version_not_found", f"Version {name} of {knowledge_base.slug} is not available.",
                               status=404)
        try:
            engine.reader(knowledge_base.slug, row.name)
        except IndexError_:
            raise index_unavailable(knowledge_base) from None
        index_version_mark_used(row)  # pruning keeps a version a replay or an eval run is asking
        return row
    if knowledge_base.active_version is None:
        building = index_building(knowledge_base)
        if building is not None:
            raise ServiceError("index_building", building_message(knowledge_base, building), status=503,
                               headers={"Retry-After": str(BUILDING_RETRY_AFTER)})
        raise ServiceError("no_active_version",
                           f"{knowledge_base.slug} has no index yet; run `rag reindex --kb {knowledge_base.slug}`.",
                           status=409)
    row = knowledge_base.active_version
    try:
        engine.reader(knowledge_base.slug, row.name)
    except IndexError_ as exc:
        row = index_fallback(knowledge_base, exc)
    engine.note_active(knowledge_base.slug, row.name)
    return row


def _metered(request: QuestionRequest, generator) -> ContextManager[TokenReservation | None]:
    """The face's token budget around a real model call; nothing when the answer costs no tokens."""
    if request.meter is None or not generator.uses_model:
        return contextlib.nullcontext()
    return request.meter.reserve()
