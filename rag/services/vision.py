"""CG_RAG's vision service (seed 004's vision/*): screenshots asked of the multimodal model in settings.RAG_VISION.

`vision_ask(...)` checks the images (count, size, type: 400 `invalid_image`) and the configuration (503
`vision_not_configured`) and returns a `VisionAsk`; a refused ask is recorded. Then one of:

- `vision_answer(ask)` / `vision_answer_stream(ask, cancelled)`: free generation, no retrieval, no citations;
- `vision_observe(ask)`: labels from the label set (RAG_VISION["LABELS"], else the engine's DEFAULT_LABELS)
  and a description, with `parse_status` "ok" or "partial";
- `vision_agentic(ask)` / `vision_agentic_stream(ask, cancelled)`: up to AGENTIC_MAX_SEARCH_ROUNDS searches of
  the knowledge base through the question service, then an answer citing the references as `[cite^n]`.

Each ask is one request record (channel cgrag) through `question_call`; the searches of an agentic ask are
part of it and not recorded apart. The model's failures become 502 `vision_upstream_error` (HTTP error,
timeout, connection) or `vision_response_invalid` (a reply that cannot be used). Streams yield
`Progress`, `TokenEvent`, `AnswerReset` (the upstream stream broke after text was shown and is asked again once;
all three the question service's stream events) and last the outcome; they stop, closing the upstream stream,
when `cancelled()` turns true.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.conf import settings

from infra.capacity import CapacityGate
from infra.errors import ServiceError
from rag.engine.constrained import provider_of, thinking_fields
from rag.engine.llm import GenerationError
from rag.engine.types import Answer, Citation, Hit, Reset, Token, Usage
from rag.engine.vision import (CIRCUIT_OPEN, DEFAULT_LABELS, FINAL_PROMPT, AnswerField, Done, Image, ImageError,
                               VisionModel, agentic_messages, answer_messages, cited, decode_image,
                               observe_messages, parse_observation, parse_step, references_message, split_thinking,
                               usage_sum)
from rag.models import Channel
from rag.pipeline import vision_model
from rag.services.knowledge import kb_get
from rag.services.questions import (AnswerReset, Caller, Progress, QuestionRequest, TokenEvent, candidate_of,
                                    question_call, question_refused, question_search, version_of)

JSON_FORMAT = {"response_format": {"type": "json_object"}}


def _config() -> dict:
    return settings.RAG_VISION


def vision_configured() -> bool:
    config = _config()
    return bool(config["BASE_URL"] and config["MODEL"])


def vision_labels() -> tuple[str, ...]:
    return tuple(_config()["LABELS"] or DEFAULT_LABELS)


def invalid_image(index: int | None, reason: str, message: str) -> ServiceError:
    error = ServiceError("invalid_image", message, status=400)
    error.details = {"index": index, "reason": reason}
    return error


def not_configured() -> ServiceError:
    return ServiceError("vision_not_configured", "视觉接口未配置多模态上游（CG_RAG_VISION_* 或 RAG_VISION_*）。",
                        status=503)


def upstream_error(exc: GenerationError) -> ServiceError:
    if exc.kind == "malformed":
        return response_invalid(str(exc))
    if exc.kind == CIRCUIT_OPEN:  # the model failed repeatedly: not called until its breaker cools down
        error = ServiceError("vision_upstream_error", "视觉模型连续失败，暂停调用，请稍后重试。", status=503,
                             headers={"Retry-After": str(settings.RAG_ENGINE["BREAKER_COOLDOWN"])})
        error.details = {"kind": exc.kind}
        return error
    error = ServiceError("vision_upstream_error", "视觉模型上游调用失败（超时、连接或 HTTP 错误），请稍后重试。",
                         status=502)
    error.details = {"kind": exc.kind}
    return error


def response_invalid(reason: str) -> ServiceError:
    error = ServiceError("vision_response_invalid", "视觉模型返回的结果无法使用。", status=502)
    error.details = {"reason": reason[:200]}
    return error


@dataclass(frozen=True, slots=True)
class VisionAsk:
    route: str  # "vision/answer", …: recorded with the request
    request_id: str  # the caller's X-Request-ID (or the one made for it)
    images: tuple[Image, ...]
    query: str = ""
    thinking: bool | None = None  # None: RAG_VISION["THINKING"]
    kb: str | None = None  # the knowledge base agentic searches

    @property
    def thinking_enabled(self) -> bool:
        return self.thinking if self.thinking is not None else bool(_config()["THINKING"])

    def question(self, kb: str | None = None) -> QuestionRequest:
        return _question_request(self.route, self.request_id, self.query, len(self.images), kb or self.kb)


def _question_request(route: str, request_id: str, query: str, num_images: int, kb: str | None) -> QuestionRequest:
    return QuestionRequest(question=query or "(image)", channel=Channel.CGRAG, kb=kb,
                           caller=Caller(transport="http", arguments={"route": route, "num_images": num_images,
                                                                     "x_request_id": request_id}))


def vision_ask(*, route: str, request_id: str, images: list[str], query: str = "", thinking: bool | None = None,
               kb: str | None = None) -> VisionAsk:
    """The checked ask: every image decoded and known, the upstream configured, and for an agentic ask (`kb`) an
    index to search (503 `index_building` before any model call); a refusal is recorded."""
    config = _config()
    try:
        if len(images) > config["MAX_IMAGES"]:
            raise invalid_image(config["MAX_IMAGES"], "too_many_images",
                                f"At most {config['MAX_IMAGES']} images may be sent at once.")
        decoded = []
        for index, text in enumerate(images):
            try:
                decoded.append(decode_image(text, max_bytes=config["MAX_IMAGE_BYTES"]))
            except ImageError as exc:
                raise invalid_image(index, exc.reason, f"Image {index}: {exc}") from None
        if not vision_configured():
            raise not_configured()
        if kb is not None:  # the agent searches this knowledge base: none yet (index_building) calls no model
            version_of(kb_get(kb), None)
    except ServiceError as exc:
        question_refused(_question_request(route, request_id, query, len(images), kb), kind="chat", error=exc)
        raise
    return VisionAsk(route=route, request_id=request_id, images=tuple(decoded), query=query, thinking=thinking, kb=kb)


# -- outcomes and stream events -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VisionAnswer:
    text: str
    thinking: str
    thinking_enabled: bool
    usage: Usage


@dataclass(frozen=True, slots=True)
class VisionObservation:
    labels: tuple[str, ...]
    description: str
    parse_status: str  # "ok" or "partial"
    dropped_labels: tuple
    raw: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class SearchRound:
    query: str
    num_docs: int  # candidates the search returned (new and already known)


@dataclass(frozen=True, slots=True)
class VisionAgentic:
    text: str  # with only the [cite^n] markers that name a reference
    references: tuple[Hit, ...]  # [cite^n] is references[n - 1]
    rounds: tuple[SearchRound, ...]
    dropped_citations: tuple[int, ...]
    usage: Usage


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: VisionAnswer | VisionAgentic


VisionEvent = Progress | TokenEvent | AnswerReset | Outcome


# -- the routes ---------------------------------------------------------------------------------------------


def _extra(ask: VisionAsk, json_reply: bool = False) -> dict:
    config = _config()
    return {**thinking_fields(provider_of(config["BASE_URL"], config["MODEL"]), ask.thinking_enabled),
            **(JSON_FORMAT if json_reply else {})}


@contextlib.contextmanager
def _upstream():
    """Hold a generation slot around the model's call; its failures as the vision error codes."""
    with CapacityGate().hold("generation"):
        try:
            yield
        except GenerationError as exc:
            raise upstream_error(exc) from exc


