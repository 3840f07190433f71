from celery import shared_task

from opsboard.gaps import gaps_compute
from opsboard.services import alerts_evaluate, daily_report_build, rollup_hours


@shared_task
def daily_report_task() -> str:
    """Shortly after midnight (beat): yesterday's report."""
    return str(daily_report_build().day)


@shared_task
def alerts_evaluate_task() -> int:
    """Every minute (beat): open, refresh or resolve alerts; returns how many are firing."""
    return len(alerts_evaluate())


@shared_task
def rollup_hours_task() -> int:
    """Every 5 minutes (beat): roll up the hours that closed, so the overview reads few rows."""
    return rollup_hours()


@shared_task
def gaps_compute_task() -> int:
    """Hourly (beat): regroup the unanswered questions into coverage gaps; re-check the covered ones."""
    return gaps_compute().groups
