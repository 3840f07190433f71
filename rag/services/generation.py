"""Generation as the apps see it: whether a model is configured, the breaker's state, the prompt a request
got, and the OpenAI-compatible client that evaluation's judge reuses."""

from __future__ import annotations

from django.conf import settings

from rag.engine.generate import build_messages
from rag.engine.llm import ChatClient, GenerationError
from rag.engine.types import Hit
from rag.models import KnowledgeBase
from rag.pipeline import get_engine
from rag.services.knowledge import kb_searcher

__all__ = ["ChatClient", "GenerationError", "breaker_state", "chat_client", "generation_configured",
           "prompt_rebuild"]


def generation_configured() -> bool:
    """True when answers come from a chat model (and cost tokens), False for extractive answers."""
    return get_engine().generator.uses_model


def breaker_state() -> dict | None:
    """The generation breaker's shared state (for the ops site); None when no model is configured."""
    if not settings.RAG_ENGINE["GENERATION_BASE_URL"]:
        return None
    breaker = get_engine().generator.breaker
    return breaker.state() if breaker is not None else None


def chat_client(*, base_url: str, model: str, api_key: str = "", read_timeout: float = 60.0,
                temperature: float = 0.2, max_tokens: int = 1024, seed: int | None = None) -> ChatClient:
    """A client for any OpenAI-compatible chat endpoint (the judge's; generation builds its own in the pipeline)."""
    return ChatClient(base_url=base_url, model=model, api_key=api_key, timeout=(5.0, float(read_timeout)),
                      temperature=temperature, max_tokens=max_tokens, seed=seed)


def prompt_rebuild(*, kb: str, version: str, chunk_ids: list[str], question: str) -> list[dict] | None:
    """The messages a model got (or would have got) for this evidence; None when the version's files are gone."""
    try:
        reader = get_engine().reader(kb, version)
    except Exception:  # noqa: BLE001 - a version whose files were removed: there is no prompt to show
        return None
    hits = [Hit(chunk=reader.chunks[i], score=0.0, source="rrf")
            for i in (reader.index_of(c) for c in chunk_ids) if i is not None]
    knowledge_base = KnowledgeBase.objects.filter(slug=kb).first()
    # The planner questions of this version use (its catalog maps are built once per version and tables).
    planner = (kb_searcher(knowledge_base, version) if knowledge_base is not None
               else get_engine().searcher(kb, version, {})).planner
    return build_messages(question, hits, planner.run(question))
