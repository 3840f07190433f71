"""Sign-in throttling counts first, then checks (issue 28, infra/security.py): concurrent wrong passwords from one
address get at most RAG_LOGIN_THROTTLE's FAILURE_LIMIT password checks, however many arrive at once."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.db import connection
from django.test import Client

ATTEMPTS = 40
LIMIT = 5


class HeldChecks:
    """Counts password checks and holds each one until every attempt was either checked or refused, so no check
    can finish (and be counted as a failure the old way) before every other attempt has passed the throttle."""

    def __init__(self, attempts: int):
        self.attempts = attempts
        self.checks = 0
        self.settled = 0
        self.lock = threading.Lock()
        self.all_settled = threading.Event()

    def settle(self) -> None:
        with self.lock:
            self.settled += 1
            if self.settled == self.attempts:
                self.all_settled.set()

    def check(self) -> None:
        with self.lock:
            self.checks += 1
        self.settle()
        self.all_settled.wait(60)  # a safety net only: every attempt settles without waiting on time


@pytest.fixture
def held_checks(monkeypatch):
    held = HeldChecks(ATTEMPTS)

    def authenticate(self, request, username=None, password=None, **kwargs):
        held.check()
        return None  # every password is wrong

    monkeypatch.setattr(ModelBackend, "authenticate", authenticate)
    cache.clear()
    yield held
    cache.clear()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/admin/login/", "/ops/login/"])
def test_concurrent_wrong_passwords_from_one_address_get_at_most_the_limit_of_checks(held_checks, path):
    statuses: list[int] = []
    barrier = threading.Barrier(ATTEMPTS)

    def attempt() -> None:
        barrier.wait()
        try:
            response = Client().post(path, {"username": "ops-lead", "password": "guess"}, REMOTE_ADDR="10.0.0.1")
            statuses.append(response.status_code)
            if response.status_code == 429:
                held_checks.settle()
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt) for _ in range(ATTEMPTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert held_checks.checks == LIMIT
    assert sorted(statuses) == [200] * LIMIT + [429] * (ATTEMPTS - LIMIT)
