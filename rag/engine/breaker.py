"""Circuit breaker on the generation model (E9): closed, open after N consecutive failures, one half-open
trial after a cool-down. Its state lives in a `BreakerStore`, so processes can share one breaker."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol


class BreakerStore(Protocol):
    """Where the breaker keeps its state; the Django app shares it across processes through its cache."""

    def load(self) -> dict: ...

    def save(self, state: dict) -> None: ...


@dataclass
class MemoryBreakerStore:
    state: dict = field(default_factory=dict)

    def load(self) -> dict:
        return dict(self.state)

    def save(self, state: dict) -> None:
        self.state = dict(state)


@dataclass
class CircuitBreaker:
    """Closed → open after `threshold` consecutive failures → half-open after `cooldown` s (one trial).

    A trial that succeeds closes the breaker; one that fails opens it again for another cool-down.
    """

    store: BreakerStore = field(default_factory=MemoryBreakerStore)
    threshold: int = 3
    cooldown: float = 30.0
    clock: object = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def state(self) -> dict:
        """Return {state, failures, opened_at, last_failures} with `state` one of closed, open, half_open."""
        data = {"state": "closed", "failures": 0, "opened_at": None, "last_failures": [], **self.store.load()}
        if data["state"] == "open" and self.clock() - (data["opened_at"] or 0) >= self.cooldown:
            data["state"] = "half_open"
        return data

    def allow(self) -> bool:
        """May a call go out now? In half-open only one trial does, until it reports back."""
        with self._lock:
            data = self.state()
            if data["state"] == "closed":
                return True
            if data["state"] == "half_open" and not data.get("trial"):
                data["trial"] = True
                self.store.save({**data, "state": "open"})  # stays open for everyone else until the trial ends
                return True
            return False

    def record_success(self) -> None:
        with self._lock:
            data = self.state()
            self.store.save({"state": "closed", "failures": 0, "opened_at": None,
                             "last_failures": data["last_failures"][-5:]})

    def record_failure(self, kind: str) -> None:
        with self._lock:
            data = self.state()
            failures = data["failures"] + 1
            last = (data["last_failures"] + [{"at": self.clock(), "kind": kind}])[-5:]
            if data.get("trial") or failures >= self.threshold:
                self.store.save({"state": "open", "failures": failures, "opened_at": self.clock(),
                                 "last_failures": last, "trial": False,
                                 "openings": data.get("openings", 0) + 1})
            else:
                self.store.save({**data, "state": "closed", "failures": failures, "last_failures": last})

