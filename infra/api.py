"""DRF glue shared by every app's JSON API: `ServiceError` becomes a response with a stable code, and the
OpenAPI description of that response."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from infra.errors import ServiceError


def exception_handler(exc, context):
    if isinstance(exc, ServiceError):
        return Response(exc.as_dict(), status=exc.status, headers=exc.headers or None)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        response.data = {"code": "invalid_request", "message": "The request is not valid.", "fields": response.data}
    elif response is not None and isinstance(exc, exceptions.APIException):
        response.data = {"code": exc.default_code, "message": str(exc.detail)}
    return response


class ErrorSerializer(serializers.Serializer):
    """Every error of the JSON API: a stable `code` to branch on and a message safe to show."""

    code = serializers.CharField(help_text="Stable snake_case code, e.g. `invalid_question`, `kb_not_found`.")
    message = serializers.CharField(help_text="For people; the wording may change.")
    request_id = serializers.CharField(required=False, help_text="The request record of a failed question.")
    fields = serializers.DictField(required=False, help_text="Per field, what is wrong (`invalid_request` only).")
    details = serializers.DictField(required=False, help_text="What a program needs to act on the error, e.g. the "
                                                               "SDK versions that are indexed (`sdk_version_not_found`).")


ERROR = ErrorSerializer


def response_header(name: str, description: str, *statuses: int, kind=OpenApiTypes.STR) -> OpenApiParameter:
    """A header that the responses of these statuses carry (for `extend_schema(parameters=...)`)."""
    return OpenApiParameter(name, kind, location=OpenApiParameter.HEADER, description=description,
                            response=list(statuses))


def error_response(codes: str) -> OpenApiResponse:
    """The OpenAPI response of an error status, whose description names its codes."""
    return OpenApiResponse(ERROR, description=codes)
