"""Hardening of the chat WebSocket (issue 28): a message that is not JSON is a frame, not a crash."""

from __future__ import annotations

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from assistant.consumers import ChatConsumer
from rag.tests.conftest import make_built_kb

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture
def kb(transactional_db, corpus_copy):
    return make_built_kb(corpus_copy)


@pytest_asyncio.fixture(autouse=True)
async def close_thread_connections():
    yield
    from django.db import connections

    await sync_to_async(connections.close_all)()


@pytest.mark.parametrize("message", ["not json", "{'question': 'hi'}", "  ", "[1, 2", "NaN", "\ud800".encode(
    "utf-8", "surrogatepass").decode("utf-8", "replace")])
async def test_a_message_that_is_not_json_gets_an_invalid_request_frame_and_the_socket_stays_open(kb, message):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_to(text_data=message)
    error = await communicator.receive_json_from(timeout=10)
    await communicator.send_json_to({"question": "Fog 的 near", "kb": "sdk"})
    events = []
    while not events or events[-1]["type"] not in ("final", "error"):
        events.append(await communicator.receive_json_from(timeout=30))
    await communicator.disconnect()

    assert (error["type"], error["code"]) == ("error", "invalid_request")
    assert events[-1]["type"] == "final"


async def test_a_binary_message_gets_an_invalid_request_frame_and_the_socket_stays_open(kb):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    await communicator.connect()

    await communicator.send_to(bytes_data=b"\xff\xfe")
    error = await communicator.receive_json_from(timeout=10)
    await communicator.send_json_to({"question": "Fog 的 near", "kb": "sdk"})
    events = []
    while not events or events[-1]["type"] not in ("final", "error"):
        events.append(await communicator.receive_json_from(timeout=30))
    await communicator.disconnect()

    assert (error["type"], error["code"]) == ("error", "invalid_request")
    assert events[-1]["type"] == "final"
