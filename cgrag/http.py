"""The CG_RAG face's HTTP plumbing: request ids (C6), the error envelope (C3) and server-sent events.

Every route is wrapped by `route`: it takes the caller's `X-Request-ID` when it is valid (1 to 128 printable
ASCII characters, no space), else makes a `req_…` one, and sends it back on every response. Failures become
the seed's envelope `{request_id, error: {code, message, details}}`: 400 `invalid_request` with pydantic's
error items, the question service's ServiceError with its status (429 `capacity.exceeded` adds `category`
and `retryable`), and anything unexpected 500 `service_error` with nothing of the exception in the body.
A POST must declare a JSON body (415 `unsupported_media_type`), brings a key when RAG_CGRAG_REQUIRE_KEY is on,
and counts against the client's limits (cgrag/limits.py) before the view runs; a reply of 503 `index_building`
gives those counts back.

`sse_response(events)` streams a blocking iterator of (event, data) pairs: it runs in a thread of its own and
hands each event to the loop, so Django streams it as written (Django reads a synchronous iterator whole
under ASGI), and a client that disconnects sets the cancel flag the iterator polls and hangs up on the model. A
stream waits for its thread as a request waits for capacity, and says so in SSE frames when none comes (seed 004).
Every stream ends with `final`, after an `error` when it did not end well: no thread came, the answer ran past its
deadline, or the server is stopping (SIGTERM: `server_stopping`, and the model is hung up on; rag.streams).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import aclosing

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from cgrag.inputs import InvalidRequest
from cgrag.limits import KEY_TOOL, Spender
from infra.capacity import CapacityExceeded
from infra.clients import request_address
from infra.errors import ServiceError
from infra.limits import Client
from rag.services.records import new_request_id
from rag.streams import (BUSY_RETRY_AFTER, DEADLINE_PASSED, SERVER_STOPPING, AnswerStreams, Slot, answer_streams,
                         relay)

log = logging.getLogger(__name__)

REQUEST_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")
HEADER = "X-Request-ID"
INVALID_MESSAGE = "请求参数无效，请检查字段类型、范围和必填项。"
SERVICE_MESSAGE = "检索服务调用失败，请稍后重试或检查服务日志。"
JSON_DUMPS = functools.partial(json.dumps, ensure_ascii=False)


def request_id_of(request: HttpRequest) -> str:
    """The caller's X-Request-ID when valid, else a new `req_…` id."""
    given = request.headers.get(HEADER, "")
    return given if REQUEST_ID_RE.fullmatch(given) else new_request_id()


class ServerStopping(ServiceError):
    """503 `server_stopping`: this server is stopping (SIGTERM); ask again in `details.retry_after` seconds, when
    another process or the restarted one answers."""

    status = 503

    def __init__(self) -> None:
        super().__init__("server_stopping", "服务正在重启，请稍后重试。", headers={"Retry-After": str(BUSY_RETRY_AFTER)})
        self.details = {"retry_after": BUSY_RETRY_AFTER}
        self.category = "availability"
        self.retryable = True


ANSWER_DEADLINE = ServiceError("answer_deadline", "The answer took too long and was stopped.", status=504)


def error_body(request_id: str, error: ServiceError | InvalidRequest) -> dict:
    if isinstance(error, InvalidRequest):
        return {"request_id": request_id, "error": {"code": "invalid_request", "message": INVALID_MESSAGE,
                                                     "details": {"errors": error.errors}}}
    body = {"code": error.code}
    if getattr(error, "category", None):
        body["category"], body["retryable"] = error.category, error.retryable
    body["message"] = error.message
    body["details"] = dict(getattr(error, "details", None) or {})
    return {"request_id": request_id, "error": body}


def error_of(exc: BaseException) -> ServiceError:
    """A failure as the ServiceError a body or an SSE frame shows: unexpected ones as `service_error`."""
    if isinstance(exc, ServiceError):
        return exc
    return ServiceError("service_error", SERVICE_MESSAGE, status=500)


def json_response(request_id: str, body: dict, status: int = 200, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})
    for name, value in (headers or {}).items():
        response[name] = value
    response[HEADER] = request_id
    return response


