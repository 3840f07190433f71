from django.conf import settings
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from rag.models import KnowledgeBase


@ensure_csrf_cookie
def chat(request):
    """The chat page: the answer streams in over /ws/chat."""
    knowledge_bases = list(KnowledgeBase.objects.filter(active_version__isnull=False))
    return render(request, "assistant/chat.html",
                  {"knowledge_bases": knowledge_bases, "default_kb": settings.RAG_DEFAULT_KB})
