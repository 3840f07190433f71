"""MCP without a key: a 401 whose Bearer challenge names the error and offers no OAuth (RFC 6750, no RFC 9728
resource_metadata), 404 JSON on the OAuth discovery paths that MCP clients probe, and the SDK's client showing
the server's own message."""

from __future__ import annotations

import asyncio
import re

import httpx2
import pytest
from mcp import Client
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from apikeys.api import MISSING_KEY, bearer_challenge
from apikeys.services import api_key_issue, api_key_revoke
from rag.tests.live import daphne

CHALLENGE = re.compile(r'Bearer realm="mcp", error="(invalid_request|invalid_token)", error_description="([^"\\]*)"')


def discovery_paths(server_url: str) -> list[str]:
    """The paths the MCP SDK's OAuth client asks for after a 401 without resource_metadata."""
    urls = build_protected_resource_metadata_discovery_urls(None, server_url)
    urls += build_oauth_authorization_server_metadata_discovery_urls(None, server_url)
    urls += build_oauth_authorization_server_metadata_discovery_urls(server_url.rsplit("/mcp", 1)[0], server_url)
    return sorted({url.removeprefix(server_url.rsplit("/mcp", 1)[0]) for url in urls})


def test_the_sdk_probes_exactly_the_paths_that_are_answered():
    assert discovery_paths("http://127.0.0.1:8000/mcp") == [
        "/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp", "/.well-known/openid-configuration"]


@pytest.mark.parametrize("path", [*discovery_paths("http://testserver/mcp"),
                                  "/.well-known/oauth-authorization-server/mcp",
                                  "/.well-known/openid-configuration/mcp"])
def test_every_oauth_discovery_path_is_a_json_404_that_points_at_the_api_key(client, path):
    response = client.get(path)

    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    assert response.json()["code"] == "oauth_not_supported"
    assert "Authorization: Bearer <key>" in response.json()["message"]


def test_a_challenge_keeps_to_the_characters_rfc_6750_allows():
    value = bearer_challenge("invalid_token", 'Key "rk1" \\ was revoked — ask again.')

    assert value == 'Bearer realm="mcp", error="invalid_token", error_description="Key rk1  was revoked  ask again."'


@pytest.mark.django_db
def test_the_usage_endpoint_challenges_without_offering_oauth(client, django_user_model):
    owner = django_user_model.objects.create_user("li.wei", password="x")
    key, secret = api_key_issue(owner=owner, name="old laptop")
    api_key_revoke(key=key)

    missing = client.get("/api/keys/usage")
    revoked = client.get("/api/keys/usage", headers={"Authorization": f"Bearer {secret}"})
    not_bearer = client.get("/api/keys/usage", headers={"Authorization": "Basic abc"})

    assert CHALLENGE.fullmatch(missing["WWW-Authenticate"]).groups() == ("invalid_request", MISSING_KEY)
    assert CHALLENGE.fullmatch(revoked["WWW-Authenticate"]).group(1) == "invalid_token"
    assert "revoked" in CHALLENGE.fullmatch(revoked["WWW-Authenticate"]).group(2)
    assert CHALLENGE.fullmatch(not_bearer["WWW-Authenticate"]).group(1) == "invalid_request"
    assert all("resource_metadata" not in r["WWW-Authenticate"] for r in (missing, revoked, not_bearer))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_keyless_sdk_client_fails_with_the_servers_message_and_finds_no_oauth(django_user_model):
    owner = django_user_model.objects.create_user("li.wei", password="x")
    revoked, revoked_secret = api_key_issue(owner=owner, name="old laptop")
    api_key_revoke(key=revoked)

    async def scenario(url):
        outcome = {}
        for name, headers in {"no key": {}, "revoked": {"Authorization": f"Bearer {revoked_secret}"}}.items():
            http = create_mcp_http_client(headers=headers)
            with pytest.raises(BaseException) as refused:
                async with http, Client(streamable_http_client(url + "/mcp", http_client=http)):
                    pass
            outcome[name] = refused.value
        async with httpx2.AsyncClient() as raw:
            outcome["401"] = await raw.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                            headers={"Accept": "application/json, text/event-stream"})
            outcome["discovery"] = {path: await raw.get(url + path) for path in discovery_paths(url + "/mcp")}
        return outcome

    with daphne() as url:
        outcome = asyncio.run(scenario(url))

    no_key, revoked_error = _mcp_error(outcome["no key"]), _mcp_error(outcome["revoked"])
    assert MISSING_KEY in str(no_key) and no_key.error.data == {"code": "missing_api_key"}
    assert "This API key was revoked." in str(revoked_error) and revoked_error.error.data["code"] == "invalid_api_key"
    challenge = outcome["401"].headers["WWW-Authenticate"]
    assert CHALLENGE.fullmatch(challenge).groups() == ("invalid_request", MISSING_KEY)
    assert "resource_metadata" not in challenge
    assert {path: (r.status_code, r.json()["code"]) for path, r in outcome["discovery"].items()} == {
        path: (404, "oauth_not_supported") for path in discovery_paths(url + "/mcp")}


def _mcp_error(error: BaseException) -> MCPError:
    """The MCPError inside what the client raised (anyio task groups wrap it in exception groups)."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return error
