"""Daphne receiving SIGTERM while an answer streams over the chat WebSocket (slow, issue 16): the page gets a final
error frame before the socket closes, and the request is recorded."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import websockets

from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb
from rag.tests.live import ROOT, free_port, project_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LONG_ANSWER = " ".join(["The default fov is 50 degrees [1]."] * 12)


def test_sigterm_during_a_stream_ends_it_with_a_final_error_frame_and_records_it(corpus_copy, llm_server):
    make_built_kb(corpus_copy)
    llm_server.replies.append(("drip", LONG_ANSWER))
    port = free_port()
    env = project_env(RAG_GENERATION_BASE_URL=llm_server.url, RAG_GENERATION_MODEL="m", RAG_WARM_UP="false")
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "ragsite.asgi:application"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The probe is also a connection that never reaches an application, as a load balancer's: Daphne's own
        # shutdown step fails on those, ours must not.
        wait_for(lambda: _listening(port), 30, "Daphne to listen")

        async def converse() -> list[dict]:
            frames = []
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/chat",
                                          origin=f"http://127.0.0.1:{port}") as socket_:
                await socket_.send(json.dumps({"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"}))
                while not frames or frames[-1]["type"] != "token":
                    frames.append(json.loads(await asyncio.wait_for(socket_.recv(), 30)))
                server.send_signal(signal.SIGTERM)
                try:
                    while True:
                        frames.append(json.loads(await asyncio.wait_for(socket_.recv(), 30)))
                except websockets.ConnectionClosed:
                    return frames

        frames = asyncio.run(converse())
        assert server.wait(timeout=30) is not None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    last = frames[-1]
    assert last["type"] == "error" and last["code"] == "server_stopping", frames[-3:]
    assert not any(f["type"] == "final" for f in frames)
    request_id = next(f["request_id"] for f in frames if f["type"] == "plan")
    record = RequestRecord.objects.get(request_id=request_id)
    assert record.outcome == RequestRecord.Outcome.CANCELLED and record.channel == "web"


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True
