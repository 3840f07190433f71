"""Deploy checks of the site's public faces (`manage.py check --deploy`)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=True)
def mcp_requires_a_key(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Warn when the MCP service answers callers without an API key in production."""
    if getattr(settings, "RAG_MCP_REQUIRE_KEY", True):
        return []
    return [checks.Warning(
        "RAG_MCP_REQUIRE_KEY is false: the MCP service at /mcp answers any caller without an API key, and its "
        "tools spend the generation model's tokens.",
        hint="Unset RAG_MCP_REQUIRE_KEY (it defaults to true when DJANGO_DEBUG is false) or set it to true.",
        id="rag.W001")]
