"""Questions as vectors, for the apps that compare questions with each other (the ops site's coverage gaps): the
engine's embedder and its query cache, so a question the engine already embedded is not embedded again."""

from __future__ import annotations

import numpy as np

from rag.pipeline import get_engine


def embedding_model() -> tuple[str, int]:
    """The id and dimension of the engine's embedder: vectors of another model are never compared with these."""
    embedder = get_engine().embedder
    return embedder.model_id, embedder.dimension


def question_vector(text: str) -> np.ndarray:
    """A question's vector as the engine embeds it for a search (float32)."""
    vector, _ = get_engine().queries.embed_query(text)
    return np.asarray(vector, dtype=np.float32)
