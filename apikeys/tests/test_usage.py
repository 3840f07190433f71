"""Per-key usage: rate limit and daily quota with RateLimit-* headers, token settlement, the owner's endpoint."""

from __future__ import annotations

import datetime

import pytest

from apikeys.models import ApiKeyUsage
from apikeys.services import api_key_admit_call, api_key_call, api_key_issue, api_key_revoke, api_key_usage_settle
from conftest import local_moment
from infra.errors import ServiceError
from rag.engine.types import Usage

# Usage is counted per local day and rate-limited per moving minute: every test runs at one fixed moment,
# 15 s before a new clock minute and 13:59:15 before local midnight (and the boundary tests cross them on purpose).
TODAY = datetime.date(2026, 3, 10)
pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(local_moment("2026-03-10 10:00:45"), tick=False)]


def test_calls_are_counted_per_tool_and_day(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=0, rate_limit_per_minute=0)

    headers = api_key_admit_call(key=key, tool="search_sdk_docs").headers
    api_key_admit_call(key=key, tool="search_sdk_docs")
    api_key_admit_call(key=key, tool="ask_sdk_docs")

    assert headers == {}  # no limits on this key
    rows = {r.tool: r.calls for r in ApiKeyUsage.objects.filter(key=key, day=TODAY)}
    assert rows == {"search_sdk_docs": 2, "ask_sdk_docs": 1}


def test_the_rate_limit_refuses_the_call_after_the_limit_with_retry_after(owner):
    key, _ = api_key_issue(owner=owner, name="ide", rate_limit_per_minute=2)

    first = api_key_admit_call(key=key, tool="search_sdk_docs").headers
    second = api_key_admit_call(key=key, tool="search_sdk_docs").headers
    with pytest.raises(ServiceError) as refused:
        api_key_admit_call(key=key, tool="ask_sdk_docs")

    assert (first["RateLimit-Limit"], first["RateLimit-Remaining"]) == ("2", "1")
    assert second["RateLimit-Remaining"] == "0"
    assert refused.value.code == "rate_limited" and refused.value.status == 429
    assert refused.value.headers["Retry-After"] == "60"  # the first call leaves the window at 10:01:45
    assert (refused.value.headers["RateLimit-Remaining"], refused.value.headers["RateLimit-Reset"]) == ("0", "60")
    assert ApiKeyUsage.objects.filter(key=key, tool="ask_sdk_docs").first() is None  # refused: not counted


def test_the_daily_quota_counts_all_tools_and_a_refused_call_is_not_counted(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=3)

    api_key_admit_call(key=key, tool="search_sdk_docs")
    api_key_admit_call(key=key, tool="ask_sdk_docs")
    last = api_key_admit_call(key=key, tool="search_sdk_docs").headers
    with pytest.raises(ServiceError) as refused:
        api_key_admit_call(key=key, tool="ask_sdk_docs")

    assert (last["RateLimit-Limit"], last["RateLimit-Remaining"]) == ("3", "0")
    assert refused.value.code == "quota_exceeded" and refused.value.status == 429
    assert refused.value.headers["Retry-After"] == str(13 * 3600 + 59 * 60 + 15)  # until local midnight
    assert sum(ApiKeyUsage.objects.filter(key=key).values_list("calls", flat=True)) == 3


def test_the_tighter_limit_is_the_one_reported(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=2, rate_limit_per_minute=10)

    headers = api_key_admit_call(key=key, tool="search_sdk_docs").headers

    assert (headers["RateLimit-Limit"], headers["RateLimit-Remaining"]) == ("2", "1")


def test_yesterdays_calls_do_not_count_against_todays_quota(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=1)
    ApiKeyUsage.objects.create(key=key, day=TODAY - datetime.timedelta(days=1), tool="ask_sdk_docs",
                               calls=50)

    api_key_admit_call(key=key, tool="ask_sdk_docs")

    with pytest.raises(ServiceError):
        api_key_admit_call(key=key, tool="ask_sdk_docs")


@pytest.mark.time_machine(local_moment("2026-03-10 23:59:59"), tick=False)
def test_the_daily_quota_refills_at_local_midnight(owner, time_machine):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=1)
    api_key_admit_call(key=key, tool="ask_sdk_docs")
    with pytest.raises(ServiceError) as refused:
        api_key_admit_call(key=key, tool="ask_sdk_docs")

    time_machine.shift(1)  # 00:00:00 local time
    headers = api_key_admit_call(key=key, tool="ask_sdk_docs").headers

    assert refused.value.headers["Retry-After"] == "1"
    assert headers["RateLimit-Remaining"] == "0" and headers["RateLimit-Reset"] == str(24 * 3600)
    assert sorted(ApiKeyUsage.objects.filter(key=key).values_list("day", "calls")) == [
        (TODAY, 1), (TODAY + datetime.timedelta(days=1), 1)]


