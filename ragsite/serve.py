"""`python -m ragsite.serve`: several Daphne processes on one listening socket (the Procfile's `web`).

The socket is bound here once and handed to each Daphne (`daphne --fd`); the kernel gives each new connection to
one of the processes waiting in accept(), so they share one address with no proxy hop in between. (A TLS proxy
or load balancer in front stays as it would be for one process.) Stopping this process (SIGTERM or SIGINT) stops
every Daphne; when one Daphne exits on its own the others are stopped too and the exit code says so, so the
process manager (honcho) sees one failure and stops the stack.

Options from the environment: RAG_WEB_PROCESSES (2), HOST (127.0.0.1), PORT (8000; honcho sets it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


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
    command = [sys.executable, "-m", "daphne", "--fd", str(fd), "ragsite.asgi:application"]
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


if __name__ == "__main__":
    sys.exit(main())
