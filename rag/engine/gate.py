"""The chitchat gate (E7): after the vector search, decide that a question is small talk, not about the docs."""

from __future__ import annotations

from dataclasses import dataclass

from .types import Plan


@dataclass(frozen=True, slots=True)
class ChitchatGate:
    """Decide that a question naming no class or member is not about the docs.

    Two signals: how close the nearest chunk is (cosine), and how many of the question's words the
    corpus uses at all. Their sum must clear the similarity of everyday-life probes to this corpus
    (measured at build time, see probes.py) by a margin, so the gate follows the model and corpus.
    """

    margin: float = 0.05
    coverage_weight: float = 0.1

    def is_chitchat(self, plan: Plan, best_dense: float, coverage: float, offtopic_similarity: float | None) -> bool:
        """Return whether a question naming nothing is no closer to the corpus than small talk, by the margin."""
        if plan.classes or plan.hinted_classes or plan.members or offtopic_similarity is None:
            return False
        return best_dense + self.coverage_weight * coverage < offtopic_similarity + self.margin

    def is_weak(self, plan: Plan, best_dense: float, coverage: float, offtopic_similarity: float | None) -> bool:
        """Evidence for a question naming no class or member that is no closer than small talk (no margin):
        an answer from it would be a guess, so it gets "insufficient material" instead."""
        if plan.classes or plan.members or offtopic_similarity is None:
            return False
        return best_dense + self.coverage_weight * coverage < offtopic_similarity
