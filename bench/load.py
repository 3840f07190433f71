"""`make bench-load`: latency and throughput of /api/search, /api/chat (extractive), the two MCP tools
(SDK client over streamable HTTP, one session per client, with an API key) and the three retrieval APIs (seed
002's, RAGFlow's and Dify's, top 5 of the docs knowledge base, with a key bound to a retrieval app) on a live
Daphne.

Loopback only, bounded: each level sends at most --requests requests or runs --seconds, whichever ends
first. Uses the data directory of `make run` (migrates and indexes docs/ first if needed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [
    "怎么重建索引？", "RAG_DATA_DIR 默认是什么？", "How do I switch to PostgreSQL?", "rag search 的 JSON 长什么样？",
    "What does reindex --if-changed do?", "保留几个索引版本？", "How are API keys stored?", "什么是 RRF 融合？",
    "How does the chitchat gate work?", "怎么配置生成模型？", "What is the default knowledge base?",
    "read 命令会拒绝哪些路径？", "How many chunks does a multi-class question adopt?", "向量缓存怎么复用？",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(clients: int, latencies: list[float], errors: list[float], wall: float, request_ids: list[str]) -> dict:
    return {"clients": clients, "requests": len(latencies), "errors": len(errors),
            "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
            "p95_ms": round(pct(latencies, 0.95), 1) if latencies else None,
            "rps": round(len(latencies) / wall, 1), "request_ids": request_ids}


def run_level(url: str, path: str, clients: int, total: int, seconds: float, body=lambda q: {"question": q},
              headers: dict | None = None) -> dict:
    latencies, errors, request_ids = [], [], []
    lock = threading.Lock()
    counter = iter(range(total))
    deadline = time.monotonic() + seconds

    def client():
        session = requests.Session()
        while time.monotonic() < deadline:
            with lock:
                number = next(counter, None)
            if number is None:
                return
            question = f"{QUESTIONS[number % len(QUESTIONS)]} #{path[1:4]}{clients}-{number}"  # distinct: no cache hits
            started = time.perf_counter()
            response = session.post(url + path, json=body(question), headers=headers, timeout=60)
            elapsed = (time.perf_counter() - started) * 1000
            payload = response.json() if response.status_code == 200 else {}
            ok = response.status_code == 200 and payload.get("code", 0) == 0
            with lock:
                (latencies if ok else errors).append(elapsed)
                if ok and isinstance(payload.get("request_id"), str):
                    request_ids.append(payload["request_id"])

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summary(clients, latencies, errors, time.perf_counter() - started, request_ids)


def run_mcp_level(url: str, key: str, tool: str, clients: int, total: int, seconds: float) -> dict:
    """Like run_level, for one MCP tool: each client opens its own session (with the key) and calls in turn."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    latencies, errors, request_ids = [], [], []
    counter = iter(range(total))
    deadline = time.monotonic() + seconds

    async def client():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with http, Client(streamable_http_client(url + "/mcp", http_client=http), mode="legacy") as session:
            while time.monotonic() < deadline and (number := next(counter, None)) is not None:
                question = f"{QUESTIONS[number % len(QUESTIONS)]} #{tool[:3]}{clients}-{number}"
                started = time.perf_counter()
                result = await session.call_tool(tool, {"question": question})
                elapsed = (time.perf_counter() - started) * 1000
                (errors if result.is_error else latencies).append(elapsed)
                if not result.is_error and result.structured_content:
                    request_ids.append(result.structured_content.get("request_id"))

    async def level():
        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - started

    return summary(clients, latencies, errors, asyncio.run(level()), request_ids)


ISSUE_KEY = """
from django.contrib.auth import get_user_model
from apikeys.services import api_key_issue
from rag.services.retrieval import retrieval_app_create
user, _ = get_user_model().objects.get_or_create(username="bench-load")
app = retrieval_app_create(name="make bench-load", kb_slugs=["docs"])
print(app.pk)
print(api_key_issue(owner=user, name="make bench-load", app=app, daily_quota=0, rate_limit_per_minute=0)[1])  # unlimited
"""


ENGINE_TOTALS = """
import json, sys
from rag.models import RequestRecord
ids = json.load(sys.stdin)
print(json.dumps(dict(RequestRecord.objects.filter(request_id__in=ids).values_list("request_id", "timings__total"))))
"""


