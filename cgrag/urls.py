"""Routes of the CG_RAG API (seed 004) under /cg-rag/, and its two legacy routes /healthz and /retrieve.
The MCP server's alias /cg-rag/mcp is served by the ASGI router (apikeys.mcp.http), not here."""

from django.urls import path

from cgrag import views, vision

urlpatterns = [
    path("cg-rag/health", views.health, name="cgrag-health"),
    path("cg-rag/profiles", views.profiles, name="cgrag-profiles"),
    path("cg-rag/retrieve-rerank", views.retrieve_rerank, name="cgrag-retrieve-rerank"),
    path("cg-rag/constrained-generate", views.constrained_generate, name="cgrag-constrained-generate"),
    path("cg-rag/rag", views.rag, name="cgrag-rag"),
    path("cg-rag/rag/stream", views.rag_stream, name="cgrag-rag-stream"),
    path("cg-rag/answer", views.rag, name="cgrag-answer"),
    path("cg-rag/warmup", views.warmup, name="cgrag-warmup"),
    path("cg-rag/vision/answer", vision.answer, name="cgrag-vision-answer"),
    path("cg-rag/vision/answer/stream", vision.answer_stream, name="cgrag-vision-answer-stream"),
    path("cg-rag/vision/observe", vision.observe, name="cgrag-vision-observe"),
    path("cg-rag/vision/agentic", vision.agentic, name="cgrag-vision-agentic"),
    path("cg-rag/vision/agentic/stream", vision.agentic_stream, name="cgrag-vision-agentic-stream"),
    path("healthz", views.healthz, name="healthz"),
    path("retrieve", views.retrieve, name="cgrag-retrieve"),
]
