"""Fixtures of the rag app's Django-level tests: a knowledge base built from a copy of the fixture corpus.

Index versions are files under the test RAG_DATA_DIR (shared by the whole session, so the embedding
cache there makes every build after the first fast); their rows live in the test database, so each
test builds its own version: the rows and the files always agree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rag.pipeline import get_engine, reset_engine

DOCS = Path(__file__).resolve().parents[2] / "docs"


def make_kb(source_dir, slug: str = "sdk"):
    from rag.services.knowledge import kb_ensure

    return kb_ensure(slug=slug, source_dir=str(source_dir))


def documented_example(page: str, member: str) -> dict:
    """Return the JSON example under the `### member` heading of a docs page (`en/cli.md`), to hold it to the
    object the interface really returns."""
    text = (DOCS / page).read_text(encoding="utf-8")
    section = re.search(rf"^### {re.escape(member)}(?:[ \t]*[(（][^\n]*)?$(.*?)(?=^##)", text, re.M | re.S)
    assert section, f"docs/{page} has no `### {member}` section"
    return json.loads(re.search(r"```json\n(.*?)```", section.group(1), re.S).group(1))


def make_built_kb(source_dir, slug: str = "sdk"):
    from rag.services.knowledge import index_build

    kb = make_kb(source_dir, slug=slug)
    index_build(kb)
    kb.refresh_from_db()
    return kb


@pytest.fixture
def built_kb(db, corpus_copy):
    """The knowledge base `sdk` over a writable copy of the fixture corpus, with one active version."""
    return make_built_kb(corpus_copy)


@pytest.fixture
def engine():
    return get_engine()


@pytest.fixture
def engine_settings(settings):
    """Change settings.RAG_ENGINE for one test: `engine_settings(KEEP_VERSIONS=2)`; the engine is rebuilt."""

    def change(**values):
        settings.RAG_ENGINE = {**settings.RAG_ENGINE, **values}
        reset_engine()

    reset_engine()
    yield change
    reset_engine()
