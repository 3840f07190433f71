"""DRF glue shared by every app's JSON API: `ServiceError` becomes a response with a stable code."""

from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from rag.errors import ServiceError


def exception_handler(exc, context):
    if isinstance(exc, ServiceError):
        return Response(exc.as_dict(), status=exc.status, headers=exc.headers or None)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        response.data = {"code": "invalid_request", "message": "The request is not valid.", "fields": response.data}
    elif response is not None and isinstance(exc, exceptions.APIException):
        response.data = {"code": exc.default_code, "message": str(exc.detail)}
    return response
