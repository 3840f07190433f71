"""The served site (`python -m ragsite.serve`) against slow and greedy clients (issue 28, slow): a body over its
route's limit is refused with a JSON 413 before it is sent, headers have a deadline, one address a connection cap."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys

import pytest

from rag.tests.live import ROOT, free_port, project_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@contextlib.contextmanager
def serve(**extra: str):
    port = free_port()
    env = project_env(RAG_WEB_PROCESSES="1", HOST="127.0.0.1", PORT=str(port), RAG_WARM_UP="false", **extra)
    server = subprocess.Popen([sys.executable, "-m", "ragsite.serve"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: answers(port), 60, "the server to answer")
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return probe.recv(64).startswith(b"HTTP/1.1 ")
    except OSError:
        return False


def read_response(connection: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := connection.recv(65536):
            data += chunk
    return data


def test_a_body_over_the_json_limit_is_refused_from_its_content_length_before_it_is_sent():
    with serve() as port, socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        connection.sendall(b"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 500000000\r\n\r\n{\"question\": \"")
        reply = read_response(connection)

    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"application/json" in head
    assert json.loads(body)["code"] == "request_too_large"


def test_a_cg_rag_body_over_the_limit_gets_the_cg_rag_envelope_and_a_vision_route_takes_a_large_one():
    with serve() as port:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
            connection.sendall(b"POST /cg-rag/rag HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 70000\r\n\r\n")
            refused = read_response(connection)
        large = json.dumps({"query": "x", "images": ["a" * 100_000]}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
            connection.sendall(b"POST /cg-rag/vision/describe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(large) + large)
            taken = read_response(connection)

    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and json.loads(body)["error"]["code"] == "request_too_large"
    assert taken.startswith(b"HTTP/1.1 ") and not taken.startswith(b"HTTP/1.1 413")


def test_a_client_that_trickles_its_headers_is_cut_off_at_the_header_deadline():
    header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 400  # and never the blank line
    with serve(RAG_HTTP_HEADER_TIMEOUT="1") as port, \
            socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        cut_off = trickle(connection, header)

    assert cut_off, "the server still held the connection after the whole trickle"


def trickle(connection: socket.socket, data: bytes) -> bool:
    """Send `data` a byte every 0.3 s (each byte would restart an idle timeout); True once the server hangs up."""
    for byte in data:
        try:
            connection.sendall(bytes([byte]))
        except OSError:
            return True
        readable, _, _ = select.select([connection], [], [], 0.3)
        if readable:
            try:
                return connection.recv(1) == b""
            except OSError:
                return True
    return False


def test_one_address_holds_at_most_its_connection_cap():
    with serve(RAG_HTTP_CONNECTIONS_PER_ADDRESS="3", RAG_HTTP_HEADER_TIMEOUT="600") as port:
        held = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(3)]
        with socket.create_connection(("127.0.0.1", port), timeout=60) as extra:
            with contextlib.suppress(OSError):
                extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            refused = read_response(extra)
        held.pop().close()
        served_again = wait_for(lambda: answers(port), 60, "a connection to be taken once one closed")
        for connection in held:
            connection.close()

    assert refused == b"" and served_again