def test_a_burst_across_a_minute_s_end_is_not_twice_the_rate_limit(owner, time_machine):
    key, _ = api_key_issue(owner=owner, name="ide", rate_limit_per_minute=3)
    time_machine.move_to(local_moment("2026-03-10 10:00:59"), tick=False)
    before = [api_key_admit_call(key=key, tool="search_sdk_docs").headers for _ in range(3)]

    time_machine.shift(2)  # 10:01:01: a new clock minute would start counting from zero
    refused = []
    for _ in range(3):
        with pytest.raises(ServiceError) as raised:
            api_key_admit_call(key=key, tool="search_sdk_docs")
        refused.append(raised.value)

    assert [h["RateLimit-Remaining"] for h in before] == ["2", "1", "0"]
    assert [(e.code, e.headers["Retry-After"]) for e in refused] == [("rate_limited", "58")] * 3
    assert ApiKeyUsage.objects.get(key=key, tool="search_sdk_docs").calls == 3


def test_each_call_leaves_the_rate_window_a_minute_after_it_was_counted(owner, time_machine):
    key, _ = api_key_issue(owner=owner, name="ide", rate_limit_per_minute=2)
    first = api_key_admit_call(key=key, tool="search_sdk_docs").headers  # 10:00:45
    time_machine.shift(30)
    api_key_admit_call(key=key, tool="search_sdk_docs")  # 10:01:15

    time_machine.shift(10)  # 10:01:25
    with pytest.raises(ServiceError) as full:
        api_key_admit_call(key=key, tool="search_sdk_docs")
    time_machine.shift(20)  # 10:01:45: the first call has left the window, the second has not
    again = api_key_admit_call(key=key, tool="search_sdk_docs").headers

    assert first["RateLimit-Reset"] == "60"
    assert full.value.headers["Retry-After"] == "20"  # until the first call is a minute old
    assert (again["RateLimit-Remaining"], again["RateLimit-Reset"]) == ("0", "30")  # the second leaves at 10:02:15


def test_a_call_refused_by_the_daily_quota_is_not_counted_in_the_rate_window(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=1, rate_limit_per_minute=2)
    api_key_admit_call(key=key, tool="ask_sdk_docs")
    with pytest.raises(ServiceError) as refused:
        api_key_admit_call(key=key, tool="ask_sdk_docs")

    key.daily_quota = 10  # raised by an admin within the same minute
    key.save(update_fields=["daily_quota"])
    headers = api_key_admit_call(key=key, tool="ask_sdk_docs").headers

    assert refused.value.code == "quota_exceeded"
    assert (headers["RateLimit-Limit"], headers["RateLimit-Remaining"]) == ("2", "0")


def test_settling_adds_tokens_and_failures(owner):
    key, _ = api_key_issue(owner=owner, name="ide")
    api_key_admit_call(key=key, tool="ask_sdk_docs")

    api_key_usage_settle(key_id=key.pk, tool="ask_sdk_docs", prompt_tokens=120, completion_tokens=30)
    api_key_usage_settle(key_id=key.pk, tool="ask_sdk_docs", failed=True)

    row = ApiKeyUsage.objects.get(key=key, tool="ask_sdk_docs")
    assert (row.calls, row.prompt_tokens, row.completion_tokens, row.failures, row.tokens) == (1, 120, 30, 1, 150)


def test_the_owner_reads_the_keys_usage_with_the_key(client, owner):
    key, secret = api_key_issue(owner=owner, name="ide", daily_quota=10)
    api_key_admit_call(key=key, tool="ask_sdk_docs")
    api_key_usage_settle(key_id=key.pk, tool="ask_sdk_docs", prompt_tokens=7, completion_tokens=3)

    response = client.get("/api/keys/usage", HTTP_AUTHORIZATION=f"Bearer {secret}")

    body = response.json()
    assert response.status_code == 200
    assert (body["key"], body["state"], body["daily_quota"]) == (key.prefix, "active", 10)
    assert body["today"]["calls"] == 1 and body["today"]["remaining"] == 9
    assert body["usage"] == [{"day": TODAY.isoformat(), "tool": "ask_sdk_docs", "calls": 1,
                              "failures": 0, "prompt_tokens": 7, "completion_tokens": 3}]
    assert secret not in response.content.decode()


