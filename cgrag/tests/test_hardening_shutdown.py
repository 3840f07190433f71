"""Issue 28, a stopping server (SIGTERM) during rag/stream: the stream ends with its `error` (`server_stopping`) and
`final` events, the model call is hung up on even while the model stalls, the request is recorded as cancelled,
and Daphne exits within seconds. The model is the real local fake of conftest.py, stalling after its first word
for far longer than any wait here, so nothing passes by waiting for it: every wait below is for an event that
follows the hangup within milliseconds, bounded only so that a regression fails instead of hanging."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time

import httpx2
import pytest

from cgrag.tests.test_hardening_streams import frames
from cgrag.tests.test_live import sse_events
from conftest import STALL_LIMIT
from rag.models import Channel, RequestRecord
from rag.tests.live import ROOT, free_port, project_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"
WAIT = 60  # seconds any wait below may take at most; what it waits for comes milliseconds after the hangup
READ_TIMEOUT = 2 * WAIT  # the model client's: above every wait, so that no test here passes by the client giving up


@pytest.fixture
def answer_pool(settings):
    """A fresh pool of answer threads for this process (a stopped pool starts nothing), forgotten afterwards."""
    from rag.streams import answer_streams, reset_answer_streams

    settings.RAG_ANSWER_STREAMS = {"THREADS": 2, "DEADLINE": float(STALL_LIMIT)}
    reset_answer_streams()
    yield answer_streams()
    reset_answer_streams()


@pytest.fixture
def stalling_model(sdk_kb, engine_settings, llm_server):
    """A generation model that writes its first word and then nothing, longer than its client's read timeout."""
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="m", GENERATION_READ_TIMEOUT=READ_TIMEOUT)
    llm_server.replies.append(("stall", '{"indices": [1]}'))
    return llm_server


def asgi_stream(body: dict) -> tuple[dict, bytes]:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/cg-rag/rag/stream", "raw_path": b"/cg-rag/rag/stream", "query_string": b"", "root_path": "",
             "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                         (b"x-request-id", b"req-stop")]}
    return scope, json.dumps(body).encode()


async def stream_stopped_mid_answer(model, stop: str) -> bytes:
    """POST rag/stream to the site's ASGI application, stop the server once the model stalls (`stop`: "signal",
    what Daphne's shutdown trigger does, or "cancel", the server cancelling the application), and return the
    body, read to its end."""
    from ragsite.asgi import application

    scope, body = asgi_stream({"query": QUESTION, "scope": "sdk", "topk": 3})
    inbox: asyncio.Queue = asyncio.Queue()
    sent: asyncio.Queue = asyncio.Queue()
    await inbox.put({"type": "http.request", "body": body, "more_body": False})
    served = asyncio.create_task(application(scope, inbox.get, sent.put))  # the client stays: no disconnect
    assert await asyncio.to_thread(model.stalled.wait, WAIT), "the model was not asked"
    if stop == "signal":
        from rag.streams import answer_streams, stopped

        await stopped(answer_streams().stop())
    else:
        served.cancel()
    received = b""
    while True:
        message = await asyncio.wait_for(sent.get(), WAIT)
        if message["type"] == "http.response.body":
            received += message.get("body", b"")
            if not message.get("more_body", False):
                break
    try:
        await asyncio.wait_for(served, WAIT)
    except asyncio.CancelledError:
        assert stop == "cancel"
    return received


@pytest.mark.parametrize("stop", ["signal", "cancel"])
def test_a_stopping_server_ends_a_stream_with_error_then_final_and_hangs_up_on_a_stalled_model(
        stop, stalling_model, answer_pool):
    body = asyncio.run(stream_stopped_mid_answer(stalling_model, stop))

    events = frames([body])
    assert [name for name, _ in events][-2:] == ["error", "final"], events
    error, final = events[-2][1], events[-1][1]
    assert (error["code"], error["retryable"], error["details"], error["request_id"]) == (
        "server_stopping", True, {"retry_after": 5}, "req-stop")
    assert final["generation"]["ok"] is False and final["generation"]["error"]["code"] == "server_stopping"
    assert final["retrieval"]["num_docs"] > 0 and final["request_id"] == "req-stop"  # the retrieval already sent
    assert stalling_model.closed.wait(WAIT), "the model's connection stayed open"
    record = wait_for(lambda: RequestRecord.objects.filter(channel=Channel.CGRAG).first(), WAIT, "the record")
    assert record.outcome == RequestRecord.Outcome.CANCELLED
    wait_for(lambda: answer_pool.in_use() == 0, WAIT, "the answer thread to be given back")


def test_a_stream_asked_for_while_the_server_stops_ends_at_once_without_asking_the_model(
        client, sdk_kb, engine_settings, llm_server, answer_pool):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="m")
    answer_pool.stop()

    response = client.post("/cg-rag/rag/stream", data=json.dumps({"query": QUESTION, "scope": "sdk"}),
                           content_type="application/json")
    events = frames(response)

    assert response.status_code == 200 and [name for name, _ in events] == ["error", "final"]
    assert events[0][1]["code"] == "server_stopping" and events[1][1]["generation"]["error"]["code"] == "server_stopping"
    assert llm_server.calls == [] and answer_pool.in_use() == 0


@pytest.mark.slow
def test_sigterm_during_rag_stream_ends_it_with_error_and_final_and_daphne_exits_in_seconds(sdk_kb, llm_server):
    from rag.streams import SHUTDOWN_WAIT

    llm_server.replies.append(("stall", '{"indices": [1]}'))
    port = free_port()
    env = project_env(RAG_GENERATION_BASE_URL=llm_server.url, RAG_GENERATION_MODEL="m", RAG_WARM_UP="false",
                      RAG_GENERATION_READ_TIMEOUT=str(STALL_LIMIT), RAG_CGRAG_STREAM_TOKEN_DELAY="0")
    launched = time.monotonic()
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "ragsite.asgi:application"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as http:
            wait_for(lambda: _answers(http), WAIT * 3, "Daphne to answer")
            # The work of a start (the interpreter, Django, the engine's imports) measures this machine as it is
            # now: an exit undoes that much, after the answers' own bounded wait.
            deadline = SHUTDOWN_WAIT + (time.monotonic() - launched)
            with http.stream("POST", "/cg-rag/rag/stream", headers={"X-Request-ID": "req-sigterm"},
                             json={"query": QUESTION, "scope": "sdk", "topk": 3}) as response:
                assert response.status_code == 200
                assert llm_server.stalled.wait(WAIT), "the model was not asked"
                server.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                events = sse_events(response)
        try:
            server.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Daphne still ran {deadline:.1f} s after SIGTERM")
        took = time.monotonic() - signalled
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    names = [name for name, _ in events]
    assert names[-2:] == ["error", "final"] and "retrieval" in names, names
    assert events[-2][1]["code"] == "server_stopping" and events[-1][1]["request_id"] == "req-sigterm"
    assert llm_server.closed.is_set(), "the model's connection stayed open"
    assert RequestRecord.objects.get(channel=Channel.CGRAG).outcome == RequestRecord.Outcome.CANCELLED
    print(f"Daphne exited {took:.2f} s after SIGTERM (deadline {deadline:.1f} s)")


def _answers(http) -> bool:
    try:
        return http.get("/healthz").status_code == 200
    except httpx2.TransportError:
        return False
