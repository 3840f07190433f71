"""Issue 16, the canary: run the request flows with a known API key and a known model API key, then search every
log line and every stored record for either; neither may appear (a key's hash may be stored, the key may not).

In process, every logger is raised to DEBUG and captured; live, Daphne's own output at DEBUG is. Stored records
are every row of every model, the cache, and every file under the data folder."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import pickle
import re
import subprocess
import sys
import zlib
from pathlib import Path

import httpx2
import pytest
import websockets
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.cache import cache
from django.db import connection

from apikeys.models import ApiKey
from apikeys.services import api_key_revoke
from apikeys.tests.test_mcp_live import connect
from assistant.consumers import ChatConsumer
from rag.pipeline import reset_engine
from rag.tests.conftest import make_built_kb
from rag.tests.live import ROOT, free_port, project_env, wait_for

MODEL_KEY = "sk-canary-model-key-7f3b9c1e5a2d4b6f8e0c"
QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"
PASSWORD = "canary-admin-password-1"
KEY = re.compile(r"rk[a-z0-9]{10}_[A-Za-z0-9_-]{43}")


def readable_cookie(value: str) -> str:
    """What anyone holding a signed cookie can read: its payload, decompressed, without the signing key."""
    payload = value.strip('"').split(":")[0]
    with contextlib.suppress(Exception):
        raw = base64.urlsafe_b64decode(payload.lstrip(".") + "=" * (-len(payload.lstrip(".")) % 4))
        return (zlib.decompress(raw) if payload.startswith(".") else raw).decode(errors="replace")
    return value


@contextlib.contextmanager
def every_log_line():
    """Raise every logger to DEBUG and capture what each writes (messages, arguments and tracebacks)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger()] + [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]
    saved = [(logger, logger.level, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.disabled = False
        if logger is logging.getLogger() or not logger.propagate:
            logger.addHandler(handler)
    try:
        yield stream
    finally:
        for logger, level, disabled in saved:
            logger.setLevel(level)
            logger.disabled = disabled
            logger.removeHandler(handler)


def stored_rows() -> str:
    """Every field of every row of every model, as text."""
    lines = []
    for model in apps.get_models():
        for row in model._default_manager.all().values():
            lines.append(f"{model._meta.label} {row!r}")
    return "\n".join(lines)


def _unpickled(raw: bytes) -> str:
    with contextlib.suppress(Exception):
        return repr(pickle.loads(raw))
    return ""


def cached_values() -> str:
    """Every value in this process's cache (local memory) and in the file cache the live server uses."""
    texts = []
    for key, raw in getattr(cache, "_cache", {}).items():
        texts.append(f"{key} {_unpickled(raw)}")
    for path in (Path(settings.DATA_DIR) / "cache").glob("**/*.djcache"):
        with path.open("rb") as handle, contextlib.suppress(Exception):
            pickle.load(handle)  # the expiry
            texts.append(f"{path.name} {_unpickled(zlib.decompress(handle.read()))}")
    return "\n".join(texts)


def data_files() -> bytes:
    """Every file under the data folder (indexes, reports, logs, the cache), as raw bytes.

    Not the SQLite database, whose rows `stored_rows` reads: opening and closing its files here would drop this
    process's own SQLite locks on them (POSIX locks are per process), and a later test's database fails."""
    database = str(connection.settings_dict["NAME"])
    return b"\n".join(path.read_bytes() for path in Path(settings.DATA_DIR).glob("**/*")
                      if path.is_file() and not str(path).startswith(database)
                      and path.stat().st_size < 200_000_000)


def assert_no_canary(secrets: dict[str, str], places: dict[str, str | bytes]) -> None:
    """Fail naming each secret and each place that holds it, with the first lines holding it."""
    found, lines = [], []
    for place, text in places.items():
        for name, secret in secrets.items():
            if (secret.encode() if isinstance(text, bytes) else secret) in text:
                found.append((name, place))
                if isinstance(text, str):
                    lines += [line[:400] for line in text.splitlines() if secret in line][:2]
    assert found == [], (found, lines)


@pytest.fixture
def owner(db):
    hasher = PBKDF2PasswordHasher()  # a live server runs the production settings, without the tests' MD5
    return get_user_model().objects.create(username="canary", is_staff=True, is_superuser=True,
                                           password=hasher.encode(PASSWORD, hasher.salt()))


def issue_through_the_admin(client, owner) -> tuple[ApiKey, str, str]:
    """Add a key in the admin as a person does; return it, its secret and every cookie the server set meanwhile."""
    client.force_login(owner)
    response = client.post("/admin/apikeys/apikey/add/", {"name": "canary", "owner": owner.pk, "_save": "Save"})
    responses = [response]
    if response.status_code == 302:
        responses.append(client.get(response["Location"]))
    secret = KEY.search(responses[-1].content.decode()).group(0)
    cookies = [readable_cookie(m.value) for r in responses for m in r.cookies.values()]
    return ApiKey.objects.get(), secret, "\n".join(cookies)


def issue_through_the_live_admin(url: str, owner) -> tuple[str, str]:
    """The same against a live server, signing in on its form; return the secret and every cookie it set."""
    set_cookies: list[str] = []

    def csrf_token(page) -> str:
        return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)

    with httpx2.Client(base_url=url, follow_redirects=True, event_hooks={
            "response": [lambda response: set_cookies.extend(response.headers.get_list("set-cookie"))]}) as http:
        page = http.get("/admin/login/?next=/admin/")
        http.post("/admin/login/?next=/admin/", data={"username": owner.username, "password": PASSWORD,
                                                      "next": "/admin/", "csrfmiddlewaretoken": csrf_token(page)})
        page = http.get("/admin/apikeys/apikey/add/")
        page = http.post("/admin/apikeys/apikey/add/", data={"name": "canary", "owner": owner.pk, "_save": "Save",
                                                             "csrfmiddlewaretoken": csrf_token(page)})
    secret = KEY.search(page.text).group(0)
    return secret, "\n".join(readable_cookie(c.split(";")[0].partition("=")[2]) for c in set_cookies)


@pytest.mark.django_db(transaction=True)
def test_canary_a_known_api_key_and_model_key_appear_in_no_log_and_no_stored_record(
        corpus_copy, owner, settings, llm_server, client):
    make_built_kb(corpus_copy)
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "GENERATION_BASE_URL": llm_server.url, "GENERATION_MODEL": "m",
                           "GENERATION_API_KEY": MODEL_KEY, "GENERATION_READ_TIMEOUT": 2}
    cache.clear()
    reset_engine()
    llm_server.replies += [("ok", "The default fov is 50 degrees [1]."), ("500", ""), ("500", "")]

    async def chat_over_the_socket() -> list[dict]:
        communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
        await communicator.connect()
        await communicator.send_json_to({"question": QUESTION, "kb": "sdk"})
        frames = [await communicator.receive_json_from(timeout=30)]
        while frames[-1]["type"] not in ("final", "error"):
            frames.append(await communicator.receive_json_from(timeout=30))
        await communicator.disconnect()
        return frames

    with every_log_line() as logs:
        key, secret, cookies = issue_through_the_admin(client, owner)
        bearer = {"Authorization": f"Bearer {secret}"}
        frames = async_to_sync(chat_over_the_socket)()
        failing = client.post("/api/chat", {"question": QUESTION, "kb": "sdk"}, content_type="application/json",
                              headers=bearer)
        search = client.post("/api/search", {"question": QUESTION, "kb": "sdk"}, content_type="application/json",
                             headers=bearer)
        usage = client.get("/api/keys/usage", headers=bearer)
        api_key_revoke(key=key)
        refused = client.get("/api/keys/usage", headers=bearer)
    reset_engine()

    assert frames[-1]["type"] == "final" and frames[-1]["mode"] == "llm"
    assert failing.status_code == 200 and failing.json()["degraded"]  # the model failed: an extractive answer
    assert search.status_code == 200 and usage.status_code == 200 and refused.status_code == 401
    assert llm_server.calls[0]["headers"]["Authorization"] == f"Bearer {MODEL_KEY}"  # the model did get it
    assert "ERROR" in logs.getvalue() or "WARNING" in logs.getvalue()  # the failure was logged
    assert_no_canary({"api key": secret, "model key": MODEL_KEY}, {
        "logs": logs.getvalue(), "cookies": cookies, "rows": stored_rows(), "cache": cached_values(),
        "data files": data_files()})


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_canary_a_known_api_key_and_model_key_appear_in_no_live_server_log_and_no_stored_record(
        corpus_copy, owner, llm_server, tmp_path):
    make_built_kb(corpus_copy)
    llm_server.replies += [("ok", "The default fov is 50 degrees [1]."), ("ok", "The fov is 50 [1]."),
                           ("500", ""), ("500", ""), ("malformed", "")]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = project_env(RAG_GENERATION_BASE_URL=llm_server.url, RAG_GENERATION_MODEL="m",
                      RAG_GENERATION_API_KEY=MODEL_KEY, RAG_GENERATION_READ_TIMEOUT="2", RAG_WARM_UP="false",
                      DJANGO_LOG_LEVEL="DEBUG")
    log_path = tmp_path / "daphne.log"
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "daphne", "-v", "2", "-b", "127.0.0.1", "-p", str(port),
                                   "ragsite.asgi:application"], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)

    async def scenario() -> dict:
        outcome = {}
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws/chat", origin=url) as socket_:
            for turn in ("chat", "failing chat"):
                await socket_.send(json.dumps({"question": QUESTION, "kb": "sdk"}))
                frames = [json.loads(await asyncio.wait_for(socket_.recv(), 60))]
                while frames[-1]["type"] not in ("final", "error"):
                    frames.append(json.loads(await asyncio.wait_for(socket_.recv(), 60)))
                outcome[turn] = frames[-1]
        async with httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as http:
            outcome["search"] = (await http.post("/api/search", json={"question": QUESTION, "kb": "sdk"})).status_code
            outcome["chat api"] = (await http.post("/api/chat", json={"question": QUESTION, "kb": "sdk"})).status_code
        http, client = connect(url, secret)
        async with http, client:
            outcome["mcp search"] = await client.call_tool("search_sdk_docs", {"question": QUESTION, "top_k": 3})
            outcome["mcp ask"] = await client.call_tool("ask_sdk_docs", {"question": QUESTION})
        await asyncio.to_thread(api_key_revoke, key=key)
        http, client = connect(url, secret)
        with contextlib.suppress(BaseException):
            async with http, client:
                pass
        return outcome

    try:
        wait_for(lambda: _listening(port), 30, "Daphne to listen")
        secret, cookies = issue_through_the_live_admin(url, owner)
        key = ApiKey.objects.get()
        outcome = asyncio.run(scenario())
    finally:
        server.terminate()
        server.wait(timeout=30)
    server_log = log_path.read_text(errors="replace")

    assert outcome["chat"]["type"] == "final" and outcome["search"] == 200 and outcome["chat api"] == 200
    assert not outcome["mcp search"].is_error and not outcome["mcp ask"].is_error
    assert any(call["headers"].get("Authorization") == f"Bearer {MODEL_KEY}" for call in llm_server.calls)
    assert "/ws/chat" in server_log or "/api/search" in server_log  # the server's log was captured
    assert_no_canary({"api key": secret, "model key": MODEL_KEY}, {
        "server log": server_log, "cookies": cookies, "rows": stored_rows(), "cache": cached_values(),
        "data files": data_files()})


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False
