"""Per-client limits of the web faces (issue 16, infra/limits.py): requests per minute on /api/search, /api/chat and
/search, connects, open sockets and messages on /ws/chat, a client's share of the daily token pool, and no model
tokens while the limits cannot be counted."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from assistant.consumers import ChatConsumer
from assistant.services import token_pool_today
from conftest import local_moment

NOON = pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)
QUESTION = {"question": "PerspectiveCamera 的 far 默认值", "kb": "sdk"}


def limit(settings, **values) -> None:
    """Set some of RAG_WEB_LIMITS for this test."""
    settings.RAG_WEB_LIMITS = {**getattr(settings, "RAG_WEB_LIMITS", {}), **values}


def post(client, path, payload, **extra):
    return client.post(path, payload, content_type="application/json", **extra)


# -- HTTP ------------------------------------------------------------------------------------------------


@NOON
def test_api_search_is_limited_per_client_with_429_and_retry_after(client, kb, settings, time_machine):
    limit(settings, SEARCH_PER_MINUTE=2)

    first, second, third = (post(client, "/api/search", QUESTION) for _ in range(3))
    time_machine.shift(60)
    next_minute = post(client, "/api/search", QUESTION)

    assert [first.status_code, second.status_code, next_minute.status_code] == [200, 200, 200]
    assert (third.status_code, third.json()["code"], third["Retry-After"]) == (429, "rate_limited", "60")


@NOON
def test_api_chat_is_limited_per_client_with_429_and_retry_after(client, kb, settings):
    limit(settings, CHAT_PER_MINUTE=1)

    first = post(client, "/api/chat", QUESTION)
    second = post(client, "/api/chat", QUESTION)

    assert first.status_code == 200
    assert (second.status_code, second.json()["code"], second["Retry-After"]) == (429, "rate_limited", "60")


@NOON
def test_search_page_is_limited_per_client_with_429_and_retry_after(client, kb, settings):
    limit(settings, SEARCH_PER_MINUTE=1)

    first = client.get("/search", {"q": "PerspectiveCamera fov", "kb": "sdk"})
    second = client.get("/search", {"q": "PerspectiveCamera fov", "kb": "sdk"})

    assert first.status_code == 200
    assert (second.status_code, second["Retry-After"]) == (429, "60")
    assert "rate_limited" in second.content.decode() or "Too many" in second.content.decode()


@NOON
def test_behind_a_proxy_header_two_clients_are_counted_apart(client, kb, settings):
    settings.RAG_CLIENTS = {"ADDRESS_HEADER": "X-Forwarded-For", "TRUSTED_PROXIES": 1}
    limit(settings, SEARCH_PER_MINUTE=1)

    def search(address):
        return post(client, "/api/search", QUESTION, REMOTE_ADDR="10.0.0.1",
                    HTTP_X_FORWARDED_FOR=f"203.0.113.9, {address}").status_code

    assert [search("198.51.100.7"), search("198.51.100.8"), search("198.51.100.7")] == [200, 200, 429]


@NOON
def test_a_client_cannot_escape_its_address_limit_by_dropping_its_session_cookie(client, kb, settings,
                                                                                  django_user_model):
    limit(settings, SEARCH_PER_MINUTE=1)
    client.force_login(django_user_model.objects.create_user("reader"))

    with_session = post(client, "/api/search", QUESTION)
    client.cookies.clear()
    without_session = post(client, "/api/search", QUESTION)

    assert (with_session.status_code, without_session.status_code) == (200, 429)


@NOON
def test_one_session_moving_between_addresses_is_still_one_client(client, kb, settings, django_user_model):
    limit(settings, SEARCH_PER_MINUTE=1)
    client.force_login(django_user_model.objects.create_user("reader"))

    first = post(client, "/api/search", QUESTION, REMOTE_ADDR="198.51.100.7")
    moved = post(client, "/api/search", QUESTION, REMOTE_ADDR="198.51.100.8")

    assert (first.status_code, moved.status_code) == (200, 429)


@pytest.mark.parametrize("path", ["/api/search", "/api/chat"])
def test_a_form_encoded_post_is_415(client, db, path):
    multipart = client.post(path, {"question": "Fog near"})
    urlencoded = client.post(path, "question=Fog+near", content_type="application/x-www-form-urlencoded")

    assert (multipart.status_code, multipart.json()["code"]) == (415, "unsupported_media_type")
    assert (urlencoded.status_code, urlencoded.json()["code"]) == (415, "unsupported_media_type")


# -- the token share ---------------------------------------------------------------------------------------


@NOON
def test_a_client_s_share_of_the_pool_stops_that_client_but_not_another(client, kb, settings, with_model):
    settings.RAG_WEB_TOKEN_POOL = 10_000
    settings.RAG_WEB_TOKEN_ESTIMATE = 1_000
    limit(settings, TOKEN_SHARE=0.1)  # 1,000 tokens a client a day: one answer's reservation

    first = post(client, "/api/chat", QUESTION, REMOTE_ADDR="198.51.100.7")
    second = post(client, "/api/chat", QUESTION, REMOTE_ADDR="198.51.100.7")
    other = post(client, "/api/chat", QUESTION, REMOTE_ADDR="198.51.100.8")

    assert (first.status_code, first.json()["mode"]) == (200, "llm")
    assert (second.status_code, second.json()["code"]) == (429, "client_token_share_exhausted")
    assert second["Retry-After"] == str(12 * 3600)  # local midnight
    assert (other.status_code, other.json()["mode"]) == (200, "llm")
    assert len(with_model.calls) == 2
    assert token_pool_today().spent == first.json()["usage"]["total_tokens"] + other.json()["usage"]["total_tokens"]


@NOON
def test_with_the_cache_unavailable_a_web_chat_answers_extractively_and_spends_nothing(client, kb, settings,
                                                                                       with_model):
    settings.CACHES = {"default": {"BACKEND": "infra.redis_cache.ResilientRedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0"}}  # nothing listens there

    search = post(client, "/api/search", QUESTION)
    chat = post(client, "/api/chat", QUESTION)

    assert search.status_code == 200 and search.json()["results"]
    body = chat.json()
    assert chat.status_code == 200, body
    assert (body["mode"], body["degraded"], body["reason"]) == ("extractive", True, "limits_unavailable")
    assert body["citations"]
    assert with_model.calls == [] and token_pool_today().spent == 0


# -- the WebSocket -----------------------------------------------------------------------------------------


def socket(address="198.51.100.7") -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat")
    communicator.scope["client"] = (address, 50000)
    return communicator


async def refused(communicator) -> tuple[dict, int]:
    """The error frame and close code of a socket refused at connect."""
    connected, _ = await communicator.connect()
    assert connected
    frame = await communicator.receive_json_from(timeout=10)
    closed = await communicator.receive_output(timeout=10)
    assert closed["type"] == "websocket.close"
    return frame, closed["code"]


@NOON
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_ws_connects_per_minute_are_limited_per_client(settings):
    limit(settings, WS_CONNECTS_PER_MINUTE=1)
    first = socket()
    await first.connect()
    await first.disconnect()

    frame, code = await refused(socket())
    other, _ = await socket("198.51.100.8").connect()

    assert (frame["type"], frame["code"], frame["retry_after"], code) == ("error", "rate_limited", 60, 4429)
    assert other


@NOON
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_ws_open_sockets_per_client_are_limited(settings):
    limit(settings, SOCKETS_PER_CLIENT=1)
    first = socket()
    assert (await first.connect())[0]

    frame, code = await refused(socket())
    await first.disconnect()
    again = socket()
    reconnected, _ = await again.connect()
    await again.disconnect()

    assert (frame["type"], frame["code"], code) == ("error", "too_many_sockets", 4429)
    assert reconnected


@NOON
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_ws_messages_per_minute_are_limited_per_client(kb, settings):
    limit(settings, WS_MESSAGES_PER_MINUTE=1)
    communicator = socket()
    await communicator.connect()

    await communicator.send_json_to(QUESTION)
    while (await communicator.receive_json_from(timeout=30))["type"] not in ("final", "error"):
        pass
    await communicator.send_json_to(QUESTION)
    frame = await communicator.receive_json_from(timeout=10)
    await communicator.disconnect()

    assert (frame["type"], frame["code"], frame["retry_after"]) == ("error", "rate_limited", 60)


@NOON
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_ws_chat_spends_the_client_s_token_share(kb, settings, with_model):
    settings.RAG_WEB_TOKEN_POOL = 10_000
    settings.RAG_WEB_TOKEN_ESTIMATE = 1_000
    limit(settings, TOKEN_SHARE=0.1)
    communicator = socket()
    await communicator.connect()

    frames = []
    for _ in range(2):
        await communicator.send_json_to(QUESTION)
        while (frame := await communicator.receive_json_from(timeout=30))["type"] not in ("final", "error"):
            pass
        frames.append(frame)
    await communicator.disconnect()

    assert [f["type"] for f in frames] == ["final", "error"] and frames[0]["mode"] == "llm"
    assert (frames[1]["code"], frames[1]["retry_after"]) == ("client_token_share_exhausted", 12 * 3600)
    assert len(with_model.calls) == 1
    assert await sync_to_async(lambda: token_pool_today().spent)() == frames[0]["usage"]["total_tokens"]
