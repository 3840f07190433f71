from celery import shared_task

from rag.models import KnowledgeBase
from rag.services.knowledge import index_build


@shared_task(acks_late=True, soft_time_limit=3 * 3600, time_limit=3 * 3600 + 60)
def index_build_task(kb_id: int) -> str:
    """Build and activate a new index version of a knowledge base in the background."""
    version = index_build(KnowledgeBase.objects.get(pk=kb_id))
    return version.name
