from celery import shared_task

from rag.models import IndexVersion, KnowledgeBase
from rag.services.knowledge import index_build


@shared_task(acks_late=True, soft_time_limit=3 * 3600, time_limit=3 * 3600 + 60)
def index_build_task(kb_id: int, version_id: int | None = None) -> str:
    """Build and activate a new index version of a knowledge base in the background (into the version that
    index_build_queue created, when given)."""
    version = IndexVersion.objects.get(pk=version_id) if version_id else None
    version = index_build(KnowledgeBase.objects.get(pk=kb_id), version=version)
    return version.name
