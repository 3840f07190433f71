"""Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009)."""

from __future__ import annotations

RRF_K = 60  # the constant from Cormack et al. (2009)


def rrf_fuse(rankings: list[list[int]], *, k: int = RRF_K, weights: list[float] | None = None) -> list[tuple[int, float]]:
    """Fuse ranked lists of ids into one: score(d) = sum of weight / (k + rank), rank counted from 1."""
    scores: dict[int, float] = {}
    first_seen: dict[int, tuple[int, int]] = {}
    for list_no, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[list_no]
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            first_seen.setdefault(item, (rank, list_no))
    # Ties break on the best single rank, then on list order, so fusion is deterministic.
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))