def json_declared(request: HttpRequest) -> bool:
    """Whether a POST's body is declared JSON: `application/json` (any parameters), or no body and no type.
    A page on another site can post `text/plain`, a form or multipart without asking (a CORS simple request),
    never `application/json`; so refusing the rest keeps other sites' pages from spending this service."""
    declared = (request.META.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
    if declared == "application/json":
        return True
    return not declared and not request.body


def admit(request: HttpRequest, limit: str | None) -> Spender:
    """The caller of a POST route: its key when RAG_CGRAG_REQUIRE_KEY is on (401 without one, the key's rate and
    quota), then one request counted against the client's `limit` ("search" or "generate") when given."""
    spender = Spender(Client.of_request(request))
    if settings.RAG_CGRAG_REQUIRE_KEY:
        from apikeys.api import bearer_of, key_refusal
        from apikeys.services import api_key_admit_call, api_key_authenticate

        raw = bearer_of(request.headers.get("Authorization", ""))  # 401 `missing_api_key` with its challenge
        try:
            spender.key = api_key_authenticate(raw=raw, address=request_address(request))
        except ServiceError as exc:
            raise key_refusal(exc) from None
        spender.key_call = api_key_admit_call(key=spender.key, tool=KEY_TOOL)
        spender.headers = spender.key_call.headers
    request.cgrag_spender = spender
    if limit is not None:
        spender.count(f"cgrag_{limit}")
    return spender


def route(*methods: str, limit: str | None = None):
    """A CG_RAG route: method check, request id, and the error envelope for whatever the view raises.
    A POST also needs a JSON body (415 `unsupported_media_type`), a key when one is required, and counts against
    the client's `limit` ("search" or "generate"; None: the view counts, as /retrieve does for each query).
    The view is called as view(request, request_id) and returns a dict (a 200 JSON body) or a response."""

    def decorate(view: Callable):
        @csrf_exempt
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            request_id = request_id_of(request)
            if request.method not in methods:
                error = ServiceError("method_not_allowed", f"Use {' or '.join(methods)} here.", status=405)
                return json_response(request_id, error_body(request_id, error), 405, {"Allow": ", ".join(methods)})
            try:
                if request.method == "POST":
                    if not json_declared(request):
                        error = ServiceError("unsupported_media_type",
                                             "Send the body as JSON, with Content-Type: application/json.", status=415)
                        return json_response(request_id, error_body(request_id, error), 415)
                    admit(request, limit)
                result = view(request, request_id, *args, **kwargs)
            except InvalidRequest as exc:
                return json_response(request_id, error_body(request_id, exc), 400)
            except ServiceError as exc:
                spender = getattr(request, "cgrag_spender", None)
                if spender is not None:
                    spender.give_back(exc)
                return json_response(request_id, error_body(request_id, exc), exc.status, exc.headers)
            except Exception:
                log.exception("CG_RAG %s %s failed (request %s)", request.method, request.path, request_id)
                return json_response(request_id, error_body(request_id, error_of(Exception())), 500)
            headers = getattr(getattr(request, "cgrag_spender", None), "headers", {})
            if isinstance(result, HttpResponseBase):
                for name, value in headers.items():
                    result[name] = value
                result[HEADER] = request_id
                return result
            return json_response(request_id, result, headers=headers)

        return wrapped

    return decorate


def sse_frame(event: str, data: dict) -> bytes:
    text = f"event: {event}\ndata: {JSON_DUMPS(data)}\n\n"
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (half an emoji cut by the model's stream): escape it in JSON
        return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()



WAIT_PAUSES = (0.005, 0.05)  # first and longest pause between tries for an answer thread, as infra.capacity polls


async def _answer_slot(streams: AnswerStreams, wait_timeout: float) -> Slot | None:
    """An answer thread within `wait_timeout` seconds, or None (also as soon as the server is stopping); polled,
    because the pool's slots are a semaphore of threads and this waits on the event loop."""
    deadline = time.monotonic() + wait_timeout
    pause = WAIT_PAUSES[0]
    while time.monotonic() < deadline and not streams.stopping:
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        slot = streams.reserve()
        if slot is not None:
            return slot
        pause = min(pause * 2, WAIT_PAUSES[1])
    return None


def sse_response(request_id: str, produce: Callable[[Callable[[], bool]], Iterator[tuple[str, dict]]],
                 final_of: Callable[[dict], dict] | None = None) -> StreamingHttpResponse:
    """Stream `produce(cancelled)`'s (event, data) pairs as SSE frames. `produce` runs on an answer thread
    (rag.streams: it may block on the model); `cancelled()` turns true when the client has gone, the answer's
    deadline passed or the server is stopping (then the stream ends with an `error` frame, `answer_deadline` or
    `server_stopping`, and the route's `final_of(error)`).

    With every answer thread taken the stream waits for one as any request waits for capacity (RAG_CAPACITY's
    WAIT_TIMEOUT); one that still gets none ends, with HTTP 200 as seed 004 says, with an `error` frame of 429
    `capacity.exceeded` (resource `answer_streams`) and the route's `final_of(error)`."""
    streams = answer_streams()
    slot = streams.reserve()
    gone = threading.Event()

    def failed(exc: BaseException) -> bytes:  # the producer shapes its own failures; this is a last resort
        log.error("CG_RAG stream %s failed", request_id, exc_info=exc)
        return sse_frame("error", {**error_body(request_id, error_of(Exception()))["error"], "request_id": request_id})

    def last_frames(failure: ServiceError) -> list[bytes]:
        error = error_body(request_id, failure)["error"]
        return [sse_frame("error", {**error, "request_id": request_id}),
                *([sse_frame("final", final_of(error))] if final_of is not None else [])]

    async def frames():
        nonlocal slot
        try:
            if slot is None:
                wait = float(settings.RAG_CAPACITY["WAIT_TIMEOUT"])
                slot = await _answer_slot(streams, wait)
                if slot is None:
                    refusal = (ServerStopping() if streams.stopping else
                               CapacityExceeded(resource="answer_streams", max=streams.threads, wait_timeout=wait))
                    for frame in last_frames(refusal):
                        yield frame
                    return
            frames_of = lambda cancelled: (sse_frame(event, data) for event, data in produce(cancelled))  # noqa: E731
            finished = False  # the producer's own `final` has gone out
            async with aclosing(relay(slot, frames_of, cancel=gone, on_error=failed)) as items:
                async for item in items:
                    if item is DEADLINE_PASSED or item is SERVER_STOPPING:
                        if not finished:
                            for frame in last_frames(ANSWER_DEADLINE if item is DEADLINE_PASSED else ServerStopping()):
                                yield frame
                        return
                    finished = item.startswith(b"event: final\n")
                    yield item
        finally:
            gone.set()  # a disconnect cancels this generator: the producer stops at its next check
            if slot is not None:
                slot.release()  # a slot taken but never started; no-op once its answer ran

    response = StreamingHttpResponse(frames(), content_type="text/event-stream; charset=utf-8")
    if slot is not None:
        response._resource_closers.append(slot.release)  # a stream never started gives its slot back on close
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    response[HEADER] = request_id
    return response
