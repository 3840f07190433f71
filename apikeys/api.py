"""GET /api/keys/usage: a key's owner reads that key's usage, authenticating with the key itself."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from apikeys.services import api_key_authenticate, api_key_usage_summary
from rag.errors import ServiceError


def bearer_of(request) -> str:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise ServiceError("missing_api_key", "Send `Authorization: Bearer <key>`.", status=401,
                           headers={"WWW-Authenticate": 'Bearer realm="mcp"'})
    return raw.strip()


class UsageApi(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(summary="Usage of the calling API key: limits, today's calls, calls and tokens per tool per day",
                   parameters=[OpenApiParameter("days", int, description="How many days back (1-90, default 30)")],
                   responses={200: dict})
    def get(self, request):
        key = api_key_authenticate(raw=bearer_of(request), address=request.META.get("REMOTE_ADDR", ""))
        raw_days = request.query_params.get("days", "30")
        if not raw_days.isdigit() or not 1 <= int(raw_days) <= 90:
            raise ServiceError("invalid_days", "days must be an integer from 1 to 90.")
        return Response(api_key_usage_summary(key=key, days=int(raw_days)))
