"""API keys: hashed storage, one-time display, revocation, expiry, rotation, failed-attempt limiting."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from apikeys import services
from apikeys.models import ApiKey
from apikeys.services import (
    FAILED_ATTEMPTS_LIMIT,
    LAST_USED_PRECISION,
    api_key_admit_call,
    api_key_authenticate,
    api_key_issue,
    api_key_revoke,
    api_key_rotate,
    api_key_usage_summary,
)
from conftest import local_moment
from infra.errors import ServiceError

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


def test_repeated_failures_on_one_key_prefix_from_one_address_are_refused_before_lookup(owner,
                                                                                        django_assert_num_queries):
    record, key = api_key_issue(owner=owner, name="cursor")
    for _ in range(FAILED_ATTEMPTS_LIMIT):
        with pytest.raises(ServiceError):
            api_key_authenticate(raw=f"{record.prefix}_guess", address="10.0.0.9")

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


def _created_by_command(*args) -> ApiKey:
    out = io.StringIO()
    call_command("apikey", "create", "--owner", "dev", *args, stdout=out, stderr=io.StringIO())
    return ApiKey.objects.get(prefix=out.getvalue().strip().split("_", 1)[0])


def _created_in_the_admin(client, owner, **limits) -> ApiKey:
    client.force_login(get_user_model().objects.create_superuser(f"admin{ApiKey.objects.count()}", password="pw"))
    client.post("/admin/apikeys/apikey/add/", {"name": f"admin key {ApiKey.objects.count()}", "owner": owner.pk,
                                               **limits})
    return ApiKey.objects.latest("pk")


def test_new_keys_get_the_default_quota_and_rate_limit_from_settings(owner, settings, client):
    settings.RAG_MCP_DEFAULT_DAILY_QUOTA, settings.RAG_MCP_DEFAULT_RATE_LIMIT = 500, 20

    issued, _ = api_key_issue(owner=owner, name="cursor")
    created = _created_by_command("--name", "cli")
    added = _created_in_the_admin(client, owner)

    for key in (issued, created, added):
        assert (key.daily_quota, key.rate_limit_per_minute) == (500, 20)


def test_explicit_limits_win_over_the_defaults_and_zero_means_unlimited(owner, settings, client):
    settings.RAG_MCP_DEFAULT_DAILY_QUOTA, settings.RAG_MCP_DEFAULT_RATE_LIMIT = 500, 20

    issued, _ = api_key_issue(owner=owner, name="cursor", daily_quota=0, rate_limit_per_minute=5)
    created = _created_by_command("--name", "cli", "--daily-quota", "7", "--rate-limit", "0")
    added = _created_in_the_admin(client, owner, daily_quota="0", rate_limit_per_minute="0")

    assert (issued.daily_quota, issued.rate_limit_per_minute) == (0, 5)
    assert (created.daily_quota, created.rate_limit_per_minute) == (7, 0)
    assert (added.daily_quota, added.rate_limit_per_minute) == (0, 0)
    assert api_key_admit_call(key=added, tool="ask_sdk_docs").headers == {}  # unlimited: no RateLimit-* headers
    assert api_key_usage_summary(key=issued)["daily_quota"] is None  # the usage API says unlimited as before


def test_with_no_default_set_new_keys_stay_unlimited_and_a_rotation_keeps_an_unlimited_key_unlimited(owner, settings):
    legacy = ApiKey.objects.create(prefix="rklegacy0000", secret_hash="x", name="before defaults", owner=owner)
    settings.RAG_MCP_DEFAULT_DAILY_QUOTA, settings.RAG_MCP_DEFAULT_RATE_LIMIT = 500, 20

    rotated, _ = api_key_rotate(key=legacy)
    settings.RAG_MCP_DEFAULT_DAILY_QUOTA, settings.RAG_MCP_DEFAULT_RATE_LIMIT = 0, 0
    issued, _ = api_key_issue(owner=owner, name="cursor")

    assert (rotated.daily_quota, rotated.rate_limit_per_minute) == (0, 0)
    assert (issued.daily_quota, issued.rate_limit_per_minute) == (0, 0)


def test_failed_attempts_are_counted_per_address_and_key_prefix_with_an_address_wide_ceiling(owner):
    record, key = api_key_issue(owner=owner, name="cursor")
    other, other_key = api_key_issue(owner=owner, name="vscode")

    def fail(raw: str) -> str:
        with pytest.raises(ServiceError) as raised:
            api_key_authenticate(raw=raw, address="10.0.0.9")
        return raised.value.code

    wrong_secret = [fail(f"{record.prefix}_wrong") for _ in range(FAILED_ATTEMPTS_LIMIT + 1)]
    garbage = [fail(value) for value in ("nonsense", "Bearer x", "", "a_b")]  # no prefix: one bucket of their own
    locked_key = fail(key)
    other_key_admitted = api_key_authenticate(raw=other_key, address="10.0.0.9")
    sprayed = [fail(f"rk{n:010d}_guess") for n in range(services.FAILED_ATTEMPTS_ADDRESS_LIMIT)]

    assert wrong_secret == ["invalid_api_key"] * FAILED_ATTEMPTS_LIMIT + ["too_many_failed_attempts"]
    assert garbage == ["invalid_api_key"] * 4
    assert locked_key == "too_many_failed_attempts" and other_key_admitted == other
    assert sprayed[-1] == "too_many_failed_attempts"  # every prefix is new, yet the address is throttled
    assert fail(other_key) == "too_many_failed_attempts"
    assert api_key_authenticate(raw=other_key, address="10.0.0.10") == other


def test_a_limit_emptied_in_the_admin_is_the_default_again_and_zero_stays_unlimited(owner, settings, client):
    settings.RAG_MCP_DEFAULT_DAILY_QUOTA, settings.RAG_MCP_DEFAULT_RATE_LIMIT = 500, 20
    key, _ = api_key_issue(owner=owner, name="cursor", daily_quota=7, rate_limit_per_minute=3)
    client.force_login(get_user_model().objects.create_superuser("admin", password="pw"))

    inline = {f"usage-{name}": "0" for name in ("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS")}

    response = client.post(f"/admin/apikeys/apikey/{key.pk}/change/", {
        "name": "cursor", "owner": owner.pk, "daily_quota": "", "rate_limit_per_minute": "0", **inline})

    key.refresh_from_db()
    assert response.status_code == 302
    assert (key.daily_quota, key.rate_limit_per_minute) == (500, 0)
