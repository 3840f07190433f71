"""JSON API of the web assistant: POST /api/search, /api/chat, /api/feedback (thin views over services)."""

from __future__ import annotations

from django.middleware.csrf import CsrfViewMiddleware
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from assistant.inputs import AskInput, FeedbackInput, SearchInput
from assistant.services import feedback_submit, web_chat, web_search
from infra.api import error_response, response_header
from infra.errors import ServiceError
from infra.limits import Client
from infra.parsers import StrictJSONParser

BAD_QUESTION = ("`parse_error` (not JSON), `invalid_request` (a body of the wrong shape, with `fields`), or the "
                "question service's code for a bad value: `invalid_question`, `question_too_long`, `invalid_kb`, "
                "`invalid_sdk_version`, `invalid_exclude`")
QUESTION_ERRORS = {
    404: error_response("`kb_not_found`: no knowledge base with this slug; `sdk_version_not_found`: the knowledge "
                        "base has no such SDK version (the indexed ones are in `details.versions`)."),
    409: error_response("`no_active_version`: the knowledge base has no index yet."),
    415: error_response("`unsupported_media_type`: the body is not `application/json`."),
    500: error_response("`internal_error`: the request failed on the server (it is recorded)."),
    503: error_response("`index_building`: the first index of the knowledge base is being built; try again "
                        "after `Retry-After` seconds."),
}
RETRY_AFTER = response_header("Retry-After", "Seconds to wait before asking again.", 429, 503, kind=OpenApiTypes.INT)
RATE_LIMITED = ("`rate_limited`: this client (its address, and its session when it has one) asked more than "
                "RAG_WEB_LIMITS allows a minute; try again after `Retry-After` seconds.")


class QuestionSearchApi(APIView):
    authentication_classes: list = []  # public; an admin's session must not turn on CSRF checks here
    permission_classes: list = []
    parser_classes = [StrictJSONParser]  # JSON only: a form post from another site cannot reach it

    @extend_schema(request=SearchInput, parameters=[RETRY_AFTER],
                   summary="Search the documentation: adopted chunks, plan and timings",
                   responses={200: OpenApiResponse(dict, "The adopted chunks, the plan and the timings."),
                              400: error_response(BAD_QUESTION + ", `invalid_top_k`."), **QUESTION_ERRORS,
                              429: error_response(RATE_LIMITED)})
    def post(self, request):
        data = SearchInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(web_search(**data.validated_data, client=Client.of_request(request)))


class QuestionAnswerApi(APIView):
    authentication_classes: list = []
    permission_classes: list = []
    parser_classes = [StrictJSONParser]

    @extend_schema(request=AskInput, parameters=[RETRY_AFTER],
                   summary="Answer a question from the documentation, with checked citations",
                   responses={200: OpenApiResponse(dict, "The answer, its citations, confidence and mode."),
                              400: error_response(BAD_QUESTION + "."), **QUESTION_ERRORS,
                              429: error_response(RATE_LIMITED + " `client_token_share_exhausted`: this client's share "
                                                  "of today's token pool is spent, `token_pool_exhausted`: the whole "
                                                  "pool is; both refill at local midnight (`Retry-After`)."),
                              503: error_response("`index_building`: the first index of the knowledge base is being "
                                                  "built; `limits_unavailable`: the client's token share cannot be "
                                                  "counted right now. Try again after `Retry-After` seconds."),
                              504: error_response("`answer_deadline`: the answer ran past RAG_CHAT_DEADLINE_SECONDS "
                                                  "and was stopped (it is recorded as cancelled).")})
    def post(self, request):
        data = AskInput(data=request.data)
        data.is_valid(raise_exception=True)
        left = getattr(request._request, "client_left", None)  # set by ragsite.asgi when the client disconnects
        return Response(web_chat(**data.validated_data, client=Client.of_request(request),
                                 client_left=left.is_set if left is not None else lambda: False))


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


def csrf_check(request) -> None:
    """Refuse a request without the page's CSRF token with a JSON 403 (Django's own answer is an HTML page)."""
    check = _CsrfCheck(lambda _request: None)
    check.process_request(request)
    reason = check.process_view(request, None, (), {})
    if reason:
        raise ServiceError("csrf_failed", f"CSRF check failed: {reason} Load the chat page first and send its "
                           "csrftoken cookie with the same token in the X-CSRFToken header.", status=403)


class FeedbackCreateApi(APIView):
    """A thumbs-down from the chat page (CSRF-protected: the page's form token is required)."""

    authentication_classes: list = []
    permission_classes: list = []
    parser_classes = [StrictJSONParser]

    @extend_schema(request=FeedbackInput, summary="Thumbs-down one answer of the web assistant",
                   responses={201: OpenApiResponse(dict, "Recorded: `{request_id, created: true}`."),
                              200: OpenApiResponse(dict, "Already recorded: `{request_id, created: false}`."),
                              400: error_response("`parse_error` (not JSON) or `invalid_request` (a body of the "
                                                  "wrong shape, with `fields`)."),
                              403: error_response("`csrf_failed`: the CSRF cookie or the X-CSRFToken header is "
                                                  "missing or wrong."),
                              404: error_response("`request_not_found`: no answer of the web assistant with this "
                                                  "request id."),
                              415: error_response("`unsupported_media_type`: the body is not `application/json`.")})
    def post(self, request):
        csrf_check(request._request)  # in the handler, so an unknown method is a 405 before any CSRF check
        data = FeedbackInput(data=request.data)
        data.is_valid(raise_exception=True)
        feedback, created = feedback_submit(**data.validated_data)
        return Response({"request_id": feedback.request.request_id, "created": created}, status=201 if created else 200)