def _record(call, answer: Answer, started: float, result=None) -> None:
    call.record(result=result, answer=answer, generate_ms=round((time.perf_counter() - started) * 1000, 3))


def _answer_record(outcome: VisionAnswer) -> Answer:
    return Answer(text=outcome.text, citations=(), confidence="none", mode="vision_answer", usage=outcome.usage,
                  model_called=True)


def vision_answer(ask: VisionAsk) -> VisionAnswer:
    with question_call(ask.question()) as call:
        started = time.perf_counter()
        with _upstream():
            completion = vision_model().complete(answer_messages(ask.query, ask.images), extra=_extra(ask))
        text, thoughts = split_thinking(completion.text)
        if not text:
            raise response_invalid("the model answered no text")
        outcome = VisionAnswer(text=text, thinking=completion.reasoning or thoughts,
                               thinking_enabled=ask.thinking_enabled, usage=completion.usage)
        _record(call, _answer_record(outcome), started)
        return outcome


def vision_answer_stream(ask: VisionAsk, cancelled: Callable[[], bool] = lambda: False) -> Iterator[VisionEvent]:
    with question_call(ask.question()) as call:
        started = time.perf_counter()
        yield Progress("generation", "正在生成", "running")
        shown = False
        done = None
        with _upstream():
            for item in vision_model().stream(answer_messages(ask.query, ask.images), extra=_extra(ask), cancelled=cancelled):
                if isinstance(item, Token):
                    shown = True
                    yield item  # the engine's Token is the face's TokenEvent
                elif isinstance(item, Reset):
                    if shown:
                        shown = False
                        yield item
                else:
                    done = item
        if done is None:  # the reader went away: the call records it as cancelled
            return
        text, thoughts = split_thinking(done.text)
        if not text:
            raise response_invalid("the model answered no text")
        outcome = VisionAnswer(text=text, thinking=done.reasoning or thoughts, thinking_enabled=ask.thinking_enabled,
                               usage=done.usage)
        _record(call, _answer_record(outcome), started)
        yield Progress("generation", "生成完成", "done")
        yield Outcome(outcome)


