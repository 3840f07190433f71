"""Ask (E12): every face asks through `question_search` or `question_answer`.

A face (web, MCP, CLI, eval, replay, and the retrieval APIs after them) parses its own request shape into
a `QuestionRequest`, calls one of these, and shapes the outcome its own way. The call (`QuestionCall`)
validates, searches and records; this module answers from the evidence, with the configured model or without
one. A face keeps only its own limits: the web's token pool reaches the service as a `TokenMeter`, a key's
quota stays with the face's key call (which records what it refuses through `question_refused`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import ContextManager, Literal, overload

from rag.engine.generate import answer_without_model
from rag.engine.sdk import VersionNote, is_chinese
from rag.engine.types import Answer, SearchResult, Token
from rag.pipeline import get_engine

from .call import CANCELLED, Kind, QuestionCall, SearchOutcome
from .events import AnswerEvent, FinalEvent, RetrievalEvent, TokenEvent
from .request import QuestionRequest, TokenReservation


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
        return _answered(call, search, _noted(answer, notes_text(search)), started)


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
                            yield event  # the engine's Token is the face's TokenEvent
                        else:
                            answer = event
                finally:
                    events.close()  # a reader that left: hang up on the model now
                if reservation is not None:
                    reservation.settle(answer.usage.total_tokens, model_called=answer.model_called)
        else:
            yield TokenEvent(answer.text)
        yield FinalEvent(_answered(call, search, _noted(answer, notes), started))


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


def _answered(call: QuestionCall, search: SearchOutcome, answer: Answer, generate_started: float) -> AnswerOutcome:
    """Record the answer on the call, and return its outcome."""
    generate_ms = round((time.perf_counter() - generate_started) * 1000, 3)
    outcome = AnswerOutcome(request_id=call.request_id, question=search.question, kb=search.kb, version=search.version,
                            built_at=search.built_at, result=search.result, answer=answer,
                            generate_ms=generate_ms, latency_ms=round(call.elapsed_ms(), 3),
                            source_revision=search.source_revision, sdk=search.sdk,
                            sdk_version=search.sdk_version, version_notes=search.version_notes)
    call.record(result=search.result, answer=answer, generate_ms=generate_ms)
    return outcome


def _metered(request: QuestionRequest, generator) -> ContextManager[TokenReservation | None]:
    """The face's token budget around a real model call; nothing when the answer costs no tokens."""
    if request.meter is None or not generator.uses_model:
        return contextlib.nullcontext()
    return request.meter.reserve()
