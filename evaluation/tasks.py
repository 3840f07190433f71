from celery import shared_task

from evaluation.services import eval_run_execute


@shared_task(acks_late=True, soft_time_limit=6 * 3600, time_limit=6 * 3600 + 300)
def eval_run_execute_task(run_id: int) -> None:
    """Run one evaluation. Redelivered after a crash, it finds the run failed (reaped) or finished and stops."""
    eval_run_execute(run_id)
