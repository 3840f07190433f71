import json

from django.conf import settings
from django.db.models import Q
from django.shortcuts import render
from django.utils.translation import get_language_from_request
from django.views.decorators.csrf import ensure_csrf_cookie

from rag.models import IndexVersion, KnowledgeBase
from rag.services.knowledge import building_message, index_building
from rag.services.sdk import sdk_versions

# Questions the bundled docs (docs/en, docs/zh) answer, offered as chips on the empty page.
EXAMPLE_QUESTIONS = {
    "en": ["How do I rebuild the index?", "How do I connect Claude Code over MCP?", "What does RAG_DATA_DIR hold?"],
    "zh": ["怎么重建索引？", "怎么用 MCP 连接 Claude Code？", "RAG_DATA_DIR 里存了什么？"],
}


def content_security_policy(request) -> str:
    """The chat page's policy: its own script and styles only, no inline script, its own WebSocket."""
    host = request.get_host()
    return "; ".join([
        "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
        f"connect-src 'self' ws://{host} wss://{host}", "object-src 'none'", "base-uri 'none'",
        "form-action 'self'", "frame-ancestors 'none'",
    ])


def example_questions(request) -> list[str]:
    """The example questions in the language the browser prefers (English unless it prefers Chinese)."""
    language = get_language_from_request(request) or ""
    return EXAMPLE_QUESTIONS["zh" if language.startswith("zh") else "en"]


@ensure_csrf_cookie
def chat(request):
    """The chat page: the answer streams in over /ws/chat."""
    # Each SDK once, with its versions (newest first) for the page's version selector; never a version's own slug.
    knowledge_bases = list(KnowledgeBase.objects.filter(sdk__isnull=True).filter(
        Q(active_version__isnull=False) | Q(versions__status=IndexVersion.Status.BUILDING)
        | Q(sdk_versions__active_version__isnull=False)).distinct().order_by("slug"))
    for knowledge_base in knowledge_bases:
        knowledge_base.versions_json = json.dumps([row.sdk_version for row in reversed(sdk_versions(knowledge_base))
                                                   if row.active_version_id is not None])
    default_kb = next((k for k in knowledge_bases if k.slug == settings.RAG_DEFAULT_KB), None)
    building = index_building(default_kb) if default_kb and default_kb.active_version_id is None else None
    response = render(request, "assistant/chat.html", {
        "knowledge_bases": knowledge_bases, "default_kb": settings.RAG_DEFAULT_KB,
        "examples": example_questions(request),
        "indexing": building_message(default_kb, building) if building else "",
    })
    response["Content-Security-Policy"] = content_security_policy(request)
    return response
