"""API-key failure counting counts first, then checks (issue 28, apikeys/services.py): concurrent wrong keys from
one address get at most FAILED_ATTEMPTS_LIMIT lookups, however many arrive at once; a right key gives its count
back."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import cache
from django.db import connection

from apikeys import services
from apikeys.services import FAILED_ATTEMPTS_LIMIT, api_key_authenticate, api_key_issue
from infra.errors import ServiceError
from infra.tests.test_limits_signin import HeldChecks

ATTEMPTS = 80


def together(count: int, work) -> list:
    barrier = threading.Barrier(count)
    results: list = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(work())
        except ServiceError as exc:
            results.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_concurrent_wrong_keys_from_one_address_get_at_most_the_limit_of_checks(monkeypatch, django_user_model):
    record, _ = api_key_issue(owner=django_user_model.objects.create_user("owner"), name="cursor")
    guess = f"{record.prefix}_guess"
    held = HeldChecks(ATTEMPTS)
    real_hash = services._hash

    def hash_and_hold(value: str) -> str:
        if value == guess:
            held.check()
        return real_hash(value)

    monkeypatch.setattr(services, "_hash", hash_and_hold)

    def attempt():
        try:
            return api_key_authenticate(raw=guess, address="10.0.0.9")
        except ServiceError as exc:
            if exc.code == "too_many_failed_attempts":
                held.settle()
            raise

    codes = together(ATTEMPTS, attempt)

    assert held.checks == FAILED_ATTEMPTS_LIMIT
    assert sorted(codes) == (["invalid_api_key"] * FAILED_ATTEMPTS_LIMIT
                             + ["too_many_failed_attempts"] * (ATTEMPTS - FAILED_ATTEMPTS_LIMIT))


@pytest.mark.django_db
def test_a_right_key_gives_its_count_back(django_user_model):
    record, key = api_key_issue(owner=django_user_model.objects.create_user("owner"), name="cursor")

    accepted = [api_key_authenticate(raw=key, address="10.0.0.9") for _ in range(3 * FAILED_ATTEMPTS_LIMIT)]
    for _ in range(FAILED_ATTEMPTS_LIMIT - 1):
        with pytest.raises(ServiceError):
            api_key_authenticate(raw=f"{record.prefix}_guess", address="10.0.0.9")

    assert accepted[-1] == record and api_key_authenticate(raw=key, address="10.0.0.9") == record
