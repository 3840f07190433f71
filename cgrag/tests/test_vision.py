"""CG_RAG's vision routes (seed 004's vision/*) against a real local fake multimodal upstream: validation,
not configured, each route's success, observe's parse_status, upstream failures, the agentic [cite^n]
mapping, one record per request, an agentic search that finds the index building counting against no limit, and
the SSE streams (answer_reset on a cut stream) on a live Daphne."""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass, field

import pytest

from cgrag.tests.test_hardening_streams import frames
from cgrag.tests.test_live import sse_events
from conftest import JsonHandler, local_moment, serve_on_loopback
from rag.models import Channel, RequestRecord
from rag.tests.live import daphne

pytestmark = pytest.mark.django_db(transaction=True)

PNG_1X1 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
DATA_URL = f"data:image/png;base64,{PNG_1X1}"
ROUTES = ["answer", "answer/stream", "observe", "agentic", "agentic/stream"]


@dataclass
class VisionServer:
    """Script the fake upstream: `replies` is a queue of (kind, text) consumed per call.

    kinds: "text" (answer `text`, whole or as SSE word by word), "500", "slow" (sleep `delay` s, then "text"),
    "cut" (stream half of `text`'s words, then hang up mid-body). With nothing scripted: "text" of `default`.
    Every call is kept; `image_errors` lists the calls whose image_url parts were not PNG data URLs."""

    url: str
    replies: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    image_errors: list = field(default_factory=list)
    default: str = "ok"
    delay: float = 1.5


def _check_images(body: dict) -> str:
    """'' when the user message carries a text part and PNG image_url data URLs, else what is wrong."""
    user = [m for m in body.get("messages", []) if m.get("role") == "user" and isinstance(m.get("content"), list)]
    if not user:
        return "no multimodal user message"
    parts = user[0]["content"]
    images = [p for p in parts if p.get("type") == "image_url"]
    if not any(p.get("type") == "text" for p in parts) or not images:
        return "missing text or image_url part"
    for part in images:
        url = part["image_url"]["url"]
        if not url.startswith("data:image/png;base64,"):
            return f"bad url {url[:40]}"
        if not base64.b64decode(url.split(",", 1)[1]).startswith(b"\x89PNG"):
            return "not a png"
    return ""


