"""`check --deploy` warns of an MCP service open without a key (issue 28)."""

from __future__ import annotations

from ragsite.tests.test_deploy import deploy_check

HTTPS = {"DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO=https"}


def test_the_deploy_check_warns_when_the_mcp_service_needs_no_key(tmp_path):
    result = deploy_check(tmp_path, RAG_MCP_REQUIRE_KEY="false", **HTTPS)

    assert result.returncode != 0
    assert "RAG_MCP_REQUIRE_KEY" in result.stderr


def test_the_deploy_check_stays_clean_when_the_mcp_service_needs_a_key(tmp_path):
    result = deploy_check(tmp_path, RAG_MCP_REQUIRE_KEY="true", **HTTPS)

    assert result.returncode == 0, result.stderr
