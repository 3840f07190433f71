"""The realtime page's count of serving processes: the process serving the page counts, an idle serving
process stays listed by its heartbeat, and a forked child (a worker pool's) is a process of its own."""

from __future__ import annotations

import os
import time

import pytest
from django.core.cache import cache

from conftest import local_moment
from infra import live
from opsboard.tests.test_ops import ops_user

pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(local_moment("2026-03-10 08:30"), tick=False)]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """This process as if it had published nothing yet, over an empty cache."""
    live.flush()
    cache.clear()
    monkeypatch.setattr(live, "_published", None)
    yield
    live.flush()
    cache.clear()


def test_the_process_serving_the_page_is_a_serving_process(client):
    client.force_login(ops_user())

    status = client.get("/ops/live.json").json()
    page = client.get("/ops/live").content.decode()

    assert status["processes"] == 1
    assert '<b id="processes">1</b>' in page


def test_an_idle_serving_process_stays_listed_past_the_ttl(monkeypatch, time_machine):
    monkeypatch.setattr(live, "HEARTBEAT", 0.05)
    with live.in_flight("web"):  # served one question, then idle
        pass

    time_machine.shift(live.TTL + 1)  # its first publication has expired by now
    deadline = time.monotonic() + 5  # a few heartbeats, and room for a busy machine
    while live.snapshot()["processes"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)

    snapshot = live.snapshot()
    assert (snapshot["in_flight"], snapshot["processes"]) == ({}, 1)


def test_a_forked_child_publishes_under_its_own_name():
    live.publish()
    read, write = os.pipe()

    pid = os.fork()
    if pid == 0:  # the child: report its name and leave at once, without running any cleanup
        os.write(write, live.PROCESS.encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 200).decode()

    assert child.endswith(f":{pid}") and live.PROCESS.endswith(f":{os.getpid()}")