@pytest.fixture
def vision_server():
    state = VisionServer(url="")

    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - the http.server API
            body = self.read_json()
            state.calls.append({"path": self.path, "headers": dict(self.headers), "body": body})
            problem = _check_images(body)
            if problem:
                state.image_errors.append(problem)
            kind, text = state.replies.pop(0) if state.replies else ("text", state.default)
            if self.path != "/v1/chat/completions":
                return self.send_json(404, {"error": "not found"})
            if kind == "500":
                return self.send_json(500, {"error": {"message": "upstream exploded"}})
            if kind == "slow":
                time.sleep(state.delay)
            usage = {"prompt_tokens": 300, "completion_tokens": 7}
            if not body.get("stream"):
                return self.send_json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                         "finish_reason": "stop"}], "usage": usage})
            words = re.findall(r"\S+\s*", text)
            if kind == "cut":
                return self._chunked([_delta(w) for w in words[: max(1, len(words) // 2)]], finish=False)
            return self._chunked([_delta(w) for w in words] + [json.dumps({"choices": [], "usage": usage}), "[DONE]"])

        def _chunked(self, events, *, finish=True):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in events:
                raw = f"data: {event}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()
            if finish:
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

    with serve_on_loopback(Handler) as url:
        state.url = url
        yield state


def _delta(word: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": word}}]})


@pytest.fixture
def vision(settings, vision_server):
    """RAG_VISION pointing at the fake upstream (small limits so the tests can reach them)."""
    settings.RAG_VISION = {**settings.RAG_VISION, "BASE_URL": vision_server.url, "MODEL": "qwen-vl-test",
                           "API_KEY": "sk-vision", "TIMEOUT": 5.0, "MAX_IMAGES": 2, "MAX_IMAGE_BYTES": 4096,
                           "LABELS": [], "AGENTIC_MAX_SEARCH_ROUNDS": 2, "AGENTIC_RETRIEVAL_TOPK": 3}
    return vision_server


def post(client, route: str, body: dict, **headers):
    return client.post(f"/cg-rag/vision/{route}", data=json.dumps(body), content_type="application/json", **headers)


# -- validation and configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_answers_503_when_no_upstream_is_configured(client, settings, sdk_kb, route):
    settings.RAG_VISION = {**settings.RAG_VISION, "BASE_URL": "", "MODEL": ""}

    response = post(client, route, {"images": [PNG_1X1]}, HTTP_X_REQUEST_ID="req-vision-off")

    assert response.status_code == 503
    assert response.json() == {"request_id": "req-vision-off", "error": {
        "code": "vision_not_configured", "message": response.json()["error"]["message"], "details": {}}}
    record = RequestRecord.objects.get()
    assert (record.channel, record.error_code) == (Channel.CGRAG, "vision_not_configured")


@pytest.mark.parametrize(("images", "index", "reason"), [
    (["!!!not base64!!!"], 0, "invalid_base64"),
    ([PNG_1X1, PNG_1X1, PNG_1X1], 2, "too_many_images"),
    ([PNG_1X1, base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 5000).decode()], 1, "too_large"),
    ([base64.b64encode(b"just some text, not a picture").decode()], 0, "unsupported_type"),
    ([""], 0, "empty"),
])
def test_a_bad_image_is_a_400_invalid_image_naming_it(client, vision, images, index, reason):
    response = post(client, "answer", {"images": images})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_image"
    assert response.json()["error"]["details"] == {"index": index, "reason": reason}
    assert vision.calls == []


def test_images_are_checked_before_the_configuration(client, settings):
    settings.RAG_VISION = {**settings.RAG_VISION, "BASE_URL": "", "MODEL": ""}

    response = post(client, "observe", {"images": ["bm90IGFuIGltYWdl"]})

    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_image")


@pytest.mark.parametrize("body", [
    {"images": []},
    {"images": "iVBOR"},
    {"images": [PNG_1X1], "include_debug": "true"},
    {"images": [PNG_1X1], "generation_enable_thinking": 1},
    {"query": "no images"},
])
def test_a_body_of_the_wrong_shape_is_a_400_invalid_request(client, vision, body):
    response = post(client, "answer", body)

    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_request")
    assert response.json()["error"]["details"]["errors"][0]["loc"]


# -- answer ---------------------------------------------------------------------------------------------------


def test_answer_sends_the_screenshot_to_the_model_and_returns_its_text(client, vision):
    vision.replies = [("text", "<think>read the trace</think>The error means fov must be a Number.")]

    response = post(client, "answer", {"images": [DATA_URL], "query": "  这个报错是什么意思？ ", "include_debug": True},
                    HTTP_X_REQUEST_ID="req-vision-answer")

    body = response.json()
    assert response.status_code == 200 and response["X-Request-ID"] == "req-vision-answer"
    assert body == {"ok": True, "request_id": "req-vision-answer", "generation_mode": "vision_answer",
                    "answer_text": "The error means fov must be a Number.", "thinking": "read the trace",
                    "generation_enable_thinking": False,
                    "usage": {"prompt_tokens": 300, "completion_tokens": 7, "total_tokens": 307}}
    call = vision.calls[0]
    assert vision.image_errors == [] and call["headers"]["Authorization"] == "Bearer sk-vision"
    assert call["body"]["model"] == "qwen-vl-test" and "chat_template_kwargs" not in call["body"]
    assert call["body"]["messages"][1]["content"][0] == {"type": "text", "text": "这个报错是什么意思？"}
    record = RequestRecord.objects.get()
    assert (record.channel, record.question, record.mode, record.error_code) == (
        Channel.CGRAG, "这个报错是什么意思？", "vision_answer", "")
    assert record.arguments["route"] == "vision/answer" and record.arguments["num_images"] == 1


def test_answer_hides_thinking_without_include_debug_and_switches_it_on_per_request(client, vision):
    vision.replies = [("text", "<think>secret</think>Use camera.updateProjectionMatrix().")]

    body = post(client, "answer", {"images": [PNG_1X1], "generation_enable_thinking": True}).json()

    assert body["thinking"] == "" and body["generation_enable_thinking"] is True
    assert vision.calls[0]["body"]["chat_template_kwargs"] == {"enable_thinking": True}


def test_an_upstream_500_is_a_502_vision_upstream_error(client, vision):
    vision.replies = [("500", "")]

    response = post(client, "answer", {"images": [PNG_1X1]})

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "vision_upstream_error"
    assert response.json()["error"]["details"] == {"kind": "http"}
    assert RequestRecord.objects.get().error_code == "vision_upstream_error"


def test_a_model_that_keeps_failing_is_not_called_until_its_breaker_cools_down(client, vision, settings):
    threshold = settings.RAG_ENGINE["BREAKER_THRESHOLD"]
    vision.replies = [("500", "")] * threshold

    failed = [post(client, "answer", {"images": [PNG_1X1]}).status_code for _ in range(threshold)]
    skipped = post(client, "observe", {"images": [PNG_1X1]})

    assert failed == [502] * threshold and len(vision.calls) == threshold
    assert skipped.status_code == 503 and skipped["Retry-After"] == str(settings.RAG_ENGINE["BREAKER_COOLDOWN"])
    assert skipped.json()["error"] | {"message": ""} == {"code": "vision_upstream_error", "message": "",
                                                         "details": {"kind": "circuit_open"}}


def test_an_upstream_that_does_not_answer_in_time_is_a_502(client, vision, settings):
    settings.RAG_VISION = {**settings.RAG_VISION, "TIMEOUT": 0.3}
    vision.replies = [("slow", "too late")]

    response = post(client, "answer", {"images": [PNG_1X1]})

    assert response.status_code == 502
    assert response.json()["error"] | {"message": ""} == {"code": "vision_upstream_error", "message": "",
                                                          "details": {"kind": "timeout"}}


def test_an_empty_answer_is_a_502_vision_response_invalid(client, vision):
    vision.replies = [("text", "<think>nothing</think>")]

    response = post(client, "answer", {"images": [PNG_1X1]})

    assert (response.status_code, response.json()["error"]["code"]) == (502, "vision_response_invalid")


# -- observe --------------------------------------------------------------------------------------------------


def test_observe_returns_the_labels_and_description(client, vision):
    vision.replies = [("text", '{"labels": ["error_message", "stack_trace"], "description": "A TypeError."}')]

    response = post(client, "observe", {"images": [PNG_1X1], "include_debug": True})

    body = response.json()
    assert response.status_code == 200
    assert body | {"request_id": "", "raw": ""} == {
        "ok": True, "request_id": "", "labels": ["error_message", "stack_trace"], "description": "A TypeError.",
        "parse_status": "ok", "dropped_labels": [], "raw": "",
        "usage": {"prompt_tokens": 300, "completion_tokens": 7, "total_tokens": 307}}
    assert json.loads(body["raw"])["labels"] == ["error_message", "stack_trace"]
    call = vision.calls[0]["body"]
    assert call["response_format"] == {"type": "json_object"}
    assert "error_message, stack_trace, code, ui_screenshot, console_log, diagram, other" in call["messages"][0]["content"]


def test_observe_drops_labels_outside_the_label_set_as_partial(client, vision):
    vision.replies = [("text", '```json\n{"labels": ["code", "hazard", 7], "description": "A snippet."}\n```')]

    body = post(client, "observe", {"images": [PNG_1X1]}).json()

    assert (body["labels"], body["parse_status"], body["dropped_labels"]) == (["code"], "partial", ["hazard", 7])
    assert "raw" not in body
    assert RequestRecord.objects.get().degraded is True


def test_observe_uses_the_configured_label_set(client, vision, settings):
    settings.RAG_VISION = {**settings.RAG_VISION, "LABELS": ["crash", "layout"]}
    vision.replies = [("text", '{"labels": ["layout", "code"], "description": ""}')]

    body = post(client, "observe", {"images": [PNG_1X1]}).json()

    assert (body["labels"], body["dropped_labels"], body["parse_status"]) == (["layout"], ["code"], "partial")


@pytest.mark.parametrize("reply", ["I see a stack trace.", '{"labels": ["nonsense"], "description": ""}', "[1, 2]"])
def test_observe_with_nothing_usable_is_a_502_vision_response_invalid(client, vision, reply):
    vision.replies = [("text", reply)]

    response = post(client, "observe", {"images": [PNG_1X1]})

    assert (response.status_code, response.json()["error"]["code"]) == (502, "vision_response_invalid")
    assert RequestRecord.objects.get().error_code == "vision_response_invalid"


# -- agentic --------------------------------------------------------------------------------------------------


def test_agentic_searches_then_cites_the_references_it_was_given(client, vision, sdk_kb):
    vision.replies = [("text", '{"search": "PerspectiveCamera fov"}'),
                      ("text", '{"answer": "fov 是视野角度 [cite^1]，见构造函数 [cite^2]。另见 [cite^99]。"}')]

    response = post(client, "agentic", {"images": [PNG_1X1], "query": "相机参数报错", "scope": "sdk",
                                        "include_debug": True}, HTTP_X_REQUEST_ID="req-agentic")

    body = response.json()
    assert response.status_code == 200, body
    assert (body["ok"], body["request_id"], body["generation_mode"]) == (True, "req-agentic", "vision_agentic")
    assert body["answer_text"] == "fov 是视野角度 [cite^1]，见构造函数 [cite^2]。另见。"
    assert body["dropped_citations"] == [99]
    assert body["rounds"] == [{"query": "PerspectiveCamera fov", "num_docs": len(body["references"])}]
    assert 2 <= len(body["references"]) <= 3
    assert [doc["rank"] for doc in body["references"]] == list(range(1, len(body["references"]) + 1))
    assert {"law_name", "article_number", "contents", "chunk_id"} <= set(body["references"][0])
    assert any("PerspectiveCamera" in doc["contents"] + doc["law_name"] for doc in body["references"])
    fed_back = vision.calls[1]["body"]["messages"][-1]["content"]
    assert "[cite^1]" in fed_back and body["references"][0]["contents"][:40] in fed_back
    assert vision.calls[0]["body"]["response_format"] == {"type": "json_object"} and vision.image_errors == []
    assert body["usage"]["total_tokens"] == 2 * 307
    record = RequestRecord.objects.get()  # the searches are part of the one record
    assert (record.channel, record.mode, record.error_code) == (Channel.CGRAG, "vision_agentic", "")
    assert [c["number"] for c in record.citations] == [1, 2]
    assert record.citations[0]["chunk_id"] == body["references"][0]["chunk_id"]


def test_agentic_forces_an_answer_when_the_search_rounds_run_out(client, vision, sdk_kb, settings):
    settings.RAG_VISION = {**settings.RAG_VISION, "AGENTIC_MAX_SEARCH_ROUNDS": 1}
    vision.replies = [("text", '{"search": "fov"}'), ("text", '{"answer": "See [cite^1]."}')]

    body = post(client, "agentic", {"images": [PNG_1X1]}).json()

    assert body["answer_text"] == "See [cite^1]." and len(body["rounds"]) == 1
    assert len(vision.calls) == 2
    assert "No more searches" in vision.calls[1]["body"]["messages"][-1]["content"]


def test_agentic_that_answers_at_once_has_no_references_and_no_citation(client, vision, sdk_kb):
    vision.replies = [("text", '{"answer": "This is a layout screenshot [cite^1]."}')]

    body = post(client, "agentic", {"images": [PNG_1X1]}).json()

    assert (body["answer_text"], body["references"], body["rounds"]) == ("This is a layout screenshot.", [], [])


@pytest.mark.parametrize("reply", ["not json", '{"search": ""}', '{"nothing": 1}'])
def test_agentic_with_an_unusable_step_is_a_502(client, vision, sdk_kb, reply):
    vision.replies = [("text", reply)]

    response = post(client, "agentic", {"images": [PNG_1X1]})

    assert (response.status_code, response.json()["error"]["code"]) == (502, "vision_response_invalid")


def test_agentic_with_an_unknown_scope_is_a_400(client, vision, sdk_kb):
    response = post(client, "agentic", {"images": [PNG_1X1], "scope": "nope"})

    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_request")
    assert vision.calls == []


NOON = pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)


@NOON
def test_an_agentic_answer_whose_search_finds_the_index_building_counts_against_no_limit(client, vision, building_kb,
                                                                                         settings):
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, "CGRAG_GENERATE_PER_MINUTE": 1}
    vision.default = '{"search": "PerspectiveCamera fov"}'

    replies = [post(client, "agentic", {"images": [PNG_1X1], "scope": "sdk"}) for _ in range(2)]

    assert [(r.status_code, r.json()["error"]["code"]) for r in replies] == [(503, "index_building")] * 2


@NOON
def test_an_agentic_answer_over_a_scope_still_building_calls_no_model_and_spends_no_token_share(
        client, vision, building_kb, settings):
    settings.RAG_CGRAG_TOKEN_POOL, settings.RAG_CGRAG_TOKEN_ESTIMATE = 10_000, 3_000
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, "TOKEN_SHARE": 0.5}  # one estimate at a time
    vision.default = '{"search": "PerspectiveCamera fov"}'

    replies = [post(client, "agentic", {"images": [PNG_1X1], "scope": "sdk"}) for _ in range(3)]

    assert [(r.status_code, r.json()["error"]["code"]) for r in replies] == [(503, "index_building")] * 3
    assert vision.calls == []


@NOON
def test_an_agentic_stream_whose_search_finds_the_index_building_counts_against_no_limit(client, vision, building_kb,
                                                                                         settings):
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, "CGRAG_GENERATE_PER_MINUTE": 1}
    vision.default = '{"search": "PerspectiveCamera fov"}'

    first = frames(post(client, "agentic/stream", {"images": [PNG_1X1], "scope": "sdk"}))  # read to its end
    second = post(client, "agentic/stream", {"images": [PNG_1X1], "scope": "sdk"})

    assert second.status_code == 200
    for events in (first, frames(second)):
        assert [name for name, _ in events][-2:] == ["error", "final"]
        assert events[-2][1]["code"] == "index_building"


