"""Which index versions other apps still need, as the `rag` app sees it: hooks they install.

Pruning (`rag.services.knowledge.index_prune`) never deletes a version a holder names. The evaluation app
installs one in `EvaluationConfig.ready` (the versions its queued and running runs evaluate), so `rag` never
imports an app above it. Kept free of the engine's imports: it is loaded when Django starts.
"""

from __future__ import annotations

from collections.abc import Callable

# kb slug -> names of that knowledge base's versions still needed
VersionHolder = Callable[[str], set[str]]
_holders: list[VersionHolder] = []


def version_holder_register(holder: VersionHolder) -> None:
    """Install a function naming the versions of a knowledge base that must not be pruned."""
    if holder not in _holders:
        _holders.append(holder)


def versions_held(kb: str) -> set[str]:
    """The versions of knowledge base `kb` some installed holder still needs."""
    held: set[str] = set()
    for holder in _holders:
        held |= holder(kb)
    return held
