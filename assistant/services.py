"""The web channel: a face over the one question path, with its own daily token pool; feedback."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from assistant.models import Feedback, TokenPool
from infra.errors import ServiceError
from infra.limits import Client, countable, rate_limit, rate_limited, socket_closed, socket_open, token_share_reserve
from rag.models import Channel, RequestRecord
from rag.services import (
    AnswerOutcome,
    FinalEvent,
    QuestionRequest,
    RetrievalEvent,
    TokenEvent,
    question_answer,
    question_search,
)
from rag.shapes import cited_chunks, sdk_version_as_dict, search_as_dict


def token_pool_today() -> TokenPool:
    """Return today's pool (the day in the configured time zone), creating it full."""
    day = timezone.localdate()
    pool, _ = TokenPool.objects.get_or_create(channel=Channel.WEB, day=day,
                                              defaults={"limit": settings.RAG_WEB_TOKEN_POOL})
    return pool


class _Settlement:
    """What one answer really cost: the usage the model reported; the estimate when a model that wrote the
    answer reported none; nothing when no model wrote it (an open breaker, a call that failed), so an outage
    gives every reservation back instead of draining the pool. Unsettled (the reader left, an exception),
    the estimate stays spent."""

    def __init__(self, estimate: int):
        self.estimate = estimate
        self.actual = estimate

    def settle(self, tokens: int, *, model_called: bool = True) -> None:
        if not model_called:
            self.actual = max(tokens, 0)
        else:
            self.actual = tokens if tokens > 0 else self.estimate


class WebTokenPool:
    """The web channel's daily token pool as the question service's `TokenMeter`; with a `client`, also that
    client's share of it (RAG_WEB_LIMITS' TOKEN_SHARE), reserved first and settled the same way."""

    def __init__(self, client: Client | None = None):
        self.client = client

    @contextlib.contextmanager
    def reserve(self):
        """Reserve an answer's expected tokens before the model is called, then settle the real usage.

        The reservation is one conditional UPDATE, so concurrent answers can never overspend by more than
        the estimates of the answers in flight; a spent pool refuses with `token_pool_exhausted` (429), a
        client's spent share with `client_token_share_exhausted` (429, Retry-After to local midnight).
        """
        pool = token_pool_today()
        estimate = settings.RAG_WEB_TOKEN_ESTIMATE
        share = (token_share_reserve(self.client, estimate, pool_limit=pool.limit, day=pool.day)
                 if self.client is not None else None)
        reserved = TokenPool.objects.filter(pk=pool.pk, spent__lte=F("limit") - estimate).update(
            spent=F("spent") + estimate)
        if not reserved:
            if share is not None:
                share.settle(0)
            raise ServiceError("token_pool_exhausted",
                               "Today's question budget for the web assistant is used up; it refills at midnight.",
                               status=429)
        settlement = _Settlement(estimate)
        try:
            yield settlement
        finally:
            TokenPool.objects.filter(pk=pool.pk).update(spent=F("spent") + (settlement.actual - estimate))
            if share is not None:
                share.settle(settlement.actual)


def _request(*, question, kb, sdk_version=None, top_k=None, exclude=(), client: Client | None = None) -> QuestionRequest:
    return QuestionRequest(question=question, kb=kb, sdk_version=sdk_version, top_k=top_k, exclude=exclude,
                           channel=Channel.WEB, meter=WebTokenPool(client))


def web_search(*, question, kb: str | None = None, sdk_version: str | None = None, top_k: int | None = None,
               exclude=(), client: Client | None = None) -> dict:
    """Search the docs for the web page or /api/search (within `client`'s rate limit when given)."""
    with _limited("search", client):  # a reply of `index_building` gives the count back
        outcome = question_search(_request(question=question, kb=kb, sdk_version=sdk_version, top_k=top_k,
                                           exclude=exclude))
    return {"request_id": outcome.request_id, **search_as_dict(outcome, top_k=top_k)}


ANSWER_DEADLINE = ServiceError("answer_deadline", "The answer took too long and was stopped.", status=504)


def web_chat(*, question, kb: str | None = None, sdk_version: str | None = None, exclude=(),
             client: Client | None = None, client_left: Callable[[], bool] = lambda: False) -> dict:
    """Answer a question for /api/chat: `{answer, citations, confidence, degraded, mode, request_id, usage, …}`.

    The answer has RAG_CHAT_DEADLINE_SECONDS in all. It is read from the model's stream, so that when the deadline
    passes or `client_left()` turns true the model is hung up on at its next token (recorded as cancelled) instead
    of writing on for nobody; past the deadline the reply is 504 `answer_deadline`."""
    ends_at = time.monotonic() + settings.RAG_CHAT_DEADLINE_SECONDS

    def cancelled() -> bool:
        return client_left() or time.monotonic() >= ends_at

    with _limited("chat", client):
        for event in _answer(_request(question=question, kb=kb, sdk_version=sdk_version, exclude=exclude,
                                      client=client), stream=True, cancelled=cancelled):
            if isinstance(event, FinalEvent):
                return chat_as_dict(event.outcome)
    raise ANSWER_DEADLINE  # the answer stopped unfinished: past its deadline, or its client left