def test_each_vision_request_is_one_record_on_the_cgrag_channel(client, vision, sdk_kb):
    vision.replies = [("text", "an answer"), ("text", '{"labels": ["code"], "description": "x"}'),
                      ("text", '{"search": "fov"}'), ("text", '{"answer": "done [cite^1]"}')]

    for route in ("answer", "observe", "agentic"):
        assert post(client, route, {"images": [PNG_1X1, PNG_1X1]}).status_code == 200

    records = list(RequestRecord.objects.order_by("id"))
    assert [r.arguments["route"] for r in records] == ["vision/answer", "vision/observe", "vision/agentic"]
    assert {r.channel for r in records} == {Channel.CGRAG} and {r.question for r in records} == {"(image)"}
    assert all(r.arguments["num_images"] == 2 for r in records)


# -- the streams, on a live server ---------------------------------------------------------------------------


@pytest.fixture
def served(sdk_kb, vision_server):
    with daphne(RAG_VISION_BASE_URL=vision_server.url, RAG_VISION_MODEL="qwen-vl-live",
                RAG_VISION_AGENTIC_MAX_SEARCH_ROUNDS="2", RAG_VISION_AGENTIC_RETRIEVAL_TOPK="3",
                RAG_VISION_TIMEOUT="5") as url:
        yield url


