"""Helpers of the end-to-end tests: the project served by a real Daphne process, or any manage.py command,
on the test database and data folder of this pytest session."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout: float = 180, what: str = "the condition", interval: float = 0.05):
    """Poll `predicate` until it returns something true (returned), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url_of_test_db() -> str:
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{database['NAME']}"
    return (f"postgres://{database['USER']}:{database.get('PASSWORD') or ''}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}")


def project_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that should see what this test sees (production settings)."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "ragsite.settings", "RAG_DATA_DIR": str(settings.DATA_DIR),
            "DATABASE_URL": database_url_of_test_db(), "RAG_DEFAULT_KB": "sdk", "DJANGO_DEBUG": "false", **extra}


@contextlib.contextmanager
def daphne(**extra: str):
    """Daphne serving ragsite.asgi on a free loopback port; yields its base URL."""
    port = free_port()
    env = project_env(**extra)
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "ragsite.asgi:application"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def manage(*args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=project_env(**extra),
                          capture_output=True, text=True, timeout=120)
