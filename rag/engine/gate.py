"""The chitchat gate (E7): after the vector search, decide that a question is small talk, not about the docs.

The lexicon (smalltalk.py) has already taken greetings, thanks and questions about the assistant that say
nothing else. For the rest of the questions that name no class or member, two signals say chitchat and one
vetoes both:

- the question is closer to one of the chitchat exemplars (probes.EXEMPLARS) than to every chunk, by a
  margin: chitchat recognised from the question itself, whatever the corpus talks about;
- the question is no closer to the corpus than the off-topic probes are (the manifest's
  `offtopic_similarity`), by a margin: the calibration against the corpus;
- but a question that uses the corpus's own vocabulary (most of the IDF weight of its content words is in
  the BM25 vocabulary) is a documentation question, however far it sits in vector space.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .probes import EXEMPLARS
from .types import Plan


@dataclass(frozen=True, slots=True)
class ChitchatGate:
    """Decide that a question naming no class or member is not about the docs."""

    margin: float = 0.05  # over the probes' similarity to the corpus
    coverage_weight: float = 0.1
    # How much closer to a chitchat exemplar than to the nearest chunk a question must be. Measured with the
    # bundled model on the shared corpora's golden sets: small talk sits 0.035 to 0.11 closer to an exemplar,
    # documentation questions naming nothing at least 0.004 closer to a chunk.
    exemplar_margin: float = 0.02
    # IDF-weighted share of the content words the corpus uses at which a question is about the docs. Small
    # talk measured at most 0.43 on the shared corpora; a question in the docs' own words is near 1.
    vocabulary_share: float = 0.6

    def is_chitchat(self, plan: Plan, best_dense: float, coverage: float, offtopic_similarity: float | None, *,
                    exemplar_similarity: float | None = None, weighted_coverage: float | None = None,
                    same_language: bool = True) -> bool:
        """Return whether a question naming nothing is small talk: closer to chitchat than to the corpus, or no
        closer to the corpus than off-topic probes, unless it speaks the corpus's vocabulary. Across languages
        (a Chinese question over an English reference) every similarity to the corpus is compressed into a
        narrower band, so the probes of the question's language set the level without the margin."""
        if names_something(plan) or self.uses_vocabulary(weighted_coverage):
            return False
        if exemplar_similarity is not None and exemplar_similarity >= best_dense + self.exemplar_margin:
            return True
        if offtopic_similarity is None:
            return False
        margin = self.margin if same_language else 0.0
        return best_dense + self.coverage_weight * coverage < offtopic_similarity + margin

    def is_weak(self, plan: Plan, best_dense: float, coverage: float, offtopic_similarity: float | None, *,
                weighted_coverage: float | None = None) -> bool:
        """Evidence for a question naming no class or member that is no closer than small talk (no margin):
        an answer from it would be a guess, so it gets "insufficient material" instead. A question in the
        corpus's vocabulary is not weak merely for its distance in vector space."""
        if plan.classes or plan.members or offtopic_similarity is None or self.uses_vocabulary(weighted_coverage):
            return False
        return best_dense + self.coverage_weight * coverage < offtopic_similarity

    def uses_vocabulary(self, weighted_coverage: float | None) -> bool:
        """Return whether a question's content words are mostly the corpus's own (None: not measured)."""
        return weighted_coverage is not None and weighted_coverage >= self.vocabulary_share


def weighted_coverage(tokens: Iterable[str], document_frequency, num_docs: int) -> float:
    """Return the share of the tokens' IDF weight carried by tokens the corpus uses (0.0 for no tokens).

    `document_frequency(token)` is the number of chunks holding a token, 0 when none does. The weight is
    BM25's IDF, log(1 + (N - df + 0.5) / (df + 0.5)) (Robertson and Spärck Jones, as Lucene uses it), so a
    word the corpus never uses weighs most and a word in every chunk ("use", 怎么) hardly counts: 「帮我写一首
    秋天的诗」 on an API reference is mostly 秋天 and 诗, however many chunks say 写.
    """
    total = known = 0.0
    for token in tokens:
        df = document_frequency(token)
        weight = math.log(1.0 + (num_docs - df + 0.5) / (df + 0.5))
        total += weight
        if df:
            known += weight
    return known / total if total else 0.0


@dataclass
class ExemplarVectors:
    """The chitchat exemplars' vectors, embedded once per embedding model and process."""

    texts: tuple[str, ...] = EXEMPLARS
    _vectors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def vectors(self, embedder) -> np.ndarray:
        """Return one row per exemplar from this embedder's model (embedded as queries, like questions)."""
        key = embedder.model_id
        vectors = self._vectors.get(key)
        if vectors is None:
            with self._lock:
                vectors = self._vectors.get(key)
                if vectors is None:
                    vectors = np.stack([np.asarray(embedder.embed_query(t), dtype=np.float32) for t in self.texts])
                    vectors.setflags(write=False)
                    self._vectors[key] = vectors
        return vectors

    def similarity(self, embedder, vector: np.ndarray) -> float:
        """Return the cosine similarity of a (normalised) question vector to its nearest exemplar."""
        return float((self.vectors(embedder) @ vector).max())


EXEMPLAR_VECTORS = ExemplarVectors()  # shared by every searcher of the process


def names_something(plan: Plan) -> bool:
    """A class or member named, or everyday words the table maps to the docs' terms: about the docs."""
    return bool(plan.classes or plan.hinted_classes or plan.members or plan.expansions)