def stream(base_url: str, route: str, body: dict) -> tuple[int, list[tuple[str, dict]]]:
    import httpx2

    with httpx2.Client(base_url=base_url, timeout=30) as http:
        with http.stream("POST", f"/cg-rag/vision/{route}", json=body, headers={"X-Request-ID": "req-vs"}) as response:
            return response.status_code, sse_events(response)


@pytest.mark.slow
def test_the_answer_stream_sends_tokens_and_resets_after_a_cut_stream(served, vision_server):
    vision_server.replies = [("text", "Call updateProjectionMatrix after changing fov."),
                             ("cut", "This answer breaks off half way through."),
                             ("text", "The retried answer is whole.")]

    status, events = stream(served, "answer/stream", {"images": [PNG_1X1]})
    cut_status, cut_events = stream(served, "answer/stream", {"images": [PNG_1X1]})

    assert status == 200
    names = [name for name, _ in events]
    assert names[0] == "progress" and names[-1] == "final" and "token" in names
    assert "".join(data["text"] for name, data in events if name == "token") == events[-1][1]["answer_text"]
    assert events[-1][1] | {"usage": None} == {"ok": True, "request_id": "req-vs", "generation_mode": "vision_answer",
                                               "answer_text": "Call updateProjectionMatrix after changing fov.",
                                               "thinking": "", "generation_enable_thinking": False, "usage": None}
    assert cut_status == 200
    names = [name for name, _ in cut_events]
    assert names.count("answer_reset") == 1 and names[-1] == "final" and "error" not in names
    after = names.index("answer_reset")
    assert "token" in names[:after] and "token" in names[after:]
    assert "".join(d["text"] for n, d in cut_events[after:] if n == "token") == "The retried answer is whole."
    assert cut_events[-1][1]["answer_text"] == "The retried answer is whole."
    assert cut_events[after][1]["reason"] == "upstream_stream_interrupted"
    assert RequestRecord.objects.filter(channel=Channel.CGRAG).count() == 2


