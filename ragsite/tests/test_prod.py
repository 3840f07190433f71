"""`make prod` end to end (slow): the Procfile under honcho on this machine's PostgreSQL and Redis, with 2 Daphne
processes on one socket, a Celery worker and beat. The worker builds the fixture knowledge base queued by `make
prod` through the Redis broker; /readyz, /api/search and MCP search answer through the shared address; SIGTERM
stops every process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import uuid

import psycopg
import pytest
import requests

from conftest import FIXTURE_CORPUS
from rag.tests.live import ROOT, free_port, wait_for

pytestmark = pytest.mark.slow
POSTGRES = "postgres://postgres@127.0.0.1:5432"


@pytest.fixture
def prod_database():
    """A database of its own (`make prod` creates it), dropped afterwards."""
    name = f"rag_prod_test_{uuid.uuid4().hex[:8]}"
    yield f"{POSTGRES}/{name}"
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_make_prod_serves_the_stack_and_stops_it(prod_database, tmp_path):
    port = free_port()
    log = tmp_path / "prod.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RAG_", "CELERY_"))
           and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DATABASE_URL=prod_database, REDIS_URL="redis://127.0.0.1:6379/13", RAG_DATA_DIR=str(tmp_path / "data"),
               RAG_DEFAULT_KB="sdk", RAG_DEFAULT_KB_SOURCE=str(FIXTURE_CORPUS), PORT=str(port))
    with open(log, "wb") as out:
        stack = subprocess.Popen(["make", "--no-print-directory", "prod"], cwd=ROOT, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def search():
            try:
                response = requests.post(url + "/api/search", json={"question": "Fog 的 near 默认值是多少？"}, timeout=10)
            except requests.RequestException:
                return None
            return response if response.status_code == 200 else None

        found = wait_for(search, 240, "the worker's build and a search")  # queued by make prod, built over Redis
        assert found.json()["kb"] == "sdk" and found.json()["results"]
        served = re.search(r"with 2 Daphne processes \(pids (\d+), (\d+)\)", log.read_text())
        assert served, log.read_text()[-3000:]
        daphnes = [int(served.group(1)), int(served.group(2))]
        assert all(alive(pid) for pid in daphnes)
        ready = requests.get(url + "/readyz", timeout=10).json()
        assert ready == {"ready": True, "checks": {"database": "ok", "redis": "ok", "index:sdk": "ok"}}

        manage = [sys.executable, "manage.py"]
        subprocess.run(manage + ["shell", "-c", "from django.contrib.auth import get_user_model; "
                                 "get_user_model().objects.create_user('prod')"], cwd=ROOT, env=env, check=True)
        key = subprocess.run(manage + ["apikey", "create", "--owner", "prod", "--name", "e2e"], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        assert asyncio.run(mcp_search(url, key.stdout.strip()))
    finally:
        os.killpg(stack.pid, signal.SIGTERM)
        try:
            stack.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
            raise
    assert wait_for(lambda: not any(alive(pid) for pid in daphnes), 30, "the Daphne processes to stop")
    assert wait_for(lambda: not group_alive(stack.pid), 30, "every process of the stack to stop")
    assert "stopped" in log.read_text()


async def mcp_search(url: str, key: str) -> bool:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with http, Client(streamable_http_client(url + "/mcp", http_client=http), mode="legacy") as session:
        result = await session.call_tool("search_sdk_docs", {"question": "Fog 的 near 默认值是多少？"})
    return not result.is_error
