"""GET /api/keys/usage: a key's owner reads that key's usage, authenticating with the key itself; and the
OAuth discovery paths, answered with 404 because keys are issued in the admin, not by OAuth."""

from __future__ import annotations

import re

from django.http import JsonResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from apikeys.services import api_key_authenticate, api_key_usage_summary
from infra.api import error_response, response_header
from infra.clients import request_address
from infra.errors import ServiceError

MISSING_KEY = "This server needs an API key: send `Authorization: Bearer <key>` (keys are issued in the admin)."
MAX_DAYS = 90
# What MCP clients probe before OAuth (RFC 9728 protected-resource metadata, path-aware and at the root; RFC
# 8414 authorization-server metadata; OpenID Connect discovery), as the MCP SDK's client builds them.
OAUTH_DISCOVERY_PATHS = (".well-known/oauth-protected-resource", ".well-known/oauth-protected-resource/mcp",
                         ".well-known/oauth-authorization-server", ".well-known/oauth-authorization-server/mcp",
                         ".well-known/openid-configuration", ".well-known/openid-configuration/mcp")


def bearer_challenge(error: str, description: str) -> str:
    """A `WWW-Authenticate` value (RFC 6750 section 3) that names the error and offers no OAuth.

    It carries no `resource_metadata` (RFC 9728), so a client has no authorization server to look for; the
    description is reduced to the characters RFC 6750 allows in it (printable ASCII without `"` and `\\`).
    """
    text = re.sub(r'[^\x20-\x7e]|["\\]', "", description).strip()
    return f'Bearer realm="mcp", error="{error}", error_description="{text}"'


def key_refusal(exc: ServiceError) -> ServiceError:
    """Add the Bearer challenge to a 401 of api_key_authenticate (unknown, revoked or expired key)."""
    if exc.status == 401:
        exc.headers["WWW-Authenticate"] = bearer_challenge("invalid_token", exc.message)
    return exc


def bearer_of(authorization: str) -> str:
    """The key of an `Authorization: Bearer <key>` value, or a 401 with its challenge."""
    if not authorization:
        raise ServiceError("missing_api_key", MISSING_KEY, status=401,
                           headers={"WWW-Authenticate": bearer_challenge("invalid_request", MISSING_KEY)})
    if not is_bearer(authorization):
        message = "Send the key as `Authorization: Bearer <key>`."
        raise ServiceError("invalid_api_key", message, status=401,
                           headers={"WWW-Authenticate": bearer_challenge("invalid_request", message)})
    return authorization.partition(" ")[2].strip()


def is_bearer(authorization: str) -> bool:
    """Whether an Authorization value has the form `Bearer <something>` (the key itself is checked apart)."""
    scheme, _, raw = authorization.partition(" ")
    return scheme.lower() == "bearer" and bool(raw.strip())


CHALLENGE = response_header("WWW-Authenticate", "A Bearer challenge with `error` and `error_description` "
                            "(RFC 6750); it offers no OAuth.", 401)


class KeyUsageReadApi(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(
        summary="Usage of the calling API key: limits, today's calls, calls and tokens per tool per day",
        auth=[{"ApiKey": []}],
        parameters=[OpenApiParameter("days", {"type": "integer", "minimum": 1, "maximum": MAX_DAYS, "default": 30},
                                     description=f"How many days back (1-{MAX_DAYS}, default 30); another value is "
                                     "400 `invalid_days`."), CHALLENGE],
        responses={200: OpenApiResponse(dict, "The key, its state and limits, today's calls and the usage rows."),
                   400: error_response("`invalid_days`: `days` is not an integer from 1 to 90."),
                   401: error_response("`missing_api_key` (no Authorization header) or `invalid_api_key` (an "
                                       "unknown, revoked or expired key, or not `Bearer <key>`)."),
                   429: error_response("`too_many_failed_attempts`: too many failed attempts from this "
                                       "address with this key prefix, or with any; try again later.")})
    def get(self, request):
        raw = bearer_of(request.headers.get("Authorization", ""))
        try:
            key = api_key_authenticate(raw=raw, address=request_address(request))
        except ServiceError as exc:
            raise key_refusal(exc) from None
        raw_days = request.query_params.get("days", "30")
        if not re.fullmatch(r"[0-9]{1,3}", raw_days) or not 1 <= int(raw_days) <= MAX_DAYS:
            raise ServiceError("invalid_days", f"days must be an integer from 1 to {MAX_DAYS}.")
        return Response(api_key_usage_summary(key=key, days=int(raw_days)))


def oauth_not_offered(request, **_kwargs):
    """404 on every OAuth discovery path: an MCP client stops there and shows the 401's own message."""
    return JsonResponse({"code": "oauth_not_supported",
                         "message": "This server does not offer OAuth. " + MISSING_KEY}, status=404)
