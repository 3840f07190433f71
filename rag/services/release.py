"""Release gates (V5) as the `rag` app sees them: a hook another app installs.

`rag reindex --gate` builds a candidate version and activates it only when a release gate passes. The
gate itself (golden sets, eval runs) belongs to the evaluation app, which registers it when Django starts
(`EvaluationConfig.ready`), so `rag` never imports an app above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from infra.errors import ServiceError
from rag.models import IndexVersion, KnowledgeBase


@dataclass(frozen=True)
class GateOutcome:
    """What a gated build did: the candidate version, whether it went live, and why not."""

    version: IndexVersion
    activated: bool
    runs: list = field(default_factory=list)  # one summary dict per evaluation run: id, golden_set, verdict, report
    failed_gates: list = field(default_factory=list)  # {golden_set, metric, op, threshold, value, status, note}


# (kb, progress, run_progress, user) -> GateOutcome
ReleaseGate = Callable[..., GateOutcome]
_gate: ReleaseGate | None = None


def release_gate_register(gate: ReleaseGate) -> None:
    """Install the function that builds, evaluates and activates a candidate version."""
    global _gate
    _gate = gate


def index_build_gated(kb: KnowledgeBase, *, progress=None, run_progress=None, user=None) -> GateOutcome:
    """Build a candidate of `kb` and activate it only if the installed release gate passes."""
    if _gate is None:
        raise ServiceError("release_gate_unavailable", "No release gate is installed (the evaluation app is "
                                                       "not in INSTALLED_APPS).", status=409)
    return _gate(kb, progress=progress, run_progress=run_progress, user=user)
