"""The chat client's stream when the model's response breaks off mid-body: a GenerationError the callers know
(and fall back on), never a transport exception that would surface as a 500."""

from __future__ import annotations

import json

import pytest

from conftest import JsonHandler, serve_on_loopback
from rag.engine.llm import ChatClient, GenerationError


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
