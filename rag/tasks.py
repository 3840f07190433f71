"""Background jobs of the engine: index builds."""

import logging

from celery import shared_task
from django.utils import timezone

from rag.models import IndexVersion, KnowledgeBase
from rag.services.knowledge import STALE_BUILD_SECONDS, _builder_gone, index_build, sources_sync_due, this_builder

log = logging.getLogger(__name__)

BUILD_SOFT_TIME_LIMIT = 3 * 3600  # seconds a build may run; ragsite.celery keeps Redis's visibility timeout above
BUILD_TIME_LIMIT = BUILD_SOFT_TIME_LIMIT + 60


@shared_task(acks_late=True, reject_on_worker_lost=True, soft_time_limit=BUILD_SOFT_TIME_LIMIT,
             time_limit=BUILD_TIME_LIMIT)
def index_build_task(kb_id: int, version_id: int | None = None) -> str:
    """Build and activate a new index version of a knowledge base in the background (into the version that
    index_build_queue created, when given).

    The task may be delivered twice (acks_late: a redelivery after its worker died, or a broker that gave it to a
    second worker): a version that is no longer building, or whose builder still beats, is left alone; one whose
    builder died is failed as abandoned and a fresh version is built in its place, once."""
    kb = KnowledgeBase.objects.get(pk=kb_id)
    version = IndexVersion.objects.get(pk=version_id) if version_id else None
    if version is not None:
        claim = _claim(version)
        if claim == "stand_down":
            log.info("index build of %s: version %s is %s (builder %s); this delivery stands down", kb.slug,
                     version.name, version.status, version.builder or "none")
            return version.name
        if claim == "abandoned":
            version = None  # index_build fails the abandoned version (_refuse_if_building) and starts a new one
    return index_build(kb, version=version).name


@shared_task(soft_time_limit=BUILD_SOFT_TIME_LIMIT, time_limit=BUILD_TIME_LIMIT)
def sources_sync_task() -> list[str]:
    """Celery beat, every minute: sync the knowledge bases whose sync interval has passed (rag.services.knowledge)."""
    return sources_sync_due()


def _claim(version: IndexVersion) -> str:
    """Whether this delivery builds the queued version ("claimed"), leaves it to a live builder ("stand_down"), or
    replaces an abandoned one ("abandoned"). The claim is a conditional update, so of two deliveries that read
    the same row at once only one wins it."""
    me = this_builder()
    if version.status != IndexVersion.Status.BUILDING:
        return "stand_down"
    if version.builder and version.builder != me:
        cutoff = timezone.now() - timezone.timedelta(seconds=STALE_BUILD_SECONDS)
        if (version.heartbeat_at or version.created_at) < cutoff or _builder_gone(version.builder):
            return "abandoned"
        return "stand_down"
    claimed = IndexVersion.objects.filter(pk=version.pk, status=IndexVersion.Status.BUILDING,
                                          builder=version.builder).update(builder=me, heartbeat_at=timezone.now())
    if not claimed:
        version.refresh_from_db()
        return "stand_down"
    version.refresh_from_db()
    return "claimed"
