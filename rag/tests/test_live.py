"""Live counters: requests in flight per channel and gauges, summed over the processes that publish them."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from conftest import local_moment
from infra import live

# Snapshots expire after live.TTL seconds (the cache reads time.time): the clock is frozen, and moved on purpose.
pytestmark = pytest.mark.time_machine(local_moment("2026-03-10 10:00"), tick=False)


@pytest.fixture(autouse=True)
def clear_cache():
    cache.clear()
    yield
    live.flush()  # an end still waiting to be published is not written into the next test's cache
    cache.clear()
    live.set_gauge("mcp_sessions", 0)


def test_a_request_counts_while_it_runs_and_not_after():
    with live.in_flight("mcp"):
        with live.in_flight("mcp"), live.in_flight("web"):
            during = live.snapshot()
        after_one = live.snapshot()
    after = live.snapshot()

    assert during["in_flight"] == {"mcp": 2, "web": 1} and during["processes"] == 1
    assert after_one["in_flight"] == {"mcp": 1}
    assert after["in_flight"] == {}


def test_a_failing_request_is_still_counted_out():
    with pytest.raises(RuntimeError), live.in_flight("web"):
        raise RuntimeError("boom")

    assert live.snapshot()["in_flight"] == {}


def test_numbers_of_all_live_processes_are_added_and_silent_ones_drop_out():
    live.set_gauge("mcp_sessions", 2)
    live.publish()
    registry = cache.get(live.REGISTRY_KEY)
    cache.set(live.REGISTRY_KEY, {**registry, "other:1": time.time(), "gone:2": time.time()})
    cache.set("rag:live:other:1", {"in_flight": {"mcp": 3}, "gauges": {"mcp_sessions": 5}, "at": time.time()})
    # "gone:2" is listed but its snapshot expired: it counts for nothing

    snapshot = live.snapshot()

    assert snapshot == {"in_flight": {"mcp": 3}, "gauges": {"mcp_sessions": 7}, "processes": 2}


def test_a_process_that_stops_publishing_drops_out_after_the_ttl(time_machine):
    with live.in_flight("web"):  # published once on entry, then silent (as a process that hangs or died)
        time_machine.shift(live.TTL - 1)
        alive = live.snapshot()
        time_machine.shift(1)
        gone = live.snapshot()

    assert (alive["in_flight"], alive["processes"]) == ({"web": 1}, 1)
    assert (gone["in_flight"], gone["processes"]) == ({}, 0)


def own_entry() -> dict:
    """This process's published counters as another process reads them (snapshot() would publish first)."""
    return cache.get(f"rag:live:{live.PROCESS}")


def test_the_end_of_a_request_reaches_other_processes_soon_after():
    with live.in_flight("cli"):
        pass
    waiting = own_entry()["in_flight"]

    deadline = time.monotonic() + 5  # LINGER, and room for a busy machine
    while own_entry()["in_flight"] and time.monotonic() < deadline:
        time.sleep(live.LINGER / 5)

    assert (waiting, own_entry()["in_flight"]) == ({"cli": 1}, {})


def test_a_run_of_short_requests_writes_the_cache_once_until_it_ends(monkeypatch):
    monkeypatch.setattr(live, "LINGER", 1.0)  # no publish between two of these requests, however busy the machine
    writes = []
    write = cache.set
    monkeypatch.setattr(cache, "set", lambda key, *args, **kwargs: (writes.append(key), write(key, *args, **kwargs)))

    for _ in range(5):
        with live.in_flight("cli"):
            during = own_entry()["in_flight"]
    after = live.snapshot()

    assert writes.count(f"rag:live:{live.PROCESS}") == 2  # the first start, and the end when read
    assert (during, after["in_flight"]) == ({"cli": 1}, {})
