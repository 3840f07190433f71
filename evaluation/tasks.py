from celery import shared_task

from evaluation.services.runs import eval_run_execute, eval_runs_reap


@shared_task(acks_late=True, soft_time_limit=6 * 3600, time_limit=6 * 3600 + 300)
def eval_run_execute_task(run_id: int) -> None:
    """Run one evaluation. Redelivered after a crash, it finds the run failed (reaped) or finished and stops."""
    eval_run_execute(run_id)


@shared_task(acks_late=True, soft_time_limit=6 * 3600, time_limit=6 * 3600 + 300)
def gated_reindex_task(kb_id: int, user_id: int | None = None) -> None:
    """Build a candidate version of a knowledge base and activate it only if its golden sets pass."""
    from django.contrib.auth import get_user_model

    from evaluation.services.reindex import index_build_gated
    from rag.models import KnowledgeBase

    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    index_build_gated(KnowledgeBase.objects.get(pk=kb_id), user=user)


@shared_task
def eval_runs_reap_task() -> int:
    """Every few minutes (beat): runs whose worker died are marked failed even when nobody opens a page."""
    return eval_runs_reap()
