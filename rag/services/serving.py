"""Which knowledge bases this process serves warm: open the active version of one (a face's warm-up or its
scope switch) and tell which are open now."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rag.pipeline import get_engine
from rag.services.knowledge import kb_get_current


@dataclass(frozen=True, slots=True)
class Loaded:
    kb: str
    version: str
    opened: bool  # True when this call opened it; False when it was open already
    load_ms: float


def kb_load(slug: str) -> Loaded:
    """Open the active version of a knowledge base in this process (its vectors, BM25 and catalog); raise the
    question service's errors (kb_not_found, no_active_version) when there is nothing to open."""
    from rag.services.questions import version_of

    knowledge_base = kb_get_current(slug)
    row = version_of(knowledge_base, None)
    engine = get_engine()
    was_open = (knowledge_base.slug, row.name) in engine.readers
    started = time.perf_counter()
    engine.reader(knowledge_base.slug, row.name)
    return Loaded(kb=knowledge_base.slug, version=row.name, opened=not was_open,
                  load_ms=round((time.perf_counter() - started) * 1000, 1))


def kb_resident(versions: dict[str, str]) -> list[str]:
    """Of {kb slug: active version}, the knowledge bases whose active version is open in this process."""
    readers = get_engine().readers
    return [kb for kb, version in versions.items() if (kb, version) in readers]
