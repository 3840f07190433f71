"""Constrained generation (CG_RAG's /rag and /rag/stream): the model chooses among candidates, found by the
search or given by the caller, and may only cite what it chose. One request record either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from infra.errors import ServiceError
from rag.engine.constrained import Candidate, Choice, ChoiceError, answer_pieces
from rag.engine.types import Answer, Citation, Hit, Usage
from rag.pipeline import get_engine

from .call import CANCELLED, Kind, QuestionCall, SearchOutcome, held
from .events import ChoiceEvent, ChoiceStreamEvent, GenerationEvent, RetrievalEvent, TokenEvent
from .request import MAX_CHOICES, QuestionRequest, validated_question

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
