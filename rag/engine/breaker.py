"""Circuit breaker on the generation model (E9): closed, open after N consecutive failures, one half-open
trial after a cool-down. Its state lives in a `BreakerStore`, so processes can share one breaker.

A caller asks `attempt()` for each call and reports how the call ended on the `Attempt` it gets (or None:
skip the call). An upstream that refuses the request itself (HTTP 4xx: a bad key, a bad request) answered,
so it does not count as a failure; an HTTP 429 with `Retry-After` opens the breaker until then, so no
process calls again before the upstream asked. A trial that never reports back (the reader left, an
exception that is not the upstream's, a killed process) cannot keep the breaker open: leaving the
attempt's `with` block unreported records a failure, and a trial expires `cooldown` + its read timeout
after it went out even if nothing is recorded at all.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

ABANDONED = "abandoned"  # the failure kind of a trial that left without reporting


class BreakerStore(Protocol):
    """Where the breaker keeps its state; the Django app shares it across processes through its cache."""

    def load(self) -> dict: ...

    def save(self, state: dict) -> None: ...


class UpstreamFailure(Protocol):
    """How a call failed, as `rag.engine.llm.UpstreamError` says it."""

    kind: str
    status: int | None  # the HTTP status of an HTTP error
    retry_after: float | None  # seconds the upstream asked to wait (Retry-After)


@dataclass
class MemoryBreakerStore:
    state: dict = field(default_factory=dict)

    def load(self) -> dict:
        return dict(self.state)

    def save(self, state: dict) -> None:
        self.state = dict(state)


def upstream_answered(failure: UpstreamFailure) -> bool:
    """An HTTP 4xx other than 408 (timeout) and 429 (rate limit): the upstream is up and refused this request."""
    return failure.status is not None and 400 <= failure.status < 500 and failure.status not in (408, 429)


@dataclass
class CircuitBreaker:
    """Closed → open after `threshold` consecutive failures → half-open after `cooldown` s (one trial).

    A trial that succeeds closes the breaker; one that fails opens it again for another cool-down. An HTTP
    429 with Retry-After opens it until that time instead, whatever the count.
    """

    store: BreakerStore = field(default_factory=MemoryBreakerStore)
    threshold: int = 3
    cooldown: float = 30.0
    clock: object = time.time
    trial_timeout: float = 60.0  # a trial's read timeout when its caller names none (ChatClient's default)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def state(self) -> dict:
        """Return {state, failures, opened_at, last_failures, …} with `state` one of closed, open, half_open;
        `open_until` is set while a 429's Retry-After holds the breaker open."""
        data = {"state": "closed", "failures": 0, "opened_at": None, "last_failures": [], "trial": False,
                **self.store.load()}
        now = self.clock()
        if data["trial"] and now >= (data.get("trial_expires") or 0):
            data["trial"] = False  # the trial never reported back: let the next one go
        reopens = data.get("open_until") or (data["opened_at"] or 0) + self.cooldown
        if data["state"] == "open" and now >= reopens:
            data["state"] = "half_open"
        return data

    def attempt(self, *, timeout: float | None = None) -> Attempt | None:
        """Let a call go out now (an `Attempt` to report on), or None. In half-open only one trial does, until
        it reports back or `cooldown` + `timeout` (the caller's read timeout) pass."""
        with self._lock:
            data = self.state()
            if data["state"] == "closed":
                return Attempt(self, trial=False)
            if data["state"] == "half_open" and not data["trial"]:
                expires = self.clock() + self.cooldown + (self.trial_timeout if timeout is None else timeout)
                # The state stays open for everyone else until the trial ends or expires.
                self.store.save({**data, "state": "open", "trial": True, "trial_expires": expires})
                return Attempt(self, trial=True)
            return None

    def allow(self, *, timeout: float | None = None) -> bool:
        """May a call go out now? See `attempt`; the caller then records its success or failure itself."""
        return self.attempt(timeout=timeout) is not None

    def record_success(self) -> None:
        with self._lock:
            data = self.state()
            self.store.save({"state": "closed", "failures": 0, "opened_at": None,
                             "last_failures": data["last_failures"][-5:]})

    def record_failure(self, kind: str, *, retry_after: float | None = None) -> None:
        """Count a failure; with `retry_after` (a 429's Retry-After, seconds), open until then right away."""
        with self._lock:
            data = self.state()
            now = self.clock()
            failures = data["failures"] + 1
            last = (data["last_failures"] + [{"at": now, "kind": kind}])[-5:]
            if retry_after or data["trial"] or failures >= self.threshold:
                self.store.save({"state": "open", "failures": failures, "opened_at": now, "last_failures": last,
                                 "trial": False, "openings": data.get("openings", 0) + 1,
                                 **({"open_until": now + retry_after} if retry_after else {})})
            else:
                self.store.save({**data, "state": "closed", "failures": failures, "last_failures": last})

    def record_error(self, failure: UpstreamFailure) -> None:
        """Record a failed call by what the upstream said: a 4xx refusal is the upstream answering (a success
        for the breaker), a 429's Retry-After opens it until then, anything else is a failure of its kind."""
        if upstream_answered(failure):
            self.record_success()
        else:
            self.record_failure(failure.kind, retry_after=failure.retry_after if failure.status == 429 else None)


@dataclass
class Attempt:
    """One call the breaker let through: report `succeeded()` or `failed(error)`, inside `with attempt:`.

    Leaving the block unreported ends a trial as a failure ("abandoned"), so a reader that left or an
    exception that is not the upstream's never keeps the breaker open; outside a trial it records nothing
    (a reader leaving a healthy model is not the model's failure).
    """

    breaker: CircuitBreaker
    trial: bool
    reported: bool = False

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, *exc_info) -> None:
        if not self.reported and self.trial:
            self.reported = True
            self.breaker.record_failure(ABANDONED)

    def succeeded(self) -> None:
        self.reported = True
        self.breaker.record_success()

    def failed(self, failure: UpstreamFailure) -> None:
        self.reported = True
        self.breaker.record_error(failure)