def test_the_usage_endpoint_refuses_missing_wrong_and_revoked_keys(client, owner):
    key, secret = api_key_issue(owner=owner, name="ide")

    missing = client.get("/api/keys/usage")
    wrong = client.get("/api/keys/usage", HTTP_AUTHORIZATION=f"Bearer {key.prefix}_not-the-secret")
    api_key_revoke(key=key)
    revoked = client.get("/api/keys/usage", HTTP_AUTHORIZATION=f"Bearer {secret}")
    bad_days = client.get("/api/keys/usage?days=x", HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert (missing.status_code, missing.json()["code"]) == (401, "missing_api_key")
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert (wrong.status_code, wrong.json()["code"]) == (401, "invalid_api_key")
    assert (revoked.status_code, revoked.json()["code"]) == (401, "invalid_api_key")
    assert "revoked" in revoked.json()["message"]
    assert bad_days.status_code == 401  # the key is checked first; a revoked key learns nothing more


def test_a_bad_days_value_is_a_400(client, owner):
    _, secret = api_key_issue(owner=owner, name="ide")

    response = client.get("/api/keys/usage?days=500", HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert (response.status_code, response.json()["code"]) == (400, "invalid_days")


def test_behind_a_proxy_one_bad_client_of_the_usage_endpoint_does_not_lock_every_client_out(client, owner, settings):
    settings.RAG_CLIENTS = {"ADDRESS_HEADER": "X-Forwarded-For", "TRUSTED_PROXIES": 1}
    _, secret = api_key_issue(owner=owner, name="ide")
    via_proxy = {"REMOTE_ADDR": "10.0.0.2"}

    refused = [client.get("/api/keys/usage", HTTP_AUTHORIZATION="Bearer nonsense",
                          HTTP_X_FORWARDED_FOR="203.0.113.7", **via_proxy).status_code for _ in range(11)]
    other_mistyped = client.get("/api/keys/usage", HTTP_AUTHORIZATION="Bearer nonsense",
                                HTTP_X_FORWARDED_FOR="198.51.100.4", **via_proxy)
    other_served = client.get("/api/keys/usage", HTTP_AUTHORIZATION=f"Bearer {secret}",
                              HTTP_X_FORWARDED_FOR="198.51.100.4", **via_proxy)

    assert refused == [401] * 10 + [429]
    assert (other_mistyped.status_code, other_mistyped.json()["code"]) == (401, "invalid_api_key")
    assert other_served.status_code == 200


def test_a_call_given_back_counts_in_neither_the_keys_minute_nor_its_day(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=2, rate_limit_per_minute=1)
    call = api_key_admit_call(key=key, tool="search_sdk_docs")  # then answered 503 index_building

    call.give_back()
    call.give_back()  # once is all it counts
    again = api_key_admit_call(key=key, tool="search_sdk_docs").headers

    assert again["RateLimit-Remaining"] == "0"  # the minute's one call: the given-back one left no trace
    assert ApiKeyUsage.objects.get(key=key, tool="search_sdk_docs").calls == 1


# -- the one key call every face makes (api_key_call) ---------------------------------------------------------


def usage_row(key, tool: str) -> tuple[int, int, int, int]:
    row = ApiKeyUsage.objects.get(key=key, day=TODAY, tool=tool)
    return row.calls, row.failures, row.prompt_tokens, row.completion_tokens


def test_a_key_call_counts_one_call_and_settles_its_tokens_once(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=5)
    refusals = []

    with api_key_call(key=key, tool="retrieval", refused=refusals.append) as call:
        call.spent(Usage(prompt_tokens=120, completion_tokens=30))
        with call.settling():  # entered again (an inner face): still settled once
            pass

    assert usage_row(key, "retrieval") == (1, 0, 120, 30)
    assert call.headers["RateLimit-Remaining"] == "4" and refusals == []


def test_a_key_call_refused_by_the_key_is_recorded_and_counts_nothing(owner):
    key, _ = api_key_issue(owner=owner, name="ide", rate_limit_per_minute=1)
    api_key_admit_call(key=key, tool="retrieval")
    refusals = []

    with pytest.raises(ServiceError, match="calls per minute"):
        with api_key_call(key=key, tool="retrieval", refused=refusals.append):
            pytest.fail("a refused call does not run")

    assert [e.code for e in refusals] == ["rate_limited"] and usage_row(key, "retrieval")[0] == 1


def test_a_key_call_that_fails_counts_one_failure_and_a_face_refusal_is_recorded(owner):
    key, _ = api_key_issue(owner=owner, name="ide")
    refusals = []

    with pytest.raises(ServiceError):
        with api_key_call(key=key, tool="retrieval", refused=refusals.append):
            raise ServiceError("invalid_request", "bad body")
    recorded = ServiceError("kb_not_found", "no such base", status=404)
    recorded.request_id = "req-1"  # the question service recorded it
    with pytest.raises(ServiceError):
        with api_key_call(key=key, tool="retrieval", refused=refusals.append):
            raise recorded
    with pytest.raises(RuntimeError):
        with api_key_call(key=key, tool="retrieval", refused=refusals.append):
            raise RuntimeError("boom")

    assert [e.code for e in refusals] == ["invalid_request"]
    assert usage_row(key, "retrieval") == (3, 3, 0, 0)


def test_a_key_call_that_finds_the_index_building_is_given_back_whole(owner):
    key, _ = api_key_issue(owner=owner, name="ide", daily_quota=1, rate_limit_per_minute=1)

    for _ in range(3):  # a limit of one call, three times: nothing was spent
        with pytest.raises(ServiceError):
            with api_key_call(key=key, tool="retrieval", refused=lambda error: None):
                raise ServiceError("index_building", "the first version is being built", status=503)

    assert usage_row(key, "retrieval") == (0, 0, 0, 0)
