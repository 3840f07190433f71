"""Which knowledge bases this process serves warm: open the active version of one (a face's warm-up or its
scope switch), tell which are open now, and whether this process is ready to serve (`readiness`, /readyz)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

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
    engine = get_engine()
    active = knowledge_base.active_version
    was_open = active is not None and (knowledge_base.slug, active.name) in engine.readers
    started = time.perf_counter()
    row = version_of(knowledge_base, None)  # opens it (or, while it does not open, the good version before it)
    return Loaded(kb=knowledge_base.slug, version=row.name, opened=not was_open,
                  load_ms=round((time.perf_counter() - started) * 1000, 1))


def kb_resident(versions: dict[str, str]) -> list[str]:
    """Of {kb slug: active version}, the knowledge bases whose active version is open in this process."""
    readers = get_engine().readers
    return [kb for kb, version in versions.items() if (kb, version) in readers]


@dataclass(frozen=True, slots=True)
class Readiness:
    checks: dict[str, str] = field(default_factory=dict)  # what was checked -> "ok" or why not

    @property
    def ready(self) -> bool:
        return all(state == "ok" for state in self.checks.values())


def readiness() -> Readiness:
    """Can this process serve? The database answers, Redis answers when REDIS_URL is set (1 s timeouts), and the
    active version of each knowledge base opens (once per process: an open one is kept, so a poll every second
    costs a query and a ping; a version activated elsewhere is opened, fetched from object storage, by the
    first poll after it)."""
    from rag.models import KnowledgeBase

    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready; the reason is shown
        checks["database"] = f"unavailable: {type(exc).__name__}"
        return Readiness(checks)
    if settings.REDIS_URL:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1).ping()
            checks["redis"] = "ok"
        except Exception as exc:  # noqa: BLE001
            checks["redis"] = f"unavailable: {type(exc).__name__}"
    engine = get_engine()
    for slug, version in KnowledgeBase.objects.filter(active_version__isnull=False).values_list(
            "slug", "active_version__name"):
        try:
            engine.reader(slug, version)
            engine.note_active(slug, version)  # a load balancer's poll opens a new version before a question does
            checks[f"index:{slug}"] = "ok"
        except Exception as exc:  # noqa: BLE001 - a missing or corrupt version
            checks[f"index:{slug}"] = f"does not open: {type(exc).__name__}"
    return Readiness(checks)
