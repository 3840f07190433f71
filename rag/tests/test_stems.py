"""English stems for BM25, and versions built before them."""

from __future__ import annotations

import json

from rag.engine.index import MANIFEST, TOKENIZER, VersionReader
from rag.engine.text import tokenize


# -- stems -------------------------------------------------------------------------------------------


def test_english_words_and_identifier_parts_meet_on_their_stems():
    question = tokenize("objects cast no shadows when rotating", stem=True)
    page = tokenize("### .castShadow : Boolean — whether the object is rotated into the shadow map", stem=True)

    assert {"shadow", "cast", "object", "rotat"} <= set(question)
    assert {"castshadow", "cast", "shadow", "object", "rotat"} <= set(page)
    assert "shadows" in tokenize("objects cast no shadows")  # without stems, as versions built before them


def test_chinese_and_numbers_are_not_stemmed():
    assert tokenize("阴影贴图 2048 mapSize", stem=True) == tokenize("阴影贴图 2048 mapSize") == [
        "阴影", "贴图", "2048", "mapsize", "map", "size"]


# -- what a version keeps ----------------------------------------------------------------------------


def test_a_version_says_it_was_tokenized_with_stems_and_questions_are_read_the_same_way(built_index):
    reader = VersionReader.open(built_index.store, built_index.kb, built_index.version)

    assert (reader.manifest["tokenizer"], reader.stem) == (TOKENIZER, True)
    assert reader.tokenize("shadows") == ["shadow"]


def test_a_version_built_before_stems_reads_questions_without_them(built_index, tmp_path):
    import shutil

    from rag.engine.index import IndexStore

    store = IndexStore(lancedb_uri=built_index.store.lancedb_uri, index_dir=tmp_path / "index")
    folder = store.version_dir(built_index.kb, built_index.version)
    shutil.copytree(built_index.store.version_dir(built_index.kb, built_index.version), folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["tokenizer"]
    (folder / MANIFEST).write_text(json.dumps(manifest))

    reader = VersionReader.open(store, built_index.kb, built_index.version)

    assert (reader.stem, reader.tokenize("shadows")) == (False, ["shadows"])
