"""JSON API of the web assistant: POST /api/search, /api/chat, /api/feedback (thin views over services)."""

from __future__ import annotations

from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinLengthValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from django.middleware.csrf import CsrfViewMiddleware
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.response import Response
from rest_framework.views import APIView

from assistant.services import feedback_submit, web_chat, web_search
from infra.api import error_response, response_header
from infra.errors import ServiceError
from infra.limits import Client
from infra.parsers import StrictJSONParser
from rag.services import LIMITS
from rag.services.records import QUESTION_REGEX

LIMIT_VALIDATORS = (MaxLengthValidator, MinLengthValidator, MaxValueValidator, MinValueValidator,
                    ProhibitNullCharactersValidator, RegexValidator)
# Shows at least one character (not only white space, control or format characters), no NUL: the question
# service's rule, as a pattern.
QUESTION_PATTERN = RegexValidator(QUESTION_REGEX)
KB_PATTERN = RegexValidator(r"^[-a-z0-9_]+$")  # a slug (slugify keeps these characters); the version goes apart
SDK_VERSION_PATTERN = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")  # rag.engine.sdk.VERSION_RE
NO_NUL = RegexValidator(r"^[^\u0000]*$")  # the service refuses a NUL in any value (its code names the field)


class LimitsInSchemaOnly:
    """A field that documents its limits in the OpenAPI schema but leaves checking them to the question
    service, which checks every face's questions the same way (and records the failures): here, types only."""

    def run_validators(self, value):
        documented = self.validators
        self.validators = [v for v in documented if not isinstance(v, LIMIT_VALIDATORS)]
        try:
            super().run_validators(value)
        finally:
            self.validators = documented


class StrictCharField(LimitsInSchemaOnly, serializers.CharField):
    """A string, and only a string: numbers or lists are a type error, not silently converted.

    A blank string is a limit too (`minLength` in the schema when `allow_blank` is false): it passes as ""
    for the service to refuse with its own code.
    """

    def run_validation(self, data=empty):
        if isinstance(data, str) and not data.strip():
            return ""
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(LimitsInSchemaOnly, serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class ListField(LimitsInSchemaOnly, serializers.ListField):
    pass


class AskInput(serializers.Serializer):
    """The shape of a question (JSON types); its values are checked by the question service."""

    question = StrictCharField(
        min_length=1, max_length=LIMITS.question_chars, validators=[QUESTION_PATTERN],
        help_text="The question: it must show at least one character (not only white space, control or format "
                  "characters such as zero-width spaces) and hold no NUL character (else 400 `invalid_question`); over "
                  f"{LIMITS.question_chars} characters is 400 `question_too_long`.")
    kb = StrictCharField(min_length=1, max_length=LIMITS.kb_chars, validators=[KB_PATTERN], required=False,
                         help_text="Knowledge base slug (default: the site's default knowledge base).")
    sdk_version = StrictCharField(min_length=1, max_length=32, required=False, validators=[SDK_VERSION_PATTERN],
                                  help_text="The SDK version to read (`2.0`, `latest`, an alias) when the knowledge "
                                            "base holds several; default `latest`. One that is not indexed is 404 "
                                            "`sdk_version_not_found` with the indexed ones in `details.versions`.")
    exclude = ListField(child=StrictCharField(min_length=1, max_length=LIMITS.chunk_id_chars, validators=[NO_NUL]),
                        required=False,
                        max_length=LIMITS.exclude, help_text="chunk ids not to use")


class SearchInput(AskInput):
    top_k = StrictIntegerField(min_value=1, max_value=LIMITS.top_k, required=False,
                               help_text="How many chunks to return (default 5).")


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


class FeedbackInput(serializers.Serializer):
    request_id = StrictCharField(max_length=64, help_text="The `request_id` of an answer of /api/chat.")
    reason = StrictCharField(max_length=2000, required=False, allow_blank=True)


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
