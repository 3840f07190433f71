"""The CG_RAG face's HTTP plumbing: request ids (C6), the error envelope (C3) and server-sent events.

Every route is wrapped by `route`: it takes the caller's `X-Request-ID` when it is valid (1 to 128 printable
ASCII characters, no space), else makes a `req_…` one, and sends it back on every response. Failures become
the seed's envelope `{request_id, error: {code, message, details}}`: 400 `invalid_request` with pydantic's
error items, the question service's ServiceError with its status (429 `capacity.exceeded` adds `category`
and `retryable`), and anything unexpected 500 `service_error` with nothing of the exception in the body.

`sse_response(events)` streams a blocking iterator of (event, data) pairs: it runs in a thread of its own and
hands each event to the loop, so Django streams it as written (Django reads a synchronous iterator whole
under ASGI), and a client that disconnects sets the cancel flag the iterator polls.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from cgrag.inputs import InvalidRequest
from rag.capacity import CapacityExceeded
from rag.errors import ServiceError
from rag.services.records import new_request_id
from rag.streams import BUSY_RETRY_AFTER, DEADLINE_PASSED, answer_streams, relay

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


def route(*methods: str):
    """A CG_RAG route: method check, request id, and the error envelope for whatever the view raises.
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
                result = view(request, request_id, *args, **kwargs)
            except InvalidRequest as exc:
                return json_response(request_id, error_body(request_id, exc), 400)
            except ServiceError as exc:
                return json_response(request_id, error_body(request_id, exc), exc.status, exc.headers)
            except Exception:
                log.exception("CG_RAG %s %s failed (request %s)", request.method, request.path, request_id)
                return json_response(request_id, error_body(request_id, error_of(Exception())), 500)
            if isinstance(result, HttpResponseBase):
                result[HEADER] = request_id
                return result
            return json_response(request_id, result)

        return wrapped

    return decorate


def sse_frame(event: str, data: dict) -> bytes:
    text = f"event: {event}\ndata: {JSON_DUMPS(data)}\n\n"
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (half an emoji cut by the model's stream): escape it in JSON
        return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()



def sse_response(request_id: str, produce: Callable[[Callable[[], bool]], Iterator[tuple[str, dict]]]
                 ) -> StreamingHttpResponse | JsonResponse:
    """Stream `produce(cancelled)`'s (event, data) pairs as SSE frames. `produce` runs on an answer thread
    (rag.streams: it may block on the model); `cancelled()` turns true when the client has gone or the answer's
    deadline passed (then a last `error` frame says `answer_deadline`). With every answer thread taken the
    reply is 429 `capacity.exceeded` before any frame."""
    streams = answer_streams()
    slot = streams.reserve()
    if slot is None:
        refusal = CapacityExceeded(resource="answer_streams", max=streams.threads, wait_timeout=BUSY_RETRY_AFTER)
        return json_response(request_id, error_body(request_id, refusal), refusal.status, refusal.headers)
    gone = threading.Event()

    def failed(exc: BaseException) -> bytes:  # the producer shapes its own failures; this is a last resort
        log.error("CG_RAG stream %s failed", request_id, exc_info=exc)
        return sse_frame("error", {**error_body(request_id, error_of(Exception()))["error"], "request_id": request_id})

    async def frames():
        try:
            frames_of = lambda cancelled: (sse_frame(event, data) for event, data in produce(cancelled))  # noqa: E731
            async for item in relay(slot, frames_of, cancel=gone, on_error=failed):
                if item is DEADLINE_PASSED:
                    error = ServiceError("answer_deadline", "The answer took too long and was stopped.", status=504)
                    yield sse_frame("error", {**error_body(request_id, error)["error"], "request_id": request_id})
                    return
                yield item
        finally:
            gone.set()  # a disconnect cancels this generator: the producer stops at its next check

    response = StreamingHttpResponse(frames(), content_type="text/event-stream; charset=utf-8")
    response._resource_closers.append(slot.release)  # a stream never started gives its slot back on close
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    response[HEADER] = request_id
    return response
