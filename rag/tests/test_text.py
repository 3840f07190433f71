"""BM25 tokens: jieba's prefix table read from a memory-mapped file segments exactly as jieba's own dict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rag.engine.text import PrefixDictionary

ROOT = Path(__file__).resolve().parents[2]

# Tokenize the fixture pages and some questions in a fresh process whose jieba cache folder is `argv[1]`;
# print the tokens and the kind of table jieba used.
TOKENIZE = """
import json, sys
from pathlib import Path
from rag.engine import text
from rag.engine.catalog import Catalog
from rag.engine.chunk import chunk_documents
from rag.engine.ingest import read_folder

text.set_cache_dir(sys.argv[1])
chunks = chunk_documents(read_folder(Path(sys.argv[2])))
text.add_words(Catalog.from_chunks(chunks).aliases_to_teach())
questions = ["透视相机的视野角度怎么设置？", "WebGLRenderer 怎么拿到上下文", "射线投射器检测子物体吗", "雾的颜色和浓度"]
tokens = [text.tokenize(c.embedding_text) for c in chunks] + [text.tokenize(q, characters=True) for q in questions]
print(json.dumps({"table": type(text._segmenter().dt.FREQ).__name__, "tokens": tokens}, ensure_ascii=False))
"""


def tokenize_in_a_fresh_process(cache_dir: Path, corpus: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", TOKENIZE, str(cache_dir), str(corpus)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_stored_prefix_table_segments_exactly_as_jiebas_own(tmp_path, fixture_corpus):
    first = tokenize_in_a_fresh_process(tmp_path, fixture_corpus)  # jieba loads its dict and the table is stored

    second = tokenize_in_a_fresh_process(tmp_path, fixture_corpus)

    assert (first["table"], second["table"]) == ("dict", "PrefixDictionary")
    assert len(list(tmp_path.glob("prefix-*.bin"))) == 1
    assert second["tokens"] == first["tokens"]


@pytest.fixture
def small_table(tmp_path) -> PrefixDictionary:
    path = tmp_path / "prefix.bin"
    PrefixDictionary.write(str(path), {"相": 10, "相机": 30, "透": 0, "透视": 5, "a": 0, "ab": 7}, total=52)
    return PrefixDictionary.open(str(path))


def test_a_stored_prefix_table_answers_like_a_dict(small_table):
    assert (small_table.total, small_table["相机"], small_table.get("透"), small_table.get("ab")) == (52, 30, 0, 7)
    assert "透" in small_table and "透视相机" not in small_table and "" not in small_table
    assert small_table.get("雾") is None and small_table.get("雾", 1) == 1
    with pytest.raises(KeyError):
        small_table["雾"]


def test_words_taught_at_run_time_sit_on_top_of_the_stored_table(small_table):
    small_table["透视相机"] = 20000
    small_table["相机"] = 1

    assert (small_table["透视相机"], small_table["相机"], small_table.get("透视")) == (20000, 1, 5)


def test_the_lookups_a_table_remembers_are_bounded_whatever_words_it_is_asked(small_table, monkeypatch):
    monkeypatch.setattr(PrefixDictionary, "KNOWN_LIMIT", 100)

    answers = [small_table.get(f"词{n}") for n in range(1000)]  # new words, as random questions bring

    assert answers == [None] * 1000 and len(small_table._known) <= 100
    assert small_table["相机"] == 30 and small_table.get("透") == 0  # forgetting costs only a lookup


@pytest.mark.parametrize("damage", [b"", b"not a table", None])
def test_a_missing_or_foreign_table_is_not_used(tmp_path, damage):
    path = tmp_path / "prefix.bin"
    if damage is None:
        PrefixDictionary.write(str(path), {"相机": 30}, total=30)
        path.write_bytes(path.read_bytes()[:-3])  # cut short
    elif damage:
        path.write_bytes(damage)

    assert PrefixDictionary.open(str(path)) is None