def add_engine_totals(results: dict, manage: list[str], env: dict) -> None:
    """Add each level's median of the engine's own `timings_ms.total`, read from the requests' records."""
    ids = [i for levels in results.values() for r in levels for i in r["request_ids"]]
    totals = json.loads(subprocess.run(manage + ["shell", "-c", ENGINE_TOTALS], cwd=ROOT, env=env, check=True,
                                       input=json.dumps(ids), capture_output=True, text=True).stdout.splitlines()[-1])
    for levels in results.values():
        for r in levels:
            engine = [totals[i] for i in r.pop("request_ids") if totals.get(i) is not None]
            r["engine_p50_ms"] = round(statistics.median(engine), 1) if engine else None


def retrieval_faces(app_id: int) -> dict:
    """Each retrieval API's path and request body for a question: the top 5 chunks of the docs knowledge base."""
    return {
        "/api/v1/retrieval": lambda q: {"app_id": app_id, "question": q, "kb_ids": ["docs"], "rag_setting": {"top_n": 5}},
        "/ragflow/api/v1/retrieval": lambda q: {"question": q, "dataset_ids": ["docs"], "page_size": 5},
        "/dify/retrieval": lambda q: {"knowledge_id": "docs", "query": q,
                                      "retrieval_setting": {"top_k": 5, "score_threshold": 0.0}},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=120, help="requests per level at most")
    parser.add_argument("--seconds", type=float, default=60, help="seconds per level at most")
    parser.add_argument("--url", help="measure a server already running there (`make prod`; run this with its "
                                      "environment so the key lands in its database) instead of starting one Daphne")
    parser.add_argument("--clients", default="1,4,16", help="the concurrency levels, comma-separated")
    parser.add_argument("--only", choices=("search",), help="search: only /api/search and MCP search")
    args = parser.parse_args()
    levels = [int(n) for n in args.clients.split(",")]
    # Every client here is one loopback address: lift the per-client web limits of the server started here (a
    # server given by --url must be started with the same, e.g. `RAG_WEB_SEARCH_PER_MINUTE=1000000 make prod`).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", **{name: os.environ.get(name, "1000000") for name in (
        "RAG_WEB_SEARCH_PER_MINUTE", "RAG_WEB_CHAT_PER_MINUTE")}}
    manage = [sys.executable, "manage.py"]
    if not args.url:
        subprocess.run(manage + ["migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run(manage + ["rag", "reindex", "--if-changed"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    app_id, key = subprocess.run(manage + ["shell", "-c", ISSUE_KEY], cwd=ROOT, env=env, check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-2:]
    port = free_port()
    server = None if args.url else subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "ragsite.asgi:application"], cwd=ROOT,
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = args.url.rstrip("/") if args.url else f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                requests.get(url + "/healthz", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.2)
        for _ in range(300):  # load the model and index (a `make prod` just started may still be building it)
            if requests.post(url + "/api/search", json={"question": "warm up"}, timeout=60).status_code == 200:
                break
            time.sleep(1)
        results = {}
        search_only = args.only == "search"
        for path in ("/api/search",) if search_only else ("/api/search", "/api/chat"):
            results[path] = [run_level(url, path, clients, args.requests, args.seconds) for clients in levels]
        slug = os.environ.get("RAG_PRODUCT_SLUG", "sdk")
        for tool in (f"search_{slug}_docs",) if search_only else (f"search_{slug}_docs", f"ask_{slug}_docs"):
            results["mcp " + tool] = [run_mcp_level(url, key, tool, clients, args.requests, args.seconds)
                                      for clients in levels]
        for path, body in {} if search_only else retrieval_faces(int(app_id)).items():
            results[path] = [run_level(url, path, clients, args.requests, args.seconds, body=body,
                                       headers={"Authorization": f"Bearer {key}"}) for clients in levels]
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    add_engine_totals(results, manage, env)
    print(f"{'endpoint':26s} {'clients':>7s} {'requests':>8s} {'errors':>6s} {'p50 ms':>8s} {'p95 ms':>8s} {'req/s':>7s}"
          f" {'engine p50':>10s}")
    for path, levels in results.items():
        for r in levels:
            shown = {k: "-" if r[k] is None else r[k] for k in ("p50_ms", "p95_ms", "engine_p50_ms")}  # all failed
            print(f"{path:26s} {r['clients']:7d} {r['requests']:8d} {r['errors']:6d} {shown['p50_ms']:>8} "
                  f"{shown['p95_ms']:>8} {r['rps']:7} {shown['engine_p50_ms']:>10}")
    out = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")) / "bench" / "load.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
