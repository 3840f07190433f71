"""`python -m ragsite.serve`: several Daphne processes on one listening socket (the Procfile's `web`).

The socket is bound here once and handed to each Daphne (`daphne --fd`); the kernel gives each new connection to
one of the processes waiting in accept(), so they share one address with no proxy hop in between. (A TLS proxy
or load balancer in front stays as it would be for one process.) Stopping this process (SIGTERM or SIGINT) stops
every Daphne; when one Daphne exits on its own the others are stopped too and the exit code says so, so the
process manager (honcho) sees one failure and stops the stack.

Options from the environment: RAG_WEB_PROCESSES (2), HOST (127.0.0.1), PORT (8000; honcho sets it).

Each Daphne runs with the guards of `guard_daphne` (settings.RAG_HTTP_GUARDS) against slow and greedy clients,
which Daphne itself lacks: Twisted reads a whole request body (to memory or a spool file) before the application
sees any of it, and keeps a connection that sends its headers a byte at a time open for as long as it trickles.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def main() -> int:
    processes = _int_env("RAG_WEB_PROCESSES", 2)
    host, port = os.environ.get("HOST", "127.0.0.1"), _int_env("PORT", 8000)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(1024)
    listener.set_inheritable(True)
    fd = listener.fileno()
    command = [sys.executable, "-m", "ragsite.serve", "daphne", "--fd", str(fd), "ragsite.asgi:application"]
    children = [subprocess.Popen(command, pass_fds=(fd,)) for _ in range(processes)]
    listener.close()  # the Daphnes hold it now
    print(f"serving on http://{host}:{port}/ with {processes} Daphne processes "
          f"(pids {', '.join(str(c.pid) for c in children)})", flush=True)

    stopping = False

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while all(child.poll() is None for child in children) and not stopping:
        time.sleep(0.2)
    crashed = not stopping  # a Daphne exited on its own
    stop(signal.SIGTERM, None)
    deadline = time.monotonic() + 20
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 1 if crashed else 0


def body_limit(path: bytes, guards: dict) -> int:
    """The most bytes a request body to `path` may have: small for the JSON faces, large for the vision routes and
    for the rest (admin uploads, forms), as Django's own site-wide cap."""
    text = path.split(b"?", 1)[0].decode("latin-1")
    if text.startswith(tuple(guards["LARGE_PREFIXES"])):
        return guards["LARGE_BODY_MAX"]
    if text.startswith(tuple(guards["JSON_PREFIXES"])):
        return guards["JSON_BODY_MAX"]
    return guards["LARGE_BODY_MAX"]


def too_large_response(path: bytes, limit: int) -> bytes:
    """A JSON 413 in the face's error shape (CG_RAG's envelope under /cg-rag/ and /retrieve), closing the connection."""
    import json

    from rag.services.records import new_request_id

    error = {"code": "request_too_large", "message": f"The request body is larger than this route takes ({limit} bytes)."}
    text = path.decode("latin-1")
    if text.startswith(("/cg-rag/", "/retrieve")):
        request_id = new_request_id()
        body = {"request_id": request_id, "error": {**error, "details": {"max_bytes": limit}}}
        extra = f"X-Request-ID: {request_id}\r\n"
    else:
        body, extra = error, ""
    raw = json.dumps(body).encode()
    return (f"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode() + raw


def guard_daphne() -> None:
    """Give Daphne's HTTP connections a header deadline, a per-address connection cap and per-route body limits
    checked as the body arrives (Content-Length at the end of the headers, then the running total), so an
    oversized body is refused with a JSON 413 before it is read, and never buffered."""
    import daphne.server  # noqa: F401 - installs Twisted's asyncio reactor, which the line below must find
    from daphne import http_protocol
    from django.conf import settings
    from twisted.internet import reactor

    guards = settings.RAG_HTTP_GUARDS
    build = http_protocol.HTTPFactory.buildProtocol
    open_by_address: Counter = Counter()

    def buildProtocol(factory, addr):  # noqa: N802 - Twisted's name
        host = getattr(addr, "host", None)
        if host is not None and open_by_address[host] >= guards["CONNECTIONS_PER_ADDRESS"]:
            return None  # Twisted closes the connection at once
        channel = build(factory, addr)
        if channel is None:
            return None
        if host is not None:
            open_by_address[host] += 1
        _guard_channel(getattr(channel, "_channel", channel), host)  # Twisted wraps the HTTP/1.1 channel
        return channel

    def _guard_channel(channel, host) -> None:
        state = {"deadline": None, "limit": 0, "received": 0, "refused": False}

        def start_header_deadline():
            if state["deadline"] is None or not state["deadline"].active():
                state["deadline"] = reactor.callLater(guards["HEADER_TIMEOUT"], headers_too_slow)

        def stop_header_deadline():
            if state["deadline"] is not None and state["deadline"].active():
                state["deadline"].cancel()
            state["deadline"] = None

        def headers_too_slow():
            if channel.transport is not None:
                channel.transport.abortConnection()  # a client this slow gets no answer, only its socket closed

        made, lost = channel.connectionMade, channel.connectionLost
        all_headers, raw_data, request_done = channel.allHeadersReceived, channel.rawDataReceived, channel.requestDone

        def connectionMade():  # noqa: N802
            made()
            start_header_deadline()

        def connectionLost(reason):  # noqa: N802
            stop_header_deadline()
            if host is not None:
                open_by_address[host] -= 1
                if open_by_address[host] <= 0:
                    del open_by_address[host]
            lost(reason)

        def refuse(path: bytes, limit: int) -> None:
            state["refused"] = True
            channel.transport.write(too_large_response(path, limit))
            channel.transport.loseConnection()

        def allHeadersReceived():  # noqa: N802
            stop_header_deadline()
            path = channel._path  # noqa: SLF001 - the request line Twisted parsed
            state["limit"], state["received"] = body_limit(path, guards), 0
            state["path"] = path
            if channel.length is not None and channel.length > state["limit"]:
                refuse(path, state["limit"])
                return
            all_headers()

        def rawDataReceived(data):  # noqa: N802
            if state["refused"]:
                return  # the rest of a refused body is dropped unread, as the connection closes
            if not channel._handlingRequest:  # noqa: SLF001 - body bytes, not a next request buffered
                state["received"] += len(data)
                if state["received"] > state["limit"] + 64:  # a little for chunked framing
                    refuse(state.get("path", b"/"), state["limit"])
                    return
            raw_data(data)

        def requestDone(request):  # noqa: N802
            request_done(request)
            if not state["refused"]:
                start_header_deadline()  # the next request on a kept-alive connection

        channel.connectionMade = connectionMade
        channel.connectionLost = connectionLost
        channel.allHeadersReceived = allHeadersReceived
        channel.rawDataReceived = rawDataReceived
        channel.requestDone = requestDone

    http_protocol.HTTPFactory.buildProtocol = buildProtocol


def run_daphne(arguments: list[str]) -> None:
    """Daphne's own command line, with `guard_daphne` in place."""
    import django

    django.setup(set_prefix=False)
    guard_daphne()
    from daphne.cli import CommandLineInterface

    sys.argv = ["daphne", *arguments]
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    if sys.argv[1:2] == ["daphne"]:
        run_daphne(sys.argv[2:])
    else:
        sys.exit(main())
