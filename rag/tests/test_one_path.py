"""Every face asks through the one question path: the same question leaves the same record whatever the channel
(web API, WebSocket, MCP, CLI, eval run, replay), and a bad one leaves a failure record on every channel."""

from __future__ import annotations

import io
import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from mcp import Client

from apikeys.mcp.server import build_server
from assistant.consumers import ChatConsumer
from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_create, eval_run_execute
from opsboard.services import replay_request
from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"
# What the engine and the policy decided: identical for one question on every channel.
SAME = ("kind", "kb", "index_version", "question", "plan", "retrieved", "adopted", "excluded", "hit_count",
        "outcome", "error_code", "reason", "answer", "citations", "confidence", "mode", "degraded")


@pytest.fixture
def kb(corpus_copy, settings):
    settings.RAG_DEFAULT_KB = "sdk"
    return make_built_kb(corpus_copy)


def web_api(client, kind: str, question: str) -> str | None:
    response = client.post("/api/search" if kind == "search" else "/api/chat", {"question": question, "kb": "sdk"},
                           content_type="application/json")
    return response.json().get("request_id")


def websocket(kind: str, question: str) -> str | None:
    async def ask():
        communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
        await communicator.connect()
        await communicator.send_json_to({"question": question, "kb": "sdk"})
        while (event := await communicator.receive_json_from(timeout=30))["type"] not in ("final", "error"):
            pass
        await communicator.disconnect()
        return event.get("request_id")

    return async_to_sync(ask)()


def mcp(kind: str, question: str) -> str | None:
    async def call():
        async with Client(build_server(transport="stdio")) as client:
            result = await client.call_tool("search_sdk_docs" if kind == "search" else "ask_sdk_docs",
                                            {"question": question, "kb": "sdk"})
        return None if result.is_error else result.structured_content["request_id"]

    return async_to_sync(call)()


def cli(kind: str, question: str) -> str | None:
    out = io.StringIO()
    try:
        call_command("rag", "search" if kind == "search" else "ask", question, "--kb", "sdk", "--json", stdout=out)
    except SystemExit:
        pass
    return json.loads(out.getvalue()).get("request_id")


def evaluation(kind: str, question: str) -> str | None:
    item = {"id": "q1", "question": question, "answerable": True, "expected_classes": ["PerspectiveCamera"],
            "expected_members": [], "kb": "sdk", "layer": "plain"}
    golden_set = golden_import(name=f"one-path-{kind}", kind="retrieval" if kind == "search" else "generation",
                               text=json.dumps(item, ensure_ascii=False))
    try:
        run = eval_run_execute(eval_run_create(golden_set=golden_set, kb="sdk").pk)
    except Exception:  # noqa: BLE001 - a question the service refuses fails the run; its record is what counts
        return None
    return run.results.get().request_id


FACES = {"web": web_api, "mcp": mcp, "cli": cli, "eval": evaluation}


def latest(channel: str) -> RequestRecord:
    return RequestRecord.objects.filter(channel=channel).latest("id")


@pytest.mark.parametrize("kind", ["search", "chat"])
def test_the_same_question_leaves_the_same_record_on_every_channel(kb, client, kind):
    request_ids = {channel: (face(client, kind, QUESTION) if face is web_api else face(kind, QUESTION))
                   for channel, face in FACES.items()}
    if kind == "chat":
        request_ids["web (socket)"] = websocket(kind, QUESTION)
    replay = replay_request(request_ids["web"])["runs"]  # against the recorded version and the active one
    request_ids["replay"], request_ids["replay (recorded)"] = replay["active"]["request_id"], replay["recorded"][
        "request_id"]

    records = {name: RequestRecord.objects.get(request_id=request_id) for name, request_id in request_ids.items()}
    reference = records["cli"]
    assert reference.hit_count > 0 and reference.outcome in ("ok", "low") and reference.adopted
    for name, record in records.items():
        assert {f: getattr(record, f) for f in SAME} == {f: getattr(reference, f) for f in SAME}, name
    assert {name: r.channel for name, r in records.items()} == {
        "web": "web", "mcp": "mcp", "cli": "cli", "eval": "eval", "replay": "eval", "replay (recorded)": "eval",
        **({"web (socket)": "web"} if kind == "chat" else {})}
    assert records["mcp"].tool == ("search_sdk_docs" if kind == "search" else "ask_sdk_docs")
    assert RequestRecord.objects.count() == len(records)  # one record per request, no more


@pytest.mark.parametrize("kind", ["search", "chat"])
def test_a_bad_question_leaves_a_failure_record_on_every_channel(kb, client, kind):
    too_long = "雾" * 2001

    named = web_api(client, kind, too_long)  # the error body names the failure's record
    for face in (mcp, cli, evaluation):
        face(kind, too_long)
    if kind == "chat":
        websocket(kind, too_long)

    failures = RequestRecord.objects.filter(error_code="question_too_long")
    assert named == failures.get(channel="web", request_id=named).request_id
    assert sorted(failures.values_list("channel", flat=True)) == sorted(
        ["web", "mcp", "cli", "eval"] + (["web"] if kind == "chat" else []))
    assert {(r.kind, r.outcome, len(r.question)) for r in failures} == {(kind, "failed", 2000)}


def test_replaying_a_failed_request_fails_the_same_way_as_eval_traffic(kb):
    async_to_sync(_call_search_with)({"question": QUESTION, "kb": "sdk", "top_k": 0})
    mcp_bad_top_k = latest("mcp")

    replay = replay_request(mcp_bad_top_k.request_id)

    assert "invalid_top_k" in replay["runs"]["active"]["error"]
    replayed = latest("eval")
    assert (replayed.error_code, replayed.outcome, replayed.question) == ("invalid_top_k", "failed", QUESTION)


async def _call_search_with(arguments: dict) -> None:
    async with Client(build_server(transport="stdio")) as client:
        await client.call_tool("search_sdk_docs", arguments)
