"""Issue 16: the admin shows a new key's secret in the response itself, once, and never in a message (whose
default storage is a signed but unencrypted cookie, falling back to the session)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages.storage.cookie import CookieStorage
from django.contrib.sessions.models import Session

from apikeys.models import ApiKey
from apikeys.services import _hash, api_key_issue

KEY = re.compile(r"rk[a-z0-9]{10}_[A-Za-z0-9_-]{43}")


@pytest.fixture
def admin_client_with_owner(client, db):
    admin = get_user_model().objects.create_superuser("root", password="x")
    client.force_login(admin)
    return client, admin


def stored_messages(response) -> list[str]:
    """Every message text the response left in the messages cookie, decoded."""
    morsel = response.cookies.get("messages")
    if morsel is None or not morsel.value:
        return []
    return [message.message for message in CookieStorage(response.wsgi_request)._decode(morsel.value) or []]


def cookies_and_session(response) -> str:
    """Everything the browser or the session store keeps after the response, as text."""
    raw = " ".join(f"{name}={morsel.value}" for name, morsel in response.cookies.items())
    sessions = " ".join(s.session_data + repr(s.get_decoded()) for s in Session.objects.all())
    return " ".join([raw, sessions, *stored_messages(response)])


def test_the_admin_shows_a_new_keys_secret_in_the_response_once_and_never_in_a_message_cookie(
        admin_client_with_owner):
    client, admin = admin_client_with_owner

    response = client.post("/admin/apikeys/apikey/add/", {"name": "ci", "owner": admin.pk, "_save": "Save"})

    kept = cookies_and_session(response)
    shown = KEY.findall(response.content.decode())
    record = ApiKey.objects.get()
    assert not KEY.search(kept)
    assert response.status_code == 200
    assert len(shown) == 1 and record.secret_hash == _hash(shown[0])
    assert "no-store" in response["Cache-Control"]
    assert shown[0] not in client.get("/admin/apikeys/apikey/").content.decode()


def test_the_admin_shows_a_rotated_keys_secret_in_the_response_once_and_never_in_a_message_cookie(
        admin_client_with_owner):
    client, admin = admin_client_with_owner
    old, _ = api_key_issue(owner=admin, name="ci")

    response = client.post("/admin/apikeys/apikey/", {"action": "rotate", "_selected_action": [old.pk]})

    kept = cookies_and_session(response)
    shown = KEY.findall(response.content.decode())
    new = ApiKey.objects.exclude(pk=old.pk).get()
    assert not KEY.search(kept)
    assert response.status_code == 200
    assert len(shown) == 1 and new.secret_hash == _hash(shown[0])
    assert "no-store" in response["Cache-Control"]
    assert shown[0] not in client.get("/admin/apikeys/apikey/").content.decode()
