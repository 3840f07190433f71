"""Live counters: requests in flight per channel and gauges, summed over the processes that publish them."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from conftest import local_moment
from rag import live

# Snapshots expire after live.TTL seconds (the cache reads time.time): the clock is frozen, and moved on purpose.
pytestmark = pytest.mark.time_machine(local_moment("2026-03-10 10:00"), tick=False)


@pytest.fixture(autouse=True)
def clear_cache():
    cache.clear()
    yield
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
