"""Scopes (C2): each knowledge base is a CG_RAG scope, named by its slug or by an alias from
RAG_CGRAG["SCOPE_ALIASES"] (for example the seed's `full`, `usual`, `usual_plus_law`).

As in the seed, one profile is active at a time in a process: a request for another scope switches to it
(loading that knowledge base's active version if it is not open yet), and warm-up loads scopes in order,
leaving the last one active. The engine may keep other versions open for other faces; `resident_scopes`
lists the scopes whose active version is open in this process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.conf import settings

from cgrag.inputs import invalid
from infra.errors import ServiceError
from rag.models import KnowledgeBase
from rag.services.sdk import kb_serving
from rag.services.serving import kb_load, kb_resident


@dataclass
class ScopeState:
    active: str = ""
    load_count: int = 0
    last_load_time_ms: float = 0.0
    last_loaded_scope: str = ""


_state = ScopeState()
_lock = threading.Lock()


def aliases() -> dict[str, str]:
    return dict(settings.RAG_CGRAG["SCOPE_ALIASES"])


def default_scope() -> str:
    return settings.RAG_CGRAG["DEFAULT_SCOPE"] or settings.RAG_DEFAULT_KB


def scope_slug(scope: str | None) -> str:
    """The knowledge base slug a scope names (None: the default scope); raise invalid_request for none.

    An SDK's scope reads one of its versions: `three` its latest, `three@2.0` or `three@stable` that version."""
    name = (scope or default_scope()).strip()
    try:
        return kb_serving(aliases().get(name, name)).kb
    except ServiceError as exc:
        raise invalid("scope", f"Unknown scope {name[:64]!r}; GET /cg-rag/profiles lists the scopes."
                      + (f" {exc.message}" if exc.code == "sdk_version_not_found" else ""), "scope_not_found") from None


def knowledge_bases() -> list[KnowledgeBase]:
    return list(KnowledgeBase.objects.select_related("active_version").order_by("slug"))


def available_scopes(bases: list[KnowledgeBase] | None = None) -> list[str]:
    """Every knowledge base's slug, then each alias whose knowledge base exists."""
    slugs = [kb.slug for kb in (bases if bases is not None else knowledge_bases())]
    return slugs + [name for name, slug in aliases().items() if slug in slugs and name not in slugs]


def profiles() -> dict:
    """The bare profile map of GET /cg-rag/profiles: scope → label (the knowledge base's name) and
    retrieval_method (its active version's embedding model)."""
    bases = {kb.slug: kb for kb in knowledge_bases()}
    result = {}
    for name in available_scopes(list(bases.values())):
        kb = bases.get(scope_slug(name)) or bases[aliases().get(name, name)]
        entry = {"label": kb.name or kb.slug, "retrieval_method": kb.active_version.model_id if kb.active_version else ""}
        if name != kb.slug:
            entry["knowledge_base"] = kb.slug
        result[name] = entry
    return result


def scope_activate(requested: str | None) -> dict:
    """Make a scope the active profile, loading its active version when it is not open: the seed's warm-up
    item (requested_scope, normalized_scope, active_scope, warmed, resident, scope_switched). A scope with
    nothing to load (no index yet) is not warmed, and the item says why (`error`)."""
    slug = scope_slug(requested)
    try:
        loaded = kb_load(slug)
    except ServiceError as exc:
        loaded, error = None, exc
    with _lock:
        switched = bool(_state.active) and _state.active != slug
        _state.active = slug
        if loaded is not None and loaded.opened:
            _state.load_count += 1
            _state.last_load_time_ms = loaded.load_ms
            _state.last_loaded_scope = slug
    item = {"requested_scope": requested if requested is not None else default_scope(), "normalized_scope": slug,
            "active_scope": slug, "warmed": loaded is not None, "resident": loaded is not None,
            "scope_switched": switched}
    if loaded is None:
        item["error"] = {"code": error.code, "message": error.message}
    return item


def active_scope() -> str:
    return _state.active or default_scope()


def active_knowledge_base(bases: list[KnowledgeBase]) -> KnowledgeBase | None:
    """Of `bases`, the knowledge base the active scope names (None when it names none of them)."""
    active = active_scope()
    slug = aliases().get(active, active)
    return next((kb for kb in bases if kb.slug == slug), None)


def retriever_state(bases: list[KnowledgeBase] | None = None) -> dict:
    """Health's `retriever`: the active scope, resident scopes, loads so far and the last load's time."""
    bases = bases if bases is not None else knowledge_bases()
    versions = {kb.slug: kb.active_version.name for kb in bases if kb.active_version is not None}
    return {"active_scope": active_scope(), "resident_scopes": kb_resident(versions),
            "load_count": _state.load_count, "last_load_time_ms": _state.last_load_time_ms,
            "last_loaded_scope": _state.last_loaded_scope}


def reset() -> None:
    """Forget the active scope and the load counters (tests)."""
    global _state
    with _lock:
        _state = ScopeState()
