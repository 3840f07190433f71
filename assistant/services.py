"""The web channel: answers and searches recorded per request, the daily token pool, feedback."""

from __future__ import annotations

import contextlib
import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from assistant.models import Feedback, TokenPool
from rag import live
from rag.errors import ServiceError
from rag.models import RequestRecord
from rag.services import answer_question_stream, new_request_id, request_record_write, search
from rag.shapes import citation_as_dict, search_as_dict

CHANNEL = "web"


def token_pool_today() -> TokenPool:
    """Return today's pool (the day in the configured time zone), creating it full."""
    day = timezone.localdate()
    pool, _ = TokenPool.objects.get_or_create(channel=CHANNEL, day=day,
                                              defaults={"limit": settings.RAG_WEB_TOKEN_POOL})
    return pool


@contextlib.contextmanager
def token_pool_spend():
    """Reserve an answer's expected tokens before the model is called, then settle the real usage.

    The reservation is one conditional UPDATE, so concurrent answers can never overspend by more than
    the estimates of the answers in flight; a spent pool refuses with `token_pool_exhausted` (429).
    """
    pool = token_pool_today()
    estimate = settings.RAG_WEB_TOKEN_ESTIMATE
    reserved = TokenPool.objects.filter(pk=pool.pk, spent__lte=F("limit") - estimate).update(spent=F("spent") + estimate)
    if not reserved:
        raise ServiceError("token_pool_exhausted",
                           "Today's question budget for the web assistant is used up; it refills at midnight.",
                           status=429)

    class Settlement:
        actual = estimate

        def settle(self, tokens: int) -> None:
            # A server that reports no usage still spent tokens: keep the reservation then.
            self.actual = tokens if tokens > 0 else estimate

    settlement = Settlement()
    try:
        yield settlement
    finally:
        TokenPool.objects.filter(pk=pool.pk).update(spent=F("spent") + (settlement.actual - estimate))


def web_search(*, question, kb: str | None = None, top_k: int | None = None, exclude=()) -> dict:
    kb = kb or settings.RAG_DEFAULT_KB
    request_id = new_request_id()
    started = time.perf_counter()
    try:
        with live.in_flight(CHANNEL):
            result = search(kb=kb, question=question, top_k=top_k, exclude=exclude)
    except ServiceError as exc:
        _record_failure("search", request_id, kb, question, exc, started)
        raise
    request_record_write(channel=CHANNEL, kind="search", request_id=request_id, kb=kb, question=question,
                         result=result, latency_ms=(time.perf_counter() - started) * 1000)
    return {"request_id": request_id, **search_as_dict(result, kb=kb, question=question, top_k=top_k)}


def web_chat(*, question, kb: str | None = None, exclude=()) -> dict:
    """Answer a question for the web page; `{answer, citations, confidence, degraded, mode, request_id, usage}`."""
    for event in _chat_events(question=question, kb=kb, exclude=exclude, stream=False):
        if event["type"] == "final":
            return {key: value for key, value in event.items() if key != "type"}
    raise AssertionError("the answer ended without a final event")


def web_chat_stream(*, question, kb: str | None = None, exclude=(), cancelled=lambda: False):
    """Yield the chat page's events as dicts: plan, retrieval, token…, final (the /api/chat object), error."""
    try:
        yield from _chat_events(question=question, kb=kb, exclude=exclude, cancelled=cancelled)
    except ServiceError as exc:
        yield {"type": "error", **exc.as_dict()}


def _chat_events(*, question, kb: str | None, exclude, cancelled=lambda: False, stream: bool = True):
    """Answer and record one web question as event dicts; a ServiceError is recorded, then raised."""
    with live.in_flight(CHANNEL):
        yield from _chat_events_counted(question=question, kb=kb, exclude=exclude, cancelled=cancelled,
                                        stream=stream)


def _chat_events_counted(*, question, kb: str | None, exclude, cancelled, stream: bool):
    kb = kb or settings.RAG_DEFAULT_KB
    request_id = new_request_id()
    started = time.perf_counter()
    try:
        for kind, value in answer_question_stream(kb=kb, question=question, exclude=exclude,
                                                  meter=token_pool_spend, cancelled=cancelled, stream=stream):
            if kind == "plan" and stream:  # a whole answer (/api/chat) only needs the final event
                yield {"type": "plan", "request_id": request_id, "kb": kb, "version": value.version,
                       "plan": value.plan.as_dict()}
                yield {"type": "retrieval", "request_id": request_id,
                       "results": search_as_dict(value, kb=kb, question=question, top_k=None)["results"]}
            elif kind == "token" and stream:
                yield {"type": "token", "text": value}
            elif kind == "final":
                request_record_write(channel=CHANNEL, kind="chat", request_id=request_id, kb=kb, question=question,
                                     result=value.search, answer=value.answer, generate_ms=value.generate_ms,
                                     latency_ms=(time.perf_counter() - started) * 1000)
                yield {"type": "final", **chat_as_dict(value, request_id=request_id)}
    except ServiceError as exc:
        _record_failure("chat", request_id, kb, question, exc, started)
        raise
    if cancelled():
        _record_failure("chat", request_id, kb, question, ServiceError("cancelled", "the reader went away"), started)


def chat_as_dict(outcome, *, request_id: str) -> dict:
    answer = outcome.answer
    hits = {h.chunk.chunk_id: h for h in outcome.search.hits}
    citations = []
    for citation in answer.citations:
        item = citation_as_dict(citation)
        hit = hits.get(citation.chunk_id)
        if hit is not None:
            item.update(class_name=hit.chunk.class_name, member=hit.chunk.member, content=hit.chunk.text)
        citations.append(item)
    return {
        "answer": answer.text,
        "citations": citations,
        "confidence": answer.confidence,
        "degraded": answer.degraded,
        "mode": answer.mode,
        "reason": answer.reason,
        "request_id": request_id,
        "usage": answer.usage.as_dict(),
        "kb": outcome.kb,
        "version": outcome.search.version,
        "plan": outcome.search.plan.as_dict(),
    }


def _record_failure(kind: str, request_id: str, kb: str, question, exc: ServiceError, started: float) -> None:
    if isinstance(question, str) and question.strip() and exc.code not in {"invalid_question", "question_too_long"}:
        request_record_write(channel=CHANNEL, kind=kind, request_id=request_id, kb=kb, question=question,
                             error_code=exc.code, latency_ms=(time.perf_counter() - started) * 1000)


def feedback_submit(*, request_id: str, reason: str = "") -> tuple[Feedback, bool]:
    """Record a thumbs-down once per answer; a second click returns the first record."""
    record = RequestRecord.objects.filter(request_id=request_id, channel=CHANNEL).first()
    if record is None:
        raise ServiceError("request_not_found", "No answer with this request id.", status=404)
    try:
        with transaction.atomic():
            return Feedback.objects.create(request=record, reason=reason[:2000]), True
    except IntegrityError:
        return Feedback.objects.get(request=record), False
