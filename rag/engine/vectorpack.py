"""Vectors shipped beside a source folder, so a knowledge base bundled with the product builds in seconds.

A pack is `<source>/.rag-vectors/<model>.npz`: the text hash of each chunk's embedding text, its vector (float16,
half the size, renormalised on reading) and the model that made it. A build takes a chunk's vector from the
pack when the hash matches, exactly as it takes it from the embedding cache; chunks edited since the pack was
written are embedded as usual, so a stale pack only costs time. The folder is hidden, so ingest skips it.
`python manage.py rag vectors` writes the pack of a knowledge base from its current sources.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

PACK_DIR = ".rag-vectors"


def pack_path(source_dir: Path, model_id: str) -> Path:
    """Where the pack of a model lives in a source folder (the model id made a safe file name)."""
    return Path(source_dir) / PACK_DIR / (re.sub(r"[^A-Za-z0-9._-]+", "-", model_id).strip("-") + ".npz")


def read_pack(source_dir: Path, model_id: str, dimension: int) -> dict[str, np.ndarray]:
    """The vectors of a source folder's pack for this model, by text hash; {} when there is none or it does not fit.

    A pack of another model or dimension, or one that cannot be read, is ignored: the build embeds instead.
    """
    path = pack_path(source_dir, model_id)
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["model_id"]) != model_id:
                return {}
            hashes = [str(h) for h in data["hashes"]]
            vectors = data["vectors"].astype(np.float32)
    except (OSError, KeyError, ValueError):
        return {}
    if vectors.ndim != 2 or vectors.shape != (len(hashes), dimension):
        return {}
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    return dict(zip(hashes, vectors))


def write_pack(source_dir: Path, model_id: str, hashes: list[str], vectors: np.ndarray) -> Path:
    """Write (replace) the pack of a model in a source folder; hashes sorted, so equal inputs give equal files."""
    if vectors.shape[0] != len(hashes):
        raise ValueError(f"{len(hashes)} hashes for {vectors.shape[0]} vectors")
    order = sorted(range(len(hashes)), key=hashes.__getitem__)
    path = pack_path(source_dir, model_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial.npz")
    np.savez_compressed(partial, model_id=np.array(model_id), hashes=np.array([hashes[i] for i in order]),
                        vectors=vectors[order].astype(np.float16))
    partial.replace(path)
    return path
