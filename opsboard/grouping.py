"""Grouping questions by meaning, for the coverage gaps (opsboard.gaps): plain functions over vectors.

The questions' vectors come from the engine's embedder (multilingual: a Chinese and an English question about
the same thing lie close). scikit-learn's agglomerative clustering joins questions whose average cosine
distance stays under a threshold, so the number of groups follows the questions, not a preset count; the
threshold was chosen on half A of a replayed log of the development sets (bench/gaps.py) and reported on both.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

import numpy as np

# Average cosine distance under which questions belong together (bench/gaps.py: tuned on half A, checked on B).
DISTANCE_THRESHOLD = 0.10
# Questions clustered per run: pairwise distances grow with the square of this (4,000 questions: 64 MB).
# The rest (the least asked) join the nearest group within the threshold, or stay ungrouped (counted).
MAX_CLUSTERED = 4_000

_SPACE = re.compile(r"\s+")
_EDGE = re.compile(r"^[\s\"'`“”‘’.,;:!?。，；：！？、…]+|[\s\"'`“”‘’.,;:!?。，；：！？、…]+$")


def question_key(question: str) -> str:
    """The form two wordings of one question share: Unicode-normalised (full-width to half-width), case-folded,
    runs of spaces collapsed, punctuation at both ends dropped. "How do I X?" and "how do i x" are one."""
    text = unicodedata.normalize("NFKC", question).casefold()
    return _EDGE.sub("", _SPACE.sub(" ", text)).strip()


def normalized_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def cluster(vectors: np.ndarray, *, threshold: float = DISTANCE_THRESHOLD) -> list[int]:
    """A group number per row: average-linkage agglomerative clustering on cosine distance, cut at `threshold`.
    Numbers are dense (0..k-1), the largest group first."""
    count = len(vectors)
    if count == 0:
        return []
    if count == 1:
        return [0]
    from sklearn.cluster import AgglomerativeClustering

    labels = AgglomerativeClustering(n_clusters=None, distance_threshold=threshold, metric="cosine",
                                     linkage="average").fit_predict(normalized_rows(vectors))
    order = {label: rank for rank, (label, _) in enumerate(Counter(labels.tolist()).most_common())}
    return [order[label] for label in labels.tolist()]


def nearest_groups(vectors: np.ndarray, centroids: np.ndarray, *, threshold: float = DISTANCE_THRESHOLD) -> list[int | None]:
    """For questions left out of the clustering: the nearest centroid's index when within `threshold`, else None."""
    if len(vectors) == 0 or len(centroids) == 0:
        return [None] * len(vectors)
    similarity = normalized_rows(vectors) @ normalized_rows(centroids).T
    best = similarity.argmax(axis=1)
    return [int(b) if 1 - similarity[i, b] <= threshold else None for i, b in enumerate(best)]


def centroids_of(vectors: np.ndarray, labels: list[int]) -> np.ndarray:
    """The normalised mean vector of each group (row k for group k)."""
    if not labels:
        return np.zeros((0, vectors.shape[1] if vectors.ndim == 2 else 0), dtype=np.float32)
    rows = normalized_rows(vectors)
    groups = max(labels) + 1
    sums = np.zeros((groups, rows.shape[1]), dtype=np.float32)
    np.add.at(sums, np.asarray(labels), rows)
    return normalized_rows(sums)


def purity(labels: list[int], truth: list[str], weights: list[int] | None = None) -> float:
    """Share of the questions (weighted) whose group's most common true topic is their own."""
    weights = weights or [1] * len(labels)
    by_group: dict[int, Counter] = {}
    for label, topic, weight in zip(labels, truth, weights):
        by_group.setdefault(label, Counter())[topic] += weight
    total = sum(weights)
    return sum(c.most_common(1)[0][1] for c in by_group.values()) / total if total else 0.0


def groups_to_cover(sizes: list[int], share: float = 0.9) -> int:
    """How many groups, largest first, a person must read to have seen `share` of the questions."""
    total, seen = sum(sizes), 0
    for read, size in enumerate(sorted(sizes, reverse=True), start=1):
        seen += size
        if seen >= share * total:
            return read
    return 0
