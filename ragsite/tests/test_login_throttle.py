"""Sign-in throttling (issue 16): after a few failed sign-ins from one address for one user name, /ops/login/
and /admin/login/ answer 429 with Retry-After before checking the password; other addresses are not affected,
and behind a trusted proxy the client's own address counts, not the proxy's."""

from __future__ import annotations

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.django_db

LIMIT = 5


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("ops-lead", password="right-password")


def sign_in(client, path: str, password: str, address: str = "10.0.0.1", **headers):
    return client.post(path, {"username": "ops-lead", "password": password}, REMOTE_ADDR=address, **headers)


@pytest.mark.parametrize("path", ["/ops/login/", "/admin/login/"])
def test_login_throttling_refuses_sign_ins_after_repeated_failures_even_with_the_right_password(client, staff, path):
    for _ in range(LIMIT):
        assert sign_in(client, path, "wrong").status_code == 200  # the form again, with its error

    refused = sign_in(client, path, "right-password")

    assert refused.status_code == 429 and int(refused["Retry-After"]) == 900
    assert refused["X-Error-Code"] == "too_many_login_attempts"
    assert "_auth_user_id" not in client.session
    assert sign_in(client, path, "right-password", address="10.0.0.2").status_code == 302  # another client


def test_login_throttling_forgives_a_user_name_after_a_successful_sign_in(client, staff):
    for _ in range(LIMIT - 1):
        sign_in(client, "/ops/login/", "wrong")
    assert sign_in(client, "/ops/login/", "right-password").status_code == 302
    client.logout()
    for _ in range(LIMIT - 1):
        assert sign_in(client, "/ops/login/", "wrong").status_code == 200
    assert sign_in(client, "/ops/login/", "right-password").status_code == 302


def test_login_throttling_behind_a_proxy_counts_the_client_not_the_proxy(client, staff, settings):
    settings.RAG_CLIENTS = {"ADDRESS_HEADER": "X-Forwarded-For", "TRUSTED_PROXIES": 1}
    for _ in range(LIMIT):
        sign_in(client, "/admin/login/", "wrong", address="10.9.9.9", HTTP_X_FORWARDED_FOR="198.51.100.7")

    # The same proxy, another client; and a client that forges an address left of what the proxy appended.
    other = sign_in(client, "/admin/login/", "right-password", address="10.9.9.9",
                    HTTP_X_FORWARDED_FOR="203.0.113.5")
    forged = sign_in(client, "/admin/login/", "right-password", address="10.9.9.9",
                     HTTP_X_FORWARDED_FOR="203.0.113.99, 198.51.100.7")
    assert other.status_code == 302 and forged.status_code == 429