def vision_observe(ask: VisionAsk) -> VisionObservation:
    labels = vision_labels()
    with question_call(ask.question()) as call:
        started = time.perf_counter()
        with _upstream():
            completion = vision_model().complete(observe_messages(ask.query, ask.images, labels), extra=_extra(ask, True))
        try:
            observation = parse_observation(completion.text, labels)
        except ValueError as exc:
            raise response_invalid(str(exc)) from None
        outcome = VisionObservation(labels=observation.labels, description=observation.description,
                                    parse_status=observation.status, dropped_labels=observation.dropped,
                                    raw=completion.text, usage=completion.usage)
        partial = observation.status != "ok"
        _record(call, Answer(text=f"[{', '.join(outcome.labels)}] {outcome.description}".strip(), citations=(),
                             confidence="none", mode="vision_observe", degraded=partial,
                             reason="labels_dropped" if partial else "", usage=outcome.usage, model_called=True),
                started)
        return outcome


def vision_agentic(ask: VisionAsk) -> VisionAgentic:
    outcome = None
    for event in _agentic(ask, stream=False, cancelled=lambda: False):
        if isinstance(event, Outcome):
            outcome = event.outcome
    return outcome


def vision_agentic_stream(ask: VisionAsk, cancelled: Callable[[], bool] = lambda: False) -> Iterator[VisionEvent]:
    return _agentic(ask, stream=True, cancelled=cancelled)


@dataclass
class _Reply:
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    shown: bool = False  # answer text was streamed to the reader
    cancelled: bool = False


