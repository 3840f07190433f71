from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from infra.errors import ServiceError
from infra.limits import Client, rate_limited
from rag.models import Channel, KnowledgeBase
from rag.services import QuestionRequest, question_search
from rag.services.serving import readiness
from rag.shapes import search_as_dict


@ensure_csrf_cookie
def home(request):
    """List the knowledge bases and search one of them (server-rendered; the chat page replaces it)."""
    knowledge_bases = list(KnowledgeBase.objects.select_related("active_version"))
    question = request.GET.get("q", "").strip()
    slugs = [k.slug for k in knowledge_bases]
    default = settings.RAG_DEFAULT_KB if settings.RAG_DEFAULT_KB in slugs else (slugs[0] if slugs else "")
    kb = request.GET.get("kb") or default
    context = {"knowledge_bases": knowledge_bases, "question": question, "kb": kb}
    refused = None
    if question:
        try:
            with rate_limited("search", Client.of_request(request)):  # shares /api/search's count
                outcome = question_search(QuestionRequest(question=question, kb=kb, channel=Channel.WEB))
            context["result"] = search_as_dict(outcome, top_k=None)
        except ServiceError as exc:
            context["error"] = exc
            refused = exc if exc.status == 429 else None
    response = render(request, "home.html", context, status=refused.status if refused else 200)
    for name, value in (refused.headers if refused else {}).items():
        response[name] = value
    return response


def readyz(request):
    """Readiness for a load balancer: 200 when the database, Redis (when configured) and every active index
    answer, else 503 naming what does not."""
    state = readiness()
    return JsonResponse({"ready": state.ready, "checks": state.checks}, status=200 if state.ready else 503,
                        headers={"Cache-Control": "no-store"})
