"""CG_RAG's vision routes (seed 004's vision/*): screenshots of an SDK's errors, UIs and code, answered by the
multimodal model in settings.RAG_VISION (rag/services/vision.py decides; these parse and shape).

Body: `images` (1..MAX_IMAGES base64 strings, plain or `data:image/...;base64,`), `query` (optional, stripped),
`include_debug` and `generation_enable_thinking` (JSON booleans), and for agentic `scope`. Checks in order:
the body (400 `invalid_request`), the scope, the images (400 `invalid_image`, details `{index, reason}`),
then the upstream (503 `vision_not_configured`). The model's failures are 502 `vision_upstream_error` or
`vision_response_invalid`; in a stream, once the headers are sent, an `error` event and then `final`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from pydantic import Field, StrictBool, StrictStr, StringConstraints

from cgrag import scopes
from cgrag.http import error_body, error_of, route, sse_response
from cgrag.inputs import Body, Scope, parse
from cgrag.limits import Spender
from cgrag.shapes import doc_of
from infra.errors import ServiceError
from infra.limits import not_counted
from rag.services import LIMITS, AnswerReset, Progress, TokenEvent
from rag.services.profiles import host_of
from rag.services.vision import (Outcome, VisionAgentic, VisionAnswer, VisionAsk,
                                 invalid_image, vision_agentic, vision_agentic_stream, vision_answer,
                                 vision_answer_stream, vision_ask, vision_configured, vision_observe)

OptionalQuery = Annotated[StrictStr, StringConstraints(strip_whitespace=True, max_length=LIMITS.question_chars)]


class VisionInput(Body):
    images: Annotated[list[StrictStr], Field(min_length=1)]
    query: OptionalQuery | None = None
    include_debug: StrictBool = False
    generation_enable_thinking: StrictBool | None = None


class AgenticInput(VisionInput):
    scope: Scope | None = None


def vision_health() -> dict:
    config = settings.RAG_VISION
    return {"configured": vision_configured(), "endpoint_configured": bool(config["BASE_URL"]),
            "endpoint_host": host_of(config["BASE_URL"]),
            "model": config["MODEL"], "enable_thinking": config["THINKING"], "streaming": True,
            "max_images": config["MAX_IMAGES"], "max_image_bytes": config["MAX_IMAGE_BYTES"],
            "max_tokens": config["MAX_TOKENS"], "agentic_max_search_rounds": config["AGENTIC_MAX_SEARCH_ROUNDS"],
            "agentic_retrieval_topk": config["AGENTIC_RETRIEVAL_TOPK"]}


def _ask(request: HttpRequest, request_id: str, route_name: str, model=VisionInput) -> tuple[VisionAsk, VisionInput]:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise invalid_image(None, "body_too_large", "The request body is larger than this server accepts.") from None
    body = parse(model, raw)
    slug = scopes.scope_slug(body.scope) if model is AgenticInput else None
    ask = vision_ask(route=route_name, request_id=request_id, images=body.images, query=body.query or "",
                     thinking=body.generation_enable_thinking, kb=slug)
    if slug is not None:
        scopes.scope_activate(body.scope)
    Spender.of_request(request).reserve()  # every checked ask calls the model
    return ask, body


def _billed(request: HttpRequest, call):
    """Run a vision call and settle what its model spent; an upstream that failed spent nothing."""
    spender = Spender.of_request(request)
    try:
        outcome = call()
    except ServiceError as exc:
        if exc.code == "vision_upstream_error":
            spender.settle(None, answered=False)
        raise
    spender.settle(outcome.usage, answered=True)
    return outcome


# -- shapes ---------------------------------------------------------------------------------------------------


def answer_of(outcome: VisionAnswer, request_id: str, *, include_debug: bool) -> dict:
    return {"ok": True, "request_id": request_id, "generation_mode": "vision_answer", "answer_text": outcome.text,
            "thinking": outcome.thinking if include_debug else "",
            "generation_enable_thinking": outcome.thinking_enabled, "usage": outcome.usage.as_dict()}


def agentic_of(outcome: VisionAgentic, request_id: str, *, include_debug: bool) -> dict:
    body = {"ok": True, "request_id": request_id, "generation_mode": "vision_agentic", "answer_text": outcome.text,
            "references": [doc_of(hit, n) for n, hit in enumerate(outcome.references, start=1)],
            "rounds": [{"query": r.query, "num_docs": r.num_docs} for r in outcome.rounds],
            "usage": outcome.usage.as_dict()}
    if include_debug:
        body["dropped_citations"] = list(outcome.dropped_citations)
    return body


def failed_of(mode: str, request_id: str, error: dict) -> dict:
    """A stream's final body after an error: the route's fields, empty, and the error."""
    body = {"ok": False, "request_id": request_id, "generation_mode": mode, "answer_text": "", "error": error,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    if mode == "vision_agentic":
        body.update(references=[], rounds=[])
    return body


def _raising(error: Exception) -> Iterator:
    """Events that are the error at once."""
    raise error
    yield  # noqa: RET503 - a generator


def _stream(request_id: str, events, mode: str, shape, spender: Spender) -> Iterator[tuple[str, dict]]:
    tag = {"request_id": request_id}
    try:
        for event in events:
            if isinstance(event, Progress):
                yield "progress", {"stage": event.stage, "label": event.label, "status": event.status, **tag}
            elif isinstance(event, TokenEvent):
                yield "token", {"channel": "answer", "text": event.text, **tag}
            elif isinstance(event, AnswerReset):
                yield "answer_reset", {"reason": event.reason, **tag}
            elif isinstance(event, Outcome):
                spender.settle(event.outcome.usage, answered=True)
                yield "final", shape(event.outcome)
    except Exception as exc:  # noqa: BLE001 - after the headers, every failure is an error then a final frame
        if isinstance(exc, ServiceError) and exc.code == "vision_upstream_error":
            spender.settle(None, answered=False)
        spender.give_back(exc)
        error = error_body(request_id, error_of(exc))["error"]
        yield "error", {**error, **tag}
        yield "final", failed_of(mode, request_id, error)
    finally:
        events.close()


# -- the routes -----------------------------------------------------------------------------------------------


@route("POST", limit="generate")
def answer(request: HttpRequest, request_id: str) -> dict:
    ask, body = _ask(request, request_id, "vision/answer")
    return answer_of(_billed(request, lambda: vision_answer(ask)), request_id, include_debug=body.include_debug)


@route("POST", limit="generate")
def answer_stream(request: HttpRequest, request_id: str):
    ask, body = _ask(request, request_id, "vision/answer/stream")
    spender = Spender.of_request(request)

    def produce(cancelled):
        return _stream(request_id, vision_answer_stream(ask, cancelled), "vision_answer",
                       lambda outcome: answer_of(outcome, request_id, include_debug=body.include_debug), spender)

    return sse_response(request_id, produce, lambda error: failed_of("vision_answer", request_id, error))


@route("POST", limit="generate")
def observe(request: HttpRequest, request_id: str) -> dict:
    ask, body = _ask(request, request_id, "vision/observe")
    outcome = _billed(request, lambda: vision_observe(ask))
    result = {"ok": True, "request_id": request_id, "labels": list(outcome.labels), "description": outcome.description,
              "parse_status": outcome.parse_status, "dropped_labels": list(outcome.dropped_labels),
              "usage": outcome.usage.as_dict()}
    if body.include_debug:
        result["raw"] = outcome.raw
    return result


@route("POST", limit="generate")
def agentic(request: HttpRequest, request_id: str) -> dict:
    ask, body = _ask(request, request_id, "vision/agentic", AgenticInput)
    return agentic_of(_billed(request, lambda: vision_agentic(ask)), request_id, include_debug=body.include_debug)


@route("POST", limit="generate")
def agentic_stream(request: HttpRequest, request_id: str):
    spender = Spender.of_request(request)
    try:
        ask, body = _ask(request, request_id, "vision/agentic/stream", AgenticInput)
    except ServiceError as exc:
        if not not_counted(exc):
            raise
        # The scope is still being indexed (found before any model call): the stream ends as one that found it so.
        refused = _raising(exc)
        return sse_response(request_id, lambda cancelled: _stream(request_id, refused, "vision_agentic", None, spender),
                            lambda error: failed_of("vision_agentic", request_id, error))

    def produce(cancelled):
        return _stream(request_id, vision_agentic_stream(ask, cancelled), "vision_agentic",
                       lambda outcome: agentic_of(outcome, request_id, include_debug=body.include_debug), spender)

    return sse_response(request_id, produce, lambda error: failed_of("vision_agentic", request_id, error))
