"""The chat WebSocket: events in order, the same final object as /api/chat, validation errors as frames."""

from __future__ import annotations

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache

from assistant.consumers import ChatConsumer
from rag.models import IndexVersion, RequestRecord
from rag.pipeline import reset_engine
from rag.services.knowledge import BUILDING_RETRY_AFTER
from rag.tests.conftest import make_built_kb, make_kb

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture
def kb(transactional_db, corpus_copy):
    return make_built_kb(corpus_copy)


@pytest_asyncio.fixture(autouse=True)
async def close_thread_connections():
    """sync_to_async runs ORM calls on its own thread; close that thread's connections after each test,
    or PostgreSQL refuses to drop the test database while they stay open."""
    yield
    from django.db import connections

    await sync_to_async(connections.close_all)()


async def collect(communicator, until="final"):
    events = []
    while True:
        event = await communicator.receive_json_from(timeout=30)
        events.append(event)
        if event["type"] in (until, "error"):
            return events


async def test_a_question_streams_plan_retrieval_tokens_and_final(kb):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_json_to({"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"})
    events = await collect(communicator)
    await communicator.disconnect()

    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["plan", "retrieval"] and "token" in kinds and kinds[-1] == "final"
    final = events[-1]
    assert final["mode"] == "extractive" and final["citations"]
    record = await sync_to_async(RequestRecord.objects.get)(request_id=final["request_id"])
    assert record.channel == "web" and record.kind == "chat"


async def test_a_streamed_model_answer_arrives_token_by_token(kb, settings, llm_server):
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "GENERATION_BASE_URL": llm_server.url, "GENERATION_MODEL": "m"}
    await sync_to_async(cache.clear)()
    reset_engine()
    llm_server.replies.append(("ok", "The default fov is 50 degrees [1]."))
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_json_to({"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"})
    events = await collect(communicator)
    await communicator.disconnect()
    reset_engine()

    tokens = [e["text"] for e in events if e["type"] == "token"]
    assert len(tokens) > 3 and "".join(tokens) == "The default fov is 50 degrees [1]."
    assert events[-1]["mode"] == "llm" and llm_server.calls[0]["body"]["stream"] is True


async def test_bad_input_gets_an_error_frame_and_the_socket_stays_open(kb):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_json_to({"question": ""})
    error = await communicator.receive_json_from(timeout=10)
    await communicator.send_json_to({"question": "Fog 的 near", "kb": "sdk"})
    events = await collect(communicator)
    await communicator.disconnect()

    assert (error["type"], error["code"]) == ("error", "invalid_question")
    assert events[-1]["type"] == "final"


async def test_a_question_while_the_first_index_builds_gets_retry_after_like_the_http_503(corpus_copy, client):
    kb = await sync_to_async(make_kb)(corpus_copy)
    await sync_to_async(IndexVersion.objects.create)(kb=kb, name="first", model_id="m", progress_done=41,
                                                     progress_total=100)
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_json_to({"question": "PerspectiveCamera fov", "kb": "sdk"})
    error = await communicator.receive_json_from(timeout=10)
    await communicator.disconnect()
    response = await sync_to_async(client.post)("/api/chat", {"question": "PerspectiveCamera fov", "kb": "sdk"},
                                                content_type="application/json")

    assert (error["type"], error["code"]) == ("error", "index_building") and "41%" in error["message"]
    assert error["retry_after"] == BUILDING_RETRY_AFTER == int(response["Retry-After"])
    assert response.status_code == 503


async def test_closing_the_socket_mid_answer_stops_the_model_stream(kb, settings, llm_server):
    import asyncio

    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "GENERATION_BASE_URL": llm_server.url, "GENERATION_MODEL": "m"}
    await sync_to_async(cache.clear)()
    reset_engine()
    words = " ".join(f"word{i}" for i in range(40))
    llm_server.replies.append(("drip", words + " [1]"))
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_json_to({"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"})
    while (await communicator.receive_json_from(timeout=30))["type"] != "token":
        pass
    await communicator.disconnect()
    await asyncio.sleep(1.5)
    reset_engine()

    assert len(llm_server.sent) < 20, "the model kept streaming after the reader left"
    record = await sync_to_async(RequestRecord.objects.get)()
    assert record.error_code == "cancelled"


@pytest.mark.parametrize("frame", [{"text_data": m} for m in (
    "not json", "{'question': 'hi'}", "  ", "[1, 2", "NaN",
    "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"))] + [{"bytes_data": b"\xff\xfe"}])
async def test_a_message_that_is_not_a_json_object_gets_an_invalid_request_frame_and_the_socket_stays_open(kb, frame):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_to(**frame)
    error = await communicator.receive_json_from(timeout=10)
    await communicator.send_json_to({"question": "Fog 的 near", "kb": "sdk"})
    events = []
    while not events or events[-1]["type"] not in ("final", "error"):
        events.append(await communicator.receive_json_from(timeout=30))
    await communicator.disconnect()

    assert (error["type"], error["code"]) == ("error", "invalid_request")
    assert events[-1]["type"] == "final"
