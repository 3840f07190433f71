"""API keys: hashed storage, one-time display, revocation, expiry, rotation, failed-attempt limiting."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from apikeys.models import ApiKey
from apikeys.services import (
    FAILED_ATTEMPTS_LIMIT,
    LAST_USED_PRECISION,
    api_key_authenticate,
    api_key_issue,
    api_key_revoke,
    api_key_rotate,
)
from conftest import local_moment
from rag.errors import ServiceError

NOW = local_moment("2026-03-10 10:00")  # expiry and last use are read on a clock frozen here
pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(NOW, tick=False)]


def test_an_issued_key_is_stored_only_as_a_hash(owner):
    record, key = api_key_issue(owner=owner, name="cursor")

    assert key.startswith(record.prefix + "_") and len(key) > 50
    stored = ApiKey.objects.get(pk=record.pk)
    assert key not in (stored.secret_hash, stored.prefix) and len(stored.secret_hash) == 64
    assert api_key_authenticate(raw=key) == record


def test_authentication_records_when_a_key_was_last_used(owner):
    record, key = api_key_issue(owner=owner, name="cursor")

    api_key_authenticate(raw=key)

    assert ApiKey.objects.get(pk=record.pk).last_used_at == NOW


def test_last_use_is_written_at_most_once_a_minute(owner, time_machine):
    record, key = api_key_issue(owner=owner, name="cursor")
    api_key_authenticate(raw=key)

    time_machine.shift(LAST_USED_PRECISION - 1)
    api_key_authenticate(raw=key)
    within = ApiKey.objects.get(pk=record.pk).last_used_at
    time_machine.shift(1)
    api_key_authenticate(raw=key)

    assert within == NOW
    assert ApiKey.objects.get(pk=record.pk).last_used_at == NOW + timezone.timedelta(seconds=LAST_USED_PRECISION)


@pytest.mark.parametrize("raw", [None, "", "nonsense", "rkabc_def", "Bearer x"])
def test_missing_or_unknown_keys_are_refused(owner, raw):
    api_key_issue(owner=owner, name="cursor")

    with pytest.raises(ServiceError) as raised:
        api_key_authenticate(raw=raw)

    assert (raised.value.code, raised.value.status) == ("invalid_api_key", 401)


def test_a_key_with_the_right_prefix_and_a_wrong_secret_is_refused(owner):
    record, key = api_key_issue(owner=owner, name="cursor")

    with pytest.raises(ServiceError):
        api_key_authenticate(raw=key[:-3] + "abc")


def test_a_revoked_key_stops_working_at_once(owner):
    record, key = api_key_issue(owner=owner, name="cursor")

    api_key_revoke(key=record)

    with pytest.raises(ServiceError) as raised:
        api_key_authenticate(raw=key)
    assert "revoked" in raised.value.message


def test_an_expired_key_stops_working(owner, time_machine):
    record, key = api_key_issue(owner=owner, name="ci", expires_at=NOW + timezone.timedelta(seconds=1))
    before = api_key_authenticate(raw=key)

    time_machine.shift(1)  # the moment it expires

    with pytest.raises(ServiceError) as raised:
        api_key_authenticate(raw=key)
    assert before == record and "expired" in raised.value.message and record.state == "expired"


def test_rotation_revokes_the_old_key_and_issues_a_new_one_with_the_same_limits(owner):
    record, old = api_key_issue(owner=owner, name="cursor", daily_quota=100)

    new_record, new = api_key_rotate(key=record)

    assert api_key_authenticate(raw=new) == new_record and new_record.daily_quota == 100
    with pytest.raises(ServiceError):
        api_key_authenticate(raw=old)


def test_repeated_failures_from_one_address_are_refused_before_lookup(owner, django_assert_num_queries):
    record, key = api_key_issue(owner=owner, name="cursor")
    for _ in range(FAILED_ATTEMPTS_LIMIT):
        with pytest.raises(ServiceError):
            api_key_authenticate(raw="rkwrong_guess", address="10.0.0.9")

    with django_assert_num_queries(0), pytest.raises(ServiceError) as raised:
        api_key_authenticate(raw=key, address="10.0.0.9")

    assert (raised.value.code, raised.value.status) == ("too_many_failed_attempts", 429)
    assert api_key_authenticate(raw=key, address="10.0.0.10") == record


def test_admin_shows_the_whole_key_once_and_lists_only_the_prefix(client, owner):
    admin = get_user_model().objects.create_superuser("admin", password="pw")
    client.force_login(admin)

    response = client.post("/admin/apikeys/apikey/add/", {"name": "vscode", "owner": owner.pk})
    listing = client.get("/admin/apikeys/apikey/").content.decode()

    record = ApiKey.objects.get(name="vscode")
    key = re.search(rf"{record.prefix}_[A-Za-z0-9_-]+", response.content.decode()).group(0)
    assert api_key_authenticate(raw=key) == record
    assert record.prefix in listing and key not in listing
