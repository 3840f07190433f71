"""Streamed answers on threads of their own (issue 16): slow sockets never stall the loop's default executor
(MCP's tool calls run there), answers beyond the pool are told "busy", and an answer past its deadline ends with a
final error frame and is recorded."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from mcp import Client

from apikeys.mcp.server import build_server
from assistant.consumers import ChatConsumer
from rag.models import RequestRecord
from rag.pipeline import reset_engine
from rag.streams import reset_answer_streams
from rag.tests.conftest import make_built_kb

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

QUESTION = "PerspectiveCamera 的 fov 默认值"
LONG_ANSWER = " ".join(["The default fov is 50 degrees [1]."] * 12)  # 84 words: 17 s at the drip's pace


@pytest.fixture
def kb(transactional_db, corpus_copy, settings):
    settings.RAG_DEFAULT_KB = "sdk"
    built = make_built_kb(corpus_copy)
    _ = built.active_version
    return built


@pytest_asyncio.fixture
async def dripping_model(kb, settings, llm_server):
    """A generation model that writes one word every 0.2 s, for every answer."""
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "GENERATION_BASE_URL": llm_server.url, "GENERATION_MODEL": "m"}
    await sync_to_async(cache.clear)()
    reset_engine()
    reset_answer_streams()
    llm_server.replies.extend([("drip", LONG_ANSWER)] * 40)
    yield llm_server
    reset_engine()
    reset_answer_streams()
    from django.db import connections

    await sync_to_async(connections.close_all)()


async def open_answering(count: int) -> list[WebsocketCommunicator]:
    """`count` sockets, each with an answer streaming."""
    sockets = []
    for _ in range(count):
        communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
        await communicator.connect()
        await communicator.send_json_to({"question": QUESTION, "kb": "sdk"})
        sockets.append(communicator)
    for communicator in sockets:
        while (await communicator.receive_json_from(timeout=30))["type"] != "token":
            pass  # this answer is being written now
    return sockets


async def close(sockets):
    for communicator in sockets:
        await communicator.disconnect()


async def test_slow_answer_sockets_do_not_stall_mcp_tool_calls(dripping_model):
    default_threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor on this machine
    sockets = await open_answering(default_threads)
    try:
        started = time.monotonic()
        async with Client(build_server(transport="stdio")) as client:
            result = await asyncio.wait_for(client.call_tool("search_sdk_docs", {"question": "Fog near"}), 10)
        waited = time.monotonic() - started
    finally:
        await close(sockets)
    assert not result.is_error and waited < 5, f"MCP waited {waited:.1f} s behind {default_threads} answers"


async def test_an_answer_beyond_the_answer_threads_is_told_busy(dripping_model, settings):
    settings.RAG_ANSWER_STREAMS = {"THREADS": 1, "DEADLINE": 60.0}
    reset_answer_streams()
    sockets = await open_answering(1)
    late = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await late.connect()
    try:
        await late.send_json_to({"question": QUESTION, "kb": "sdk"})
        refusal = await late.receive_json_from(timeout=5)
    finally:
        await close([*sockets, late])
    assert refusal["type"] == "error" and refusal["code"] == "busy" and refusal["retry_after"] > 0


async def test_an_answer_past_its_deadline_ends_with_an_error_frame_and_is_recorded(dripping_model, settings):
    settings.RAG_ANSWER_STREAMS = {"THREADS": 2, "DEADLINE": 1.5}
    reset_answer_streams()
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()
    await communicator.send_json_to({"question": QUESTION, "kb": "sdk"})
    events = []
    started = time.monotonic()
    while not events or events[-1]["type"] not in ("final", "error"):
        events.append(await communicator.receive_json_from(timeout=10))
    took = time.monotonic() - started
    request_id = next(e["request_id"] for e in events if e["type"] == "plan")

    async def recorded():
        for _ in range(100):
            record = await RequestRecord.objects.filter(request_id=request_id).afirst()
            if record is not None:
                return record
            await asyncio.sleep(0.1)

    record = await recorded()
    await communicator.disconnect()
    assert events[-1]["code"] == "answer_deadline" and took < 5
    assert record is not None and record.outcome == RequestRecord.Outcome.CANCELLED


async def answer_on_a_stalled_model(model) -> tuple[WebsocketCommunicator, list[dict]]:
    """A socket whose answer has begun and whose model has stopped writing mid-answer: (socket, frames so far)."""
    model.replies.insert(0, ("stall", LONG_ANSWER))
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()
    await communicator.send_json_to({"question": QUESTION, "kb": "sdk"})
    events = [await communicator.receive_json_from(timeout=30)]
    while events[-1]["type"] != "token":
        events.append(await communicator.receive_json_from(timeout=30))
    assert await asyncio.to_thread(model.stalled.wait, 30)
    return communicator, events


async def record_of(events: list[dict]) -> RequestRecord | None:
    """The answer's request record, written as its thread ends (waited for up to 30 s)."""
    request_id = next(e["request_id"] for e in events if e["type"] == "plan")
    for _ in range(300):
        record = await RequestRecord.objects.filter(request_id=request_id).afirst()
        if record is not None:
            return record
        await asyncio.sleep(0.1)
    return None


async def test_a_stopping_server_ends_an_answer_with_a_server_stopping_frame_and_hangs_up_on_a_stalled_model(
        dripping_model):
    from rag.streams import answer_streams, stopped

    communicator, events = await answer_on_a_stalled_model(dripping_model)

    await stopped(answer_streams().stop())
    last = await communicator.receive_json_from(timeout=30)
    hung_up = await asyncio.to_thread(dripping_model.closed.wait, 30)
    record = await record_of(events)  # the thread ends within `stopped`'s wait (SHUTDOWN_WAIT)
    await communicator.disconnect()

    assert (last["type"], last["code"], last["retry_after"]) == ("error", "server_stopping", 5)
    assert hung_up and record is not None and record.outcome == RequestRecord.Outcome.CANCELLED


async def test_a_socket_that_closes_mid_answer_hangs_up_on_a_stalled_model_at_once(dripping_model):
    communicator, events = await answer_on_a_stalled_model(dripping_model)

    await communicator.disconnect()

    # The model's read timeout (minutes) is far above this wait: only a hang-up closes its connection in time.
    assert await asyncio.to_thread(dripping_model.closed.wait, 30)
    record = await record_of(events)
    assert record is not None and record.outcome == RequestRecord.Outcome.CANCELLED
