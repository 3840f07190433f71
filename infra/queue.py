"""Handing work to the Celery worker, so that a broker that does not answer (Redis stopped or stalled) fails
clearly: the caller gets 503 `queue_unavailable` with Retry-After at once (publishing gives up within seconds,
see CELERY_BROKER_TRANSPORT_OPTIONS), and the row that was waiting for the job says why it will not run, so
nothing sits "queued" forever. What was stored before stays as it was; queue the job again once Redis is back."""

from __future__ import annotations

import logging
from typing import Callable

from infra.errors import ServiceError

log = logging.getLogger(__name__)

QUEUE_RETRY_AFTER = 30  # seconds


def enqueue(task, *args, on_unavailable: Callable[[str], None] | None = None) -> None:
    """`task.delay(*args)`; when the broker does not take it, call `on_unavailable(reason)` and raise
    ServiceError("queue_unavailable", 503)."""
    from kombu.exceptions import OperationalError

    try:
        task.delay(*args)
    except OperationalError as exc:
        reason = f"the job queue (Celery broker) is unavailable: {type(exc).__name__}"
        log.warning("could not queue %s: %s", getattr(task, "name", task), exc)
        if on_unavailable is not None:
            on_unavailable(reason)
        raise ServiceError("queue_unavailable", "The job queue does not answer; nothing was started. Try again "
                           "in a moment.", status=503, headers={"Retry-After": str(QUEUE_RETRY_AFTER)}) from None
