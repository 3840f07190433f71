"""The Celery application. With no broker configured it uses a filesystem broker under RAG_DATA_DIR."""

import os
from pathlib import Path

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Seconds Redis waits for a delivered task's acknowledgement before handing it to another worker (kombu's
# default is one hour). Tasks are acknowledged late, so this must exceed the longest task limit (an index
# build's 3 h, rag.tasks.BUILD_TIME_LIMIT; a test holds it), or a build still running is started a second time.
VISIBILITY_TIMEOUT = 4 * 3600

app = Celery("ragsite")
app.config_from_object("django.conf:settings", namespace="CELERY")


def _embedded_broker() -> None:
    from django.conf import settings

    if settings.CELERY_BROKER_URL:
        return
    folder = Path(settings.DATA_DIR) / "celery" / "queue"
    for name in ("processed", "control"):
        (Path(settings.DATA_DIR) / "celery" / name).mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport_options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(Path(settings.DATA_DIR) / "celery" / "processed"),
        "store_processed": False,
        "control_folder": str(Path(settings.DATA_DIR) / "celery" / "control"),  # kombu's default is ./control
    }


_embedded_broker()
app.conf.broker_transport_options = {**app.conf.broker_transport_options, "visibility_timeout": VISIBILITY_TIMEOUT}
app.autodiscover_tasks()