@pytest.mark.slow
def test_the_agentic_stream_searches_streams_the_answer_and_reports_failures_as_error_then_final(served, vision_server):
    vision_server.replies = [("text", '{"search": "PerspectiveCamera fov"}'),
                             ("text", '{"answer": "Set fov [cite^1] and \\"update\\" [cite^7]."}'),
                             ("500", "")]

    status, events = stream(served, "agentic/stream", {"images": [PNG_1X1], "scope": "sdk"})
    failed_status, failed = stream(served, "agentic/stream", {"images": [PNG_1X1], "scope": "sdk"})

    assert status == 200
    progress = [data["stage"] for name, data in events if name == "progress"]
    assert "retrieval" in progress and progress[0] == "generation"
    assert "".join(d["text"] for n, d in events if n == "token") == 'Set fov [cite^1] and "update" [cite^7].'
    final = events[-1][1]
    assert events[-1][0] == "final" and final["ok"] is True
    assert final["answer_text"] == 'Set fov [cite^1] and "update".'
    assert final["rounds"][0]["query"] == "PerspectiveCamera fov" and final["references"]
    assert failed_status == 200
    assert [name for name, _ in failed][-2:] == ["error", "final"]
    assert failed[-2][1]["code"] == "vision_upstream_error"
    assert failed[-1][1] | {"error": None} == {"ok": False, "request_id": "req-vs", "generation_mode": "vision_agentic",
                                               "answer_text": "", "error": None, "references": [], "rounds": [],
                                               "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                                         "total_tokens": 0}}
    codes = list(RequestRecord.objects.filter(channel=Channel.CGRAG).order_by("id").values_list("error_code", flat=True))
    assert codes == ["", "vision_upstream_error"]


# -- the engine's pieces ------------------------------------------------------------------------------------


def test_the_answer_field_decodes_the_answer_string_as_it_streams_in_pieces():
    from rag.engine.vision import AnswerField

    field_ = AnswerField()
    pieces = ['{"ans', 'wer": "a \\', '"quoted\\" ', '\\u4e2d', '\\u6587 [cite^1]', '", "x": 1}']

    assert "".join(field_.feed(p) for p in pieces) == 'a "quoted" 中文 [cite^1]'
    assert AnswerField().feed('{"search": "fov"}') == ""


def test_citations_naming_no_reference_are_removed():
    from rag.engine.vision import cited

    assert cited("A [cite^2] B [cite^0] [cite^3].", 2) == ("A [cite^2] B.", (2,), (0, 3))
