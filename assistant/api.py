"""JSON API of the web assistant: POST /api/search, /api/chat, /api/feedback (thin views over services)."""

from __future__ import annotations

from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinLengthValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
)
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from assistant.services import feedback_submit, web_chat, web_search
from rag.services.questions import MAX_CHUNK_ID_CHARS, MAX_EXCLUDE, MAX_QUESTION_CHARS, MAX_TOP_K


LIMITS = (MaxLengthValidator, MinLengthValidator, MaxValueValidator, MinValueValidator,
          ProhibitNullCharactersValidator)


class LimitsInSchemaOnly:
    """A field that documents its limits in the OpenAPI schema but leaves checking them to the question
    service, which checks every face's questions the same way (and records the failures): here, types only."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, LIMITS)]


class StrictCharField(LimitsInSchemaOnly, serializers.CharField):
    """A string, and only a string: numbers or lists are a type error, not silently converted."""

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

    question = StrictCharField(max_length=MAX_QUESTION_CHARS, trim_whitespace=True, allow_blank=True)
    kb = StrictCharField(max_length=64, required=False, allow_blank=True)
    exclude = ListField(child=StrictCharField(max_length=MAX_CHUNK_ID_CHARS, allow_blank=True), required=False,
                        max_length=MAX_EXCLUDE, help_text="chunk ids not to use")


class SearchInput(AskInput):
    top_k = StrictIntegerField(min_value=1, max_value=MAX_TOP_K, required=False)


ERROR = inline_serializer("Error", {"code": serializers.CharField(), "message": serializers.CharField()})


class SearchApi(APIView):
    authentication_classes: list = []  # public; an admin's session must not turn on CSRF checks here
    permission_classes: list = []

    @extend_schema(request=SearchInput, responses={200: dict, 400: ERROR, 404: ERROR, 409: ERROR},
                   summary="Search the documentation: adopted chunks, plan and timings")
    def post(self, request):
        data = SearchInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(web_search(**data.validated_data))


class ChatApi(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(request=AskInput, responses={200: dict, 400: ERROR, 404: ERROR, 429: ERROR},
                   summary="Answer a question from the documentation, with checked citations")
    def post(self, request):
        data = AskInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(web_chat(**data.validated_data))


class FeedbackInput(serializers.Serializer):
    request_id = StrictCharField(max_length=64)
    reason = StrictCharField(max_length=2000, required=False, allow_blank=True)


@method_decorator(csrf_protect, name="dispatch")
class FeedbackApi(APIView):
    """A thumbs-down from the chat page (CSRF-protected: the page's form token is required)."""

    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(request=FeedbackInput, responses={201: dict, 200: dict, 404: ERROR})
    def post(self, request):
        data = FeedbackInput(data=request.data)
        data.is_valid(raise_exception=True)
        feedback, created = feedback_submit(**data.validated_data)
        return Response({"request_id": feedback.request.request_id, "created": created}, status=201 if created else 200)
