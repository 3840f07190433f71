"""/api/chat has a total deadline and stops the model call when its client leaves (issue 28). The model is the real
local fake of conftest.py, dripping one word every 0.2 s for a minute: nothing here waits for it to finish."""

from __future__ import annotations

import asyncio
import json

import pytest

from rag.models import RequestRecord
from rag.tests.live import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "PerspectiveCamera 的 fov 默认值"
LONG_ANSWER = " ".join(f"word{i}" for i in range(300)) + " [1]"


def test_a_chat_that_runs_past_its_deadline_is_a_504_and_the_model_is_hung_up_on(client, kb, with_model, settings):
    settings.RAG_CHAT_DEADLINE_SECONDS = 1
    with_model.replies.append(("drip", LONG_ANSWER))

    response = client.post("/api/chat", {"question": QUESTION, "kb": "sdk"}, content_type="application/json")

    assert (response.status_code, response.json()["code"]) == (504, "answer_deadline")
    if with_model.calls:  # on a loaded machine the deadline may pass before the model is asked
        wait_for(lambda: with_model.hung_up, 60, "the model to be hung up on")
        assert len(with_model.sent) < 300
    assert RequestRecord.objects.get().outcome in (RequestRecord.Outcome.CANCELLED, RequestRecord.Outcome.FAILED)


def test_a_client_that_leaves_mid_chat_cancels_the_model_call(kb, with_model, settings):
    settings.RAG_CHAT_DEADLINE_SECONDS = 600
    with_model.replies.append(("drip", LONG_ANSWER))
    from ragsite.asgi import application

    async def leave_mid_answer() -> list[dict]:
        inbox: asyncio.Queue = asyncio.Queue()
        sent: list[dict] = []
        body = json.dumps({"question": QUESTION, "kb": "sdk"}).encode()
        await inbox.put({"type": "http.request", "body": body, "more_body": False})

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/api/chat", "raw_path": b"/api/chat", "query_string": b"",
                 "root_path": "", "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
                 "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())]}
        served = asyncio.create_task(application(scope, inbox.get, send))
        while not with_model.sent:  # the model has begun to answer
            await asyncio.sleep(0.05)
        await inbox.put({"type": "http.disconnect"})
        await asyncio.wait_for(served, 120)
        return sent

    asyncio.run(leave_mid_answer())

    wait_for(lambda: with_model.hung_up, 60, "the model to be hung up on")
    assert len(with_model.sent) < 300
    record = wait_for(lambda: RequestRecord.objects.filter(outcome=RequestRecord.Outcome.CANCELLED).first(), 60,
                      "the request to be recorded as cancelled")
    assert record.channel == "web" and record.kind == "chat"
