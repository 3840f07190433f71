"""Test settings: every piece of state in a fresh temporary data directory, fast hashing, eager tasks."""

import os
import tempfile

# Each pytest-xdist worker (`make test` runs the tests in two) gets a data folder of its own; the servers and
# workers a test starts inherit its environment, and with it the folder.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER and os.environ.get("RAG_TEST_DATA_OF") != _WORKER:
    os.environ["RAG_DATA_DIR"] = tempfile.mkdtemp(prefix=f"rag-test-{_WORKER}-")
    os.environ["RAG_TEST_DATA_OF"] = _WORKER
os.environ.setdefault("RAG_DATA_DIR", tempfile.mkdtemp(prefix="rag-test-"))

from .settings import *  # noqa: E402,F401,F403

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # A file, not memory: the end-to-end tests' worker processes open the same test database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}  # noqa: F405

# Test corpora are copied to temporary folders; the worker and server processes of end-to-end tests read them too.
RAG_SOURCE_ROOTS = [*RAG_SOURCE_ROOTS, str(Path(tempfile.gettempdir()).resolve())]  # noqa: F405
os.environ["RAG_SOURCE_ROOTS"] = ",".join(RAG_SOURCE_ROOTS)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
RAG_WARM_UP = False  # tests that want it call rag.pipeline.warm_up() themselves
CELERY_TASK_EAGER_PROPAGATES = True
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
STORAGES = {"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