def web_chat_stream(*, question, kb: str | None = None, sdk_version: str | None = None, exclude=(),
                    client: Client | None = None, cancelled=lambda: False):
    """Yield the chat page's events as dicts: plan, retrieval, token…, final (the /api/chat object), error.
    With a `client`, the question counts against its WebSocket message limit first."""
    try:
        with _limited("ws_message", client):
            yield from _chat_frames(_answer(_request(question=question, kb=kb, sdk_version=sdk_version,
                                                     exclude=exclude, client=client), stream=True, cancelled=cancelled))
    except ServiceError as exc:
        yield error_frame(exc)


def _chat_frames(events):
    """The chat page's frames of the question service's answer events."""
    for event in events:
        if isinstance(event, RetrievalEvent):
            search = event.search
            yield {"type": "plan", "request_id": search.request_id, "kb": search.kb, "version": search.version,
                   **sdk_version_as_dict(search), "built_at": search.built_at, "source_revision": search.source_revision,
                   "plan": search.result.plan.as_dict()}
            yield {"type": "retrieval", "request_id": search.request_id,
                   "results": search_as_dict(search, top_k=None)["results"]}
        elif isinstance(event, TokenEvent):
            yield {"type": "token", "text": event.text}
        elif isinstance(event, FinalEvent):
            yield {"type": "final", **chat_as_dict(event.outcome)}


def _limited(scope: str, client: Client | None):
    """Count the block against `client`'s limit in `scope` (none without a client); a reply that is not the
    client's doing (503 `index_building`) gives the count back (infra.limits.rate_limited)."""
    return rate_limited(scope, client) if client is not None else contextlib.nullcontext()


LIMITS_UNAVAILABLE = "limits_unavailable"


def _answer(request: QuestionRequest, *, stream: bool = False, cancelled=lambda: False):
    """`question_answer`; but while per-client limits cannot be counted (the cache is down), anonymous
    generation fails closed: the answer is extractive, degraded with `limits_unavailable`, and no model is asked."""
    if not countable():
        request = replace(request, no_model=LIMITS_UNAVAILABLE)
    return question_answer(request, stream=stream, cancelled=cancelled)


def web_socket_opened(client: Client) -> bool:
    """Admit a chat socket of `client` within its connects a minute and open sockets (429 `rate_limited`,
    `too_many_sockets`); True when it was counted, and `web_socket_closed` must give it back."""
    rate_limit("ws_connect", client)
    return socket_open(client)


def web_socket_closed(client: Client) -> None:
    """A chat socket that `web_socket_opened` counted has closed."""
    socket_closed(client)


def error_frame(exc: ServiceError) -> dict:
    """Return the `error` event of a refusal: its code and message, and `retry_after` in seconds wherever HTTP
    would send a Retry-After header (503 `index_building`), so the page waits as an HTTP client would."""
    frame = {"type": "error", **exc.as_dict()}
    retry_after = str(exc.headers.get("Retry-After", ""))
    if retry_after.isdigit():
        frame["retry_after"] = int(retry_after)
    return frame


def chat_as_dict(outcome: AnswerOutcome) -> dict:
    answer = outcome.answer
    citations = [{**{k: v for k, v in c.items() if k != "text"}, "content": c["text"]}
                 for c in cited_chunks(outcome)]
    return {
        "answer": answer.text,
        "citations": citations,
        "confidence": answer.confidence,
        "degraded": answer.degraded,
        "mode": answer.mode,
        "reason": answer.reason,
        "request_id": outcome.request_id,
        "usage": answer.usage.as_dict(),
        "kb": outcome.kb,
        "version": outcome.version,
        **sdk_version_as_dict(outcome),
        "built_at": outcome.built_at,  # the docs as of: when the version was built, and from which revision
        "source_revision": outcome.source_revision,
        "plan": outcome.result.plan.as_dict(),
    }


def feedback_submit(*, request_id: str, reason: str = "") -> tuple[Feedback, bool]:
    """Record a thumbs-down once per answer; a second click returns the first record."""
    record = RequestRecord.objects.filter(request_id=request_id, channel=Channel.WEB).first()
    if record is None:
        raise ServiceError("request_not_found", "No answer with this request id.", status=404)
    try:
        with transaction.atomic():
            return Feedback.objects.create(request=record, reason=reason[:2000]), True
    except IntegrityError:
        return Feedback.objects.get(request=record), False