def _step(model: VisionModel, messages: list[dict], extra: dict, *, stream: bool, cancelled) -> Iterator:
    """One agentic model call; yields TokenEvent/AnswerReset events when streaming; returns a _Reply."""
    reply = _Reply()
    if not stream:
        with _upstream():
            completion = model.complete(messages, extra=extra)
        reply.text, reply.usage = completion.text, completion.usage
        return reply
    answer = AnswerField()
    with _upstream():
        for item in model.stream(messages, extra=extra, cancelled=cancelled):
            if isinstance(item, Token):
                piece = answer.feed(item.text)
                if piece:
                    reply.shown = True
                    yield TokenEvent(piece)
            elif isinstance(item, Reset):
                answer = AnswerField()
                if reply.shown:
                    reply.shown = False
                    yield item  # the engine's Reset is the face's AnswerReset
            elif isinstance(item, Done):
                reply.text, reply.usage = item.text, item.usage
                return reply
    reply.cancelled = True
    return reply


def _agentic(ask: VisionAsk, *, stream: bool, cancelled: Callable[[], bool]) -> Iterator[VisionEvent]:
    config = _config()
    max_rounds, topk = int(config["AGENTIC_MAX_SEARCH_ROUNDS"]), int(config["AGENTIC_RETRIEVAL_TOPK"])
    model, extra = vision_model(), _extra(ask, True)
    with question_call(ask.question()) as call:
        started = time.perf_counter()
        messages = agentic_messages(ask.query, ask.images)
        references: list[Hit] = []
        known: set[str] = set()
        rounds: list[SearchRound] = []
        usages: list[Usage] = []
        last_result = None
        for number in range(max_rounds + 1):
            final = number == max_rounds
            if final:
                messages.append({"role": "user", "content": FINAL_PROMPT})
            yield Progress("generation", "正在生成" if final else "正在分析", "running")
            reply = yield from _step(model, messages, extra, stream=stream, cancelled=cancelled)
            if reply.cancelled:
                return
            usages.append(reply.usage)
            try:
                step = parse_step(reply.text, final=final)
            except ValueError as exc:
                raise response_invalid(str(exc)) from None
            if step.answer:
                if stream and not reply.shown:
                    yield TokenEvent(step.answer)
                break
            messages.append({"role": "assistant", "content": reply.text})
            yield Progress("retrieval", f"正在检索：{step.search[:80]}", "running")
            outcome = question_search(QuestionRequest(
                question=step.search, channel=Channel.CGRAG, kb=ask.kb, candidates=topk, cache=True,
                capacity=CapacityGate(), record=False,
                caller=Caller(transport="http", arguments={"route": ask.route, "round": number + 1,
                                                          "x_request_id": ask.request_id})))
            last_result = outcome.result
            new = [hit for hit in outcome.candidates if hit.chunk.chunk_id not in known]
            known.update(hit.chunk.chunk_id for hit in new)
            first = len(references) + 1
            references += new
            listed = [(first + i, _name_of(hit), hit.chunk.text) for i, hit in enumerate(new)]
            messages.append(references_message(step.search, listed))
            rounds.append(SearchRound(query=step.search, num_docs=len(outcome.candidates)))
            yield Progress("retrieval", "检索完成", "done")
            if cancelled():
                return
        text, used, dropped = cited(step.answer, len(references))
        result = VisionAgentic(text=text, references=tuple(references), rounds=tuple(rounds),
                               dropped_citations=dropped, usage=usage_sum(*usages))
        citations = tuple(Citation(number=n, chunk_id=references[n - 1].chunk.chunk_id,
                                   source=references[n - 1].chunk.source or references[n - 1].chunk.title,
                                   heading_path=tuple(references[n - 1].chunk.heading_path),
                                   anchor=references[n - 1].chunk.anchor) for n in used)
        _record(call, Answer(text=text, citations=citations, confidence="none", mode="vision_agentic",
                             usage=result.usage, invalid_citations=dropped, model_called=True),
                started, result=last_result)
        yield Progress("generation", "生成完成", "done")
        yield Outcome(result)


def _name_of(hit: Hit) -> str:
    candidate = candidate_of(hit)
    return f"{candidate.title} {candidate.article}".strip()
