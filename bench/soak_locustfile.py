"""The traffic of `make bench-soak` (bench/soak.py), for locust (headless, in its own virtualenv).

NormalUser: the web faces as many users ask them (each request from another address of a large pool, sent in
X-Forwarded-For, which the soak's server trusts): /api/search three times as often as /api/chat (extractive),
each question new to the server's caches.
Only these are timed as "normal"; their request ids are written to SOAK_IDS_FILE so the soak can check that
every one was recorded.

HostileUser: one of four attacks per turn, each from one of a few fixed addresses (so per-client limits apply):
a 2,000-character question, a body declared as 500 MB, a slow client that sends half its headers and waits,
and a retrieval call with a wrong key. Their outcomes are counted by status, not timed as normal traffic.
A hostile user starts an attack only while the attacks sent so far stay within SOAK_HOSTILE_SHARE (0.05) of all
requests sent (locust runs every user in this one process), so the share holds whatever rate the server keeps.
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
from urllib.parse import urlsplit

from locust import HttpUser, constant, events, task

QUESTIONS = [
    "怎么重建索引？", "RAG_DATA_DIR 默认是什么？", "How do I switch to PostgreSQL?", "rag search 的 JSON 长什么样？",
    "What does reindex --if-changed do?", "保留几个索引版本？", "How are API keys stored?", "什么是 RRF 融合？",
    "How does the chitchat gate work?", "怎么配置生成模型？", "What is the default knowledge base?",
    "read 命令会拒绝哪些路径？", "How many chunks does a multi-class question adopt?", "向量缓存怎么复用？",
]
LONG_QUESTION = ("我在用这个平台检索文档的时候发现有些问题总是找不到对应的类和成员，想知道索引是怎么建的，"
                 "分块的规则是什么，以及检索时向量和关键词是怎么融合的。") * 40
HOSTILE_ADDRESSES = ["203.0.113.7", "203.0.113.8", "203.0.113.9"]
SLOW_CLIENT_SECONDS = float(os.environ.get("SOAK_SLOW_CLIENT_SECONDS", "20"))
HOSTILE_SHARE = float(os.environ.get("SOAK_HOSTILE_SHARE", "0.05"))
request_ids: list[str] = []
sent = {"normal": 0, "hostile": 0}  # requests started, by kind


def hostile_turn() -> None:
    """Wait until one more attack keeps the attacks at or under HOSTILE_SHARE of all requests started."""
    while sent["hostile"] + 1 > HOSTILE_SHARE * (sent["normal"] + sent["hostile"] + 1):
        time.sleep(0.05)  # gevent's: other users run meanwhile
    sent["hostile"] += 1


def normal_address() -> str:
    return f"10.{random.randrange(1, 250)}.{random.randrange(0, 256)}.{random.randrange(1, 255)}"


class NormalUser(HttpUser):
    wait_time = constant(0)  # closed loop: the soak sets the rate by the number of users

    def _ask(self, path: str, name: str) -> None:
        question = f"{random.choice(QUESTIONS)} ({random.randrange(100000)})"  # mostly new: embedded, not cached
        sent["normal"] += 1
        with self.client.post(path, json={"question": question}, headers={"X-Forwarded-For": normal_address()},
                              name=name, catch_response=True) as response:
            if response.status_code == 200:
                request_id = (response.json() or {}).get("request_id")
                if request_id:
                    request_ids.append(request_id)
                response.success()
            else:
                response.failure(f"HTTP {response.status_code} {_code(response)}")

    @task(3)
    def search(self) -> None:
        self._ask("/api/search", "normal /api/search")

    @task(1)
    def chat(self) -> None:
        self._ask("/api/chat", "normal /api/chat")


class HostileUser(HttpUser):
    wait_time = constant(0)  # paced by hostile_turn
    fixed_count = int(os.environ.get("SOAK_HOSTILE_USERS", "0"))  # exactly this many; the rest are NormalUser

    def _address(self) -> str:
        return random.choice(HOSTILE_ADDRESSES)

    @task
    def long_question(self) -> None:
        hostile_turn()
        with self.client.post("/api/search", json={"question": f"{random.randrange(100000)} {LONG_QUESTION}"[:2000]},
                              headers={"X-Forwarded-For": self._address()}, name="hostile long question",
                              catch_response=True) as response:
            response.success() if response.status_code in (200, 429, 503) else response.failure(
                f"HTTP {response.status_code} {_code(response)}")

    @task
    def oversized_body(self) -> None:
        hostile_turn()
        self._raw("hostile oversized body", self._send_oversized)

    @task
    def slow_client(self) -> None:
        hostile_turn()
        self._raw("hostile slow client", self._send_half_headers)

    @task
    def wrong_key(self) -> None:
        hostile_turn()
        with self.client.post("/ragflow/api/v1/retrieval", json={"question": "rebuild the index", "dataset_ids": ["docs"]},
                              headers={"Authorization": "Bearer ragflow-" + "x" * 32,
                                       "X-Forwarded-For": self._address()},
                              name="hostile wrong key", catch_response=True) as response:
            response.success() if response.status_code in (200, 401, 403, 429) else response.failure(
                f"HTTP {response.status_code}")

    # -- raw sockets: what an HTTP client library would not send -------------------------------------------

    def _raw(self, name: str, send) -> None:
        started = time.perf_counter()
        outcome, error = "", None
        try:
            outcome = send()
        except OSError as exc:
            outcome = f"closed ({type(exc).__name__})"
        events.request.fire(request_type="RAW", name=f"{name}: {outcome}", response_time=(time.perf_counter() - started) * 1000,
                            response_length=0, exception=error, context={})

    def _connect(self) -> socket.socket:
        parts = urlsplit(self.host)
        return socket.create_connection((parts.hostname, parts.port or 80), timeout=SLOW_CLIENT_SECONDS + 30)

    def _send_oversized(self) -> str:
        """Declare 500 MB and send up to 8 MB of it: a server that refuses early answers before the 8 MB."""
        with self._connect() as connection:
            connection.sendall((f"POST /api/search HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                                f"X-Forwarded-For: {self._address()}\r\nContent-Length: 500000000\r\n\r\n").encode())
            chunk = b" " * 65536
            connection.setblocking(False)
            sent = 0
            while sent < 8 * 1024 * 1024:
                try:
                    head = connection.recv(256)
                    if head:
                        return _status_of(head)
                except BlockingIOError:
                    pass
                try:
                    sent += connection.send(chunk)
                except BlockingIOError:
                    time.sleep(0.01)
            connection.setblocking(True)
            connection.settimeout(10)
            try:
                return _status_of(connection.recv(256)) or "no answer"
            except TimeoutError:
                return "no answer after 8 MB"

    def _send_half_headers(self) -> str:
        """Send half a request's headers, then nothing for SLOW_CLIENT_SECONDS: does the server let go first?"""
        with self._connect() as connection:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
            connection.settimeout(SLOW_CLIENT_SECONDS)
            try:
                data = connection.recv(256)
            except TimeoutError:
                return "held open"
            return "closed by server" if not data else _status_of(data)


def _code(response) -> str:
    try:
        return str((response.json() or {}).get("code", ""))
    except ValueError:
        return ""


def _status_of(head: bytes) -> str:
    line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = line.split(" ")
    return f"HTTP {parts[1]}" if len(parts) > 1 and parts[1].isdigit() else "closed by server"


@events.test_stop.add_listener
def write_request_ids(environment, **_) -> None:
    path = os.environ.get("SOAK_IDS_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(request_ids, file)
