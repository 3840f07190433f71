"""The chat client's stream when the model's response breaks off mid-body: a GenerationError the callers know
(and fall back on), never a transport exception that would surface as a 500. And a `Hangup` from another thread
ends a call at once, even one blocked on a model that stopped writing (issue 28: a stopping server)."""

from __future__ import annotations

import json
import threading

import pytest

from conftest import STALL_LIMIT, JsonHandler, serve_on_loopback
from rag.engine.llm import ChatClient, GenerationError, Hangup, HungUp

WAIT = 60  # seconds a wait below may take at most; what it waits for follows the hangup within milliseconds
MESSAGES = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_stream_cut_mid_body_is_a_connection_error(framing):
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - the http.server API
            self.read_json()
            raw = "".join(f"data: {json.dumps({'choices': [{'delta': {'content': w}}]})}\n\n"
                          for w in ("Hello ", "world ", "again")).encode()
            part = raw[: len(raw) // 2 + 10]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if framing == "length":
                self.send_header("Content-Length", str(len(raw) + 500))
                self.end_headers()
                self.wfile.write(part)
            else:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.flush()
            self.close_connection = True

    with serve_on_loopback(Handler) as url:
        client = ChatClient(url, "m", timeout=(1, 2))
        received = []
        with pytest.raises(GenerationError) as broke:
            for delta in client.stream([{"role": "user", "content": "x"}]):
                received.append(delta)
    assert broke.value.kind == "connection" and received == ["Hello "]


def call_on_a_thread(hangup: Hangup, call) -> tuple[threading.Thread, list]:
    """Run `call()` on a thread of its own, watched by `hangup`; the list gets what it returned or raised."""
    outcome: list = []

    def run():
        with hangup.watching():
            try:
                outcome.append(call())
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_hangup_from_another_thread_ends_a_stream_whose_model_stalls(llm_server):
    llm_server.replies.append(("stall", "Hello world"))
    client, hangup = ChatClient(llm_server.url, "m", timeout=(5, STALL_LIMIT)), Hangup()
    received: list[str] = []
    thread, outcome = call_on_a_thread(hangup, lambda: received.extend(client.stream(MESSAGES)))
    assert llm_server.stalled.wait(WAIT)

    hangup.now()
    thread.join(WAIT)

    assert isinstance(outcome[0], HungUp) and received == ["Hello "]
    assert llm_server.closed.wait(WAIT)


def test_a_hangup_also_ends_a_call_still_waiting_for_the_model_to_answer():
    asked, leave = threading.Event(), threading.Event()

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            self.read_json()
            asked.set()
            leave.wait(STALL_LIMIT)  # no headers: the model is still queueing the request

    with serve_on_loopback(Handler) as url:
        client, hangup = ChatClient(url, "m", timeout=(5, STALL_LIMIT)), Hangup()
        thread, outcome = call_on_a_thread(hangup, lambda: list(client.stream(MESSAGES)))
        assert asked.wait(WAIT)
        try:
            hangup.now()
            thread.join(WAIT)
        finally:
            leave.set()

    assert isinstance(outcome[0], HungUp)


def test_a_call_after_the_hangup_is_refused_before_it_reaches_the_model(llm_server):
    hangup = Hangup()
    hangup.now()

    thread, outcome = call_on_a_thread(hangup, lambda: ChatClient(llm_server.url, "m").complete(MESSAGES))
    thread.join(WAIT)

    assert isinstance(outcome[0], HungUp) and llm_server.calls == []


def test_a_hangup_leaves_the_calls_of_other_threads_alone(llm_server):
    watched = Hangup()
    with watched.watching():
        watched.now()
    text, _ = ChatClient(llm_server.url, "m").complete(MESSAGES)  # this thread is no longer watched

    assert text == llm_server.default_text
