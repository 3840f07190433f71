"""Index (E3): build one version of both indexes (LanceDB vectors, bm25s keywords) and open it for search.

A version lives in two places: a LanceDB table `<kb>__<version>` (chunks, metadata, vectors) in the
LanceDB database, and a folder `<index_dir>/<kb>/<version>/` holding the BM25 index, the class catalog
and a manifest. The manifest is written last, so a folder without one is a build that did not finish.

LanceDB is the store of record. A version small enough to be searched in memory also gets a copy of its
chunks (`chunks.json`) and vectors (`vectors.npy`) in its folder, listed in the manifest with their size
and SHA-1, so opening it needs only numpy and json: importing LanceDB costs seconds, which a one-shot
`rag search` would pay on every question. Versions without those files (built before them, or searched
through the ANN index) are read from LanceDB.

On object storage (objects.py) the LanceDB database is a bucket prefix and the folders are published beside it
once complete, manifest last; each machine opens a version from its own copy of the folder, fetched once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

os.environ.setdefault("LANCEDB_LOG", "error")  # LanceDB warns on every new table

from .catalog import Catalog  # noqa: E402
from .objects import RemoteFolders  # noqa: E402
from .probes import PROBES, probe_language  # noqa: E402
from .embed import Embedder  # noqa: E402
from .text import DEFINED_NAME_RE, add_words, tokenize  # noqa: E402
from .types import Chunk  # noqa: E402

EMBEDDING_CACHE_TABLE = "embedding_cache"
MANIFEST = "manifest.json"
CHUNKS_FILE = "chunks.json"
VECTORS_FILE = "vectors.npy"
FIELD_VECTORS_FILE = "field_vectors.npy"  # each chunk's field (Chunk.field_text): the member field route reads it
TOKENIZER = "stem"  # how this build tokenizes for BM25 (text.tokenize); a version built before says nothing
# The chunk fields in the order of the LanceDB table (and of the columns of chunks.json).
CHUNK_FIELDS = ("chunk_id", "source", "title", "class_name", "class_alias", "member", "heading_path",
                "chunk_index", "part", "text", "summary", "anchor", "kind")
OPTIONAL_FIELDS = {"summary", "anchor", "kind"}  # absent in versions built before them: read as ""


class IndexError_(Exception):
    """A build that cannot complete or a version that cannot be opened."""


@dataclass(frozen=True, slots=True)
class BuildReport:
    version: str
    chunk_count: int
    embedded: int
    reused: int
    dimension: int
    model_id: str
    timings_s: dict
    fields_embedded: int = 0  # distinct field texts embedded now (Chunk.field_text)


def table_name(kb: str, version: str) -> str:
    """LanceDB's table of a version: an SDK version's `three@2.0` is written `three.2.0` (a slug holds no dot)."""
    return f"{kb.replace('@', '.')}__{version}"


def _connect(uri: str, storage_options: dict | None = None):
    import lancedb

    return lancedb.connect(uri, storage_options=storage_options or None)


def _bm25s():
    """Import bm25s with its logger quietened (it logs each index build at DEBUG with its own handler)."""
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def _table_exists(db, name: str) -> bool:
    token = None
    while True:
        page = db.list_tables(page_token=token)
        if name in page.tables:
            return True
        token = page.page_token
        if not token:
            return False


def _chunk_table(chunks: list[Chunk], vectors: np.ndarray):
    import pyarrow as pa

    dimension = vectors.shape[1]
    return pa.table(
        {
            "chunk_id": [c.chunk_id for c in chunks],
            "source": [c.source for c in chunks],
            "title": [c.title for c in chunks],
            "class_name": [c.class_name for c in chunks],
            "class_alias": [c.class_alias for c in chunks],
            "member": [c.member for c in chunks],
            "heading_path": [json.dumps(list(c.heading_path), ensure_ascii=False) for c in chunks],
            "chunk_index": pa.array([c.chunk_index for c in chunks], pa.int32()),
            "part": pa.array([c.part for c in chunks], pa.int32()),
            "text": [c.text for c in chunks],
            "summary": [c.summary for c in chunks],
            "anchor": [c.anchor for c in chunks],
            "kind": [c.kind for c in chunks],
            "text_hash": [c.text_hash for c in chunks],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), dimension),
        }
    )


def _chunks_from_arrow(table) -> list[Chunk]:
    columns = table.to_pydict()
    return [
        Chunk(
            chunk_id=columns["chunk_id"][i],
            source=columns["source"][i],
            title=columns["title"][i],
            class_name=columns["class_name"][i],
            class_alias=columns["class_alias"][i],
            member=columns["member"][i],
            heading_path=tuple(json.loads(columns["heading_path"][i])),
            chunk_index=columns["chunk_index"][i],
            part=columns["part"][i],
            text=columns["text"][i],
            summary=columns["summary"][i] if "summary" in columns else "",
            anchor=columns["anchor"][i] if "anchor" in columns else "",
            kind=columns["kind"][i] if "kind" in columns else "",
        )
        for i in range(table.num_rows)
    ]


def _file_entry(data: bytes | memoryview) -> dict:
    return {"bytes": len(data) if isinstance(data, bytes) else data.nbytes, "sha1": hashlib.sha1(data).hexdigest()}


def write_memory_files(folder: Path, chunks: list[Chunk], vectors: np.ndarray, field_vectors: np.ndarray) -> dict:
    """Write the chunks (as columns), vectors and field vectors an in-memory search needs; return their manifest
    entries."""
    columns: dict[str, list] = {name: [] for name in CHUNK_FIELDS}
    for chunk in chunks:
        for name in CHUNK_FIELDS:
            value = getattr(chunk, name)
            columns[name].append(list(value) if name == "heading_path" else value)
    data = json.dumps(columns, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    (folder / CHUNKS_FILE).write_bytes(data)
    entries = {CHUNKS_FILE: _file_entry(data)}
    for name, array in ((VECTORS_FILE, vectors), (FIELD_VECTORS_FILE, field_vectors)):
        array = np.ascontiguousarray(array, dtype=np.float32)
        np.save(folder / name, array, allow_pickle=False)
        # The checksum covers the array's bytes, which np.load returns without a second read.
        entries[name] = _file_entry(memoryview(array).cast("B"))
    return entries


def _read_memory_files(folder: Path, manifest: dict) -> tuple[list[Chunk], np.ndarray, np.ndarray | None]:
    """Read and check chunks.json, vectors.npy and field_vectors.npy (None in a version built before them) against
    the manifest; raise IndexError_ when they do not match."""
    entries = manifest["memory_files"]
    count, dimension = manifest["chunk_count"], manifest["dimension"]
    try:
        data = (folder / CHUNKS_FILE).read_bytes()
        if _file_entry(data) != entries[CHUNKS_FILE]:
            raise IndexError_(f"{CHUNKS_FILE} does not match the manifest (size or checksum)")
        columns = json.loads(data)
        if not isinstance(columns, dict):
            raise IndexError_(f"{CHUNKS_FILE} does not hold {count} chunks")
        for name in OPTIONAL_FIELDS - columns.keys():
            columns[name] = [""] * count
        if any(len(columns.get(name, ())) != count for name in CHUNK_FIELDS):
            raise IndexError_(f"{CHUNKS_FILE} does not hold {count} chunks")
        chunks = [
            Chunk(**{name: tuple(value) if name == "heading_path" else value for name, value in zip(CHUNK_FIELDS, row)})
            for row in zip(*(columns[name] for name in CHUNK_FIELDS))
        ]
        vectors = _read_vectors(folder, VECTORS_FILE, entries[VECTORS_FILE], (count, dimension))
        field_vectors = None
        if FIELD_VECTORS_FILE in entries:
            field_vectors = _read_vectors(folder, FIELD_VECTORS_FILE, entries[FIELD_VECTORS_FILE], (count, dimension))
    except IndexError_:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:  # missing, truncated or not what it claims
        raise IndexError_(f"cannot read the in-memory files of version {manifest.get('version')}: "
                          f"{type(exc).__name__}: {exc}") from exc
    return chunks, vectors, field_vectors


def _read_vectors(folder: Path, name: str, entry: dict, shape: tuple[int, int]) -> np.ndarray:
    vectors = np.load(folder / name, allow_pickle=False)
    if vectors.dtype != np.float32 or vectors.shape != shape or not vectors.flags.c_contiguous:
        raise IndexError_(f"{name} holds {vectors.dtype} {vectors.shape}, expected float32 {shape}")
    if _file_entry(memoryview(vectors).cast("B")) != entry:
        raise IndexError_(f"{name} does not match the manifest (checksum)")
    return vectors


@dataclass
class EmbeddingCache:
    """Vectors already computed, keyed by (model, text hash), kept in LanceDB across versions (E10).

    One table per vector dimension (a fixed-size column holds one size), shared by the models of that size.
    """

    uri: str
    dimension: int
    storage_options: dict = field(default_factory=dict)  # LanceDB's, for an object storage URI

    @property
    def table(self) -> str:
        return f"{EMBEDDING_CACHE_TABLE}_{self.dimension}"

    def lookup(self, model_id: str, hashes: list[str]) -> dict[str, np.ndarray]:
        import pyarrow as pa
        import pyarrow.compute as pc

        db = _connect(self.uri, self.storage_options)
        if not _table_exists(db, self.table):
            return {}
        try:
            table = db.open_table(self.table).to_arrow()
        except ValueError:  # listed while another process was still creating it: nothing cached yet for us
            return {}
        wanted = pc.and_(pc.equal(table.column("model_id"), model_id),
                         pc.is_in(table.column("text_hash"), value_set=pa.array(sorted(set(hashes)))))
        found = table.filter(wanted)
        if found.num_rows == 0:
            return {}
        keys = found.column("text_hash").to_pylist()
        vectors = found.column("vector").combine_chunks().flatten().to_numpy().reshape(found.num_rows, -1)
        return dict(zip(keys, vectors))

    def store(self, model_id: str, hashes: list[str], vectors: np.ndarray) -> None:
        import pyarrow as pa

        if not hashes:
            return
        if vectors.shape != (len(hashes), self.dimension):
            raise IndexError_(f"refusing to cache vectors of shape {vectors.shape}; expected {self.dimension} dims")
        data = pa.table(
            {
                "model_id": [model_id] * len(hashes),
                "text_hash": hashes,
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.astype(np.float32).ravel(), pa.float32()), self.dimension
                ),
            }
        )
        db = _connect(self.uri, self.storage_options)
        if not _table_exists(db, self.table):
            try:
                db.create_table(self.table, data=data)
                return
            except (ValueError, OSError):  # another process created it first: add to theirs
                pass
        db.open_table(self.table).add(data)


@dataclass(frozen=True)
class Embedded:
    """What embedding a version's chunks gave: a vector per chunk and per chunk's field (Chunk.field_text)."""

    vectors: np.ndarray
    field_vectors: np.ndarray
    hashes: list[str]  # the chunks' text hashes, then their fields'
    embedded: int  # distinct chunk texts embedded now
    fields_embedded: int  # distinct field texts embedded now (not also a chunk's text)
    reused: int  # chunks whose vector came from the cache or a pack
    timings: dict[str, float]


@dataclass
class IndexStore:
    """Where versions live: a LanceDB database and a folder for BM25 files and manifests.

    With `remote` (object storage, objects.py) the version folders live in the bucket and `index_dir` holds this
    machine's copies: a build publishes its folder there, the manifest last; opening a version fetches it once.
    """

    lancedb_uri: str
    index_dir: Path
    ann_min_vectors: int = 30_000  # above this, search LanceDB's ANN index instead of numpy in memory
    checkpoint_texts: int = 256  # a build stores the vectors it computed each time this many are new (resumable)
    remote: RemoteFolders | None = None
    storage_options: dict = field(default_factory=dict)  # LanceDB's, when lancedb_uri is on object storage

    def version_dir(self, kb: str, version: str) -> Path:
        return Path(self.index_dir) / kb / version

    def connect(self):
        return _connect(self.lancedb_uri, self.storage_options)

    def load_manifest(self, kb: str, version: str) -> dict:
        """A finished version's manifest, its folder fetched from object storage first when it is not here yet
        (or differs from the published one); raise IndexError_ for a missing or unfinished version."""
        folder = self.version_dir(kb, version)
        if self.remote is None:
            path = folder / MANIFEST
            if not path.exists():
                raise IndexError_(f"index version {version} of {kb} is missing or unfinished")
            return json.loads(path.read_text(encoding="utf-8"))
        try:
            published = self.remote.read(f"{kb}/{version}/{MANIFEST}")
        except OSError as exc:
            raise IndexError_(f"cannot read version {version} of {kb} from {self.remote.uri}: {exc}") from exc
        if published is None:
            raise IndexError_(f"index version {version} of {kb} is missing or unfinished in {self.remote.uri}")
        local = folder / MANIFEST
        if not (local.exists() and local.read_bytes() == published):
            self._fetch(kb, version, published)
            self._tidy_copies(kb)
        return json.loads(published)

    def _tidy_copies(self, kb: str) -> None:
        """Remove this machine's copies of versions no longer published (pruned by a worker anywhere)."""
        for folder in Path(self.index_dir, kb).iterdir():  # a build in progress here has no manifest yet
            if (folder / MANIFEST).exists() and not self.exists(kb, folder.name):
                shutil.rmtree(folder, ignore_errors=True)

    def _fetch(self, kb: str, version: str, manifest: bytes) -> None:
        """Copy a published folder into a staging folder beside its place, then move it there whole."""
        folder = self.version_dir(kb, version)
        staging = folder.parent / f".{version}.{os.getpid()}.{threading.get_ident()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            self.remote.download(f"{kb}/{version}", staging, skip=MANIFEST)
            (staging / MANIFEST).write_bytes(manifest)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staging, folder)
        except OSError as exc:
            if (folder / MANIFEST).exists() and (folder / MANIFEST).read_bytes() == manifest:
                return  # another process of this machine fetched it first
            raise IndexError_(f"cannot fetch version {version} of {kb} from {self.remote.uri}: {exc}") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def embed_chunks(self, chunks: list[Chunk], embedder: Embedder, *, progress=None,
                     prebuilt: dict[str, np.ndarray] | None = None) -> "Embedded":
        """The vector of every chunk and of its field (Chunk.field_text), in one pass: from the embedding cache,
        else from `prebuilt` (a source folder's pack, see vectorpack.py), else embedded now and cached."""
        count = len(chunks)
        texts = [c.embedding_text for c in chunks] + [c.field_text for c in chunks]
        hashes = [c.text_hash for c in chunks] + [c.field_hash for c in chunks]
        vectors, missing, timings = self._embed_texts(texts, hashes, embedder, progress=progress, prebuilt=prebuilt)
        return Embedded(
            vectors=vectors[:count], field_vectors=vectors[count:], hashes=hashes,
            embedded=len({h for h in hashes[:count] if h in missing}),
            fields_embedded=len({h for h in hashes[count:] if h in missing} - set(hashes[:count])),
            reused=sum(1 for h in hashes[:count] if h not in missing), timings=timings)

    def _embed_texts(self, texts: list[str], hashes: list[str], embedder: Embedder, *, progress=None,
                     prebuilt: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, set[str], dict[str, float]]:
        """The vectors of texts by hash (cache, pack, else embedded now, each distinct text once); the hashes
        embedded now; timings."""
        timings: dict[str, float] = {}
        started = time.perf_counter()
        cache = EmbeddingCache(self.lancedb_uri, embedder.dimension, self.storage_options)
        known = cache.lookup(embedder.model_id, hashes)
        shipped = {h: prebuilt[h] for h in set(hashes) - known.keys() if prebuilt and h in prebuilt}
        unique_missing: dict[str, int] = {}
        for i, h in enumerate(hashes):
            if h not in known and h not in shipped:
                unique_missing.setdefault(h, i)
        timings["cache_lookup"] = time.perf_counter() - started

        t0 = time.perf_counter()
        if shipped:
            cache.store(embedder.model_id, list(shipped), np.stack(list(shipped.values())))
        new_vectors: dict[str, np.ndarray] = {}
        unstored: list[str] = []  # embedded since the last checkpoint
        order = list(unique_missing.items())
        batch = 16
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            vectors = embedder.embed_passages([texts[i] for _, i in part])
            if vectors.ndim != 2 or vectors.shape != (len(part), embedder.dimension):
                raise IndexError_(f"embedder returned vectors of shape {vectors.shape}, expected "
                                  f"{len(part)} x {embedder.dimension} dims")
            for (h, _), v in zip(part, vectors):
                new_vectors[h] = v
                unstored.append(h)
            if len(unstored) >= self.checkpoint_texts:
                # A build killed or failed from here on resumes after this point: its next try finds these cached.
                cache.store(embedder.model_id, unstored, np.stack([new_vectors[h] for h in unstored]))
                unstored = []
            if progress:
                progress(min(start + batch, len(order)), len(order))
        if unstored:
            cache.store(embedder.model_id, unstored, np.stack([new_vectors[h] for h in unstored]))
        if progress and not order:
            progress(0, 0)  # nothing to embed: still a sign of life
        timings["embed"] = time.perf_counter() - t0
        fresh = {**shipped, **new_vectors}
        vectors = np.stack([known[h] if h in known else fresh[h] for h in hashes]).astype(np.float32)
        return vectors, set(unique_missing), timings

    def build(self, kb: str, version: str, chunks: list[Chunk], embedder: Embedder, progress=None,
              prebuilt: dict[str, np.ndarray] | None = None) -> BuildReport:
        """Embed (reusing known vectors), write both indexes, validate; raise on any failure, leaving no version."""
        if not chunks:
            raise IndexError_("no chunks to index: the source folder holds no Markdown or HTML pages")
        started = time.perf_counter()
        found = self.embed_chunks(chunks, embedder, progress=progress, prebuilt=prebuilt)
        vectors, embedded, timings = found.vectors, found.embedded, found.timings

        def phase_done() -> None:
            """Report progress between the phases after embedding too, so a long BM25 build or vector write still
            beats (a silent build is taken for one whose process died)."""
            if progress is not None:
                progress(embedded, embedded)

        t0 = time.perf_counter()
        folder = self.version_dir(kb, version)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        try:
            catalog = Catalog.from_chunks(chunks)
            add_words(catalog.aliases_to_teach())
            corpus_tokens = [tokenize(bm25_text(c), stem=True) for c in chunks]
            timings["tokenize"] = time.perf_counter() - t0
            phase_done()

            t0 = time.perf_counter()
            bm25s = _bm25s()
            bm25 = bm25s.BM25()
            bm25.index(indexable(corpus_tokens), show_progress=False)
            bm25.save(str(folder / "bm25"), show_progress=False)
            build_head_index(chunks, stem=True).save(str(folder / "bm25_head"), show_progress=False)
            phase_done()
            (folder / "catalog.json").write_text(json.dumps(catalog.to_dict(), ensure_ascii=False), encoding="utf-8")

            db = self.connect()
            table = db.create_table(table_name(kb, version), data=_chunk_table(chunks, vectors), mode="overwrite")
            memory_files = None
            if len(chunks) > self.ann_min_vectors:
                from lancedb.index import IvfHnswSq

                table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
            else:
                memory_files = write_memory_files(folder, chunks, vectors, found.field_vectors)
            if table.count_rows() != len(chunks):
                raise IndexError_(f"vector table holds {table.count_rows()} rows, expected {len(chunks)}")
            timings["write"] = time.perf_counter() - t0
            phase_done()

            t0 = time.perf_counter()
            probe_vectors = np.stack([embedder.embed_query(p) for p in PROBES])
            nearest = (probe_vectors @ vectors.T).max(axis=1)
            manifest = {
                "offtopic_similarity": float(nearest.max()),
                "language": corpus_language(chunks),
                "offtopic_similarity_by_language": {
                    language: float(max(s for s, probe in zip(nearest, PROBES) if probe_language(probe) == language))
                    for language in sorted({probe_language(p) for p in PROBES})},
                "kb": kb,
                "version": version,
                "model_id": embedder.model_id,
                "dimension": int(vectors.shape[1]),
                "chunk_count": len(chunks),
                "tokenizer": TOKENIZER,
                "built_at": time.time(),
            }
            if memory_files is not None:
                manifest["memory_files"] = memory_files
            self._validate(kb, version, manifest, chunks, vectors)
            timings["validate"] = time.perf_counter() - t0
            if self.remote is not None:  # the manifest last, there and here: a copy with one is a published one
                t0 = time.perf_counter()
                self.remote.publish(folder, f"{kb}/{version}", last=(MANIFEST, json.dumps(manifest).encode()))
                timings["publish"] = time.perf_counter() - t0
            (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        except Exception:
            self.delete(kb, version)
            raise
        timings["total"] = time.perf_counter() - started
        return BuildReport(
            version=version,
            chunk_count=len(chunks),
            embedded=embedded,
            reused=found.reused,
            fields_embedded=found.fields_embedded,
            dimension=int(vectors.shape[1]),
            model_id=embedder.model_id,
            timings_s={k: round(v, 3) for k, v in timings.items()},
        )

    def _validate(self, kb: str, version: str, manifest: dict, chunks: list[Chunk], vectors: np.ndarray) -> None:
        """Check counts and dimension, then run a smoke query: the first chunk must find itself."""
        reader = VersionReader.open(self, kb, version, manifest=manifest)
        if reader.count != len(chunks):
            raise IndexError_(f"the version holds {reader.count} chunks, expected {len(chunks)}")
        if reader.chunks != chunks:
            raise IndexError_("the chunks read back differ from the chunks built")
        if reader.bm25_count != len(chunks):
            raise IndexError_(f"BM25 index holds {reader.bm25_count} documents, expected {len(chunks)}")
        if reader.dimension != manifest["dimension"]:
            raise IndexError_("vector dimension does not match the manifest")
        probe = 0
        ids, _ = reader.dense_search(vectors[probe], 5)
        if probe not in ids:
            raise IndexError_("smoke query failed: a chunk's own vector did not find it")
        scores = reader.bm25_scores(reader.tokenize(bm25_text(chunks[probe]))[:32])
        if scores.shape[0] != len(chunks) or scores[probe] <= 0:
            raise IndexError_("smoke query failed: BM25 did not score a chunk on its own words")

    def delete(self, kb: str, version: str) -> None:
        """Remove a version's files (published ones too) and table; missing pieces are fine."""
        if self.remote is not None:
            self.remote.delete(f"{kb}/{version}")
        shutil.rmtree(self.version_dir(kb, version), ignore_errors=True)
        db = self.connect()
        if _table_exists(db, table_name(kb, version)):
            db.drop_table(table_name(kb, version))

    def exists(self, kb: str, version: str) -> bool:
        if self.remote is not None:
            return self.remote.read(f"{kb}/{version}/{MANIFEST}") is not None
        return (self.version_dir(kb, version) / MANIFEST).exists()


def corpus_language(chunks: list[Chunk]) -> str:
    """The language most chunks are written in, "zh" or "en" (probes.probe_language of each chunk's text)."""
    chinese = sum(1 for c in chunks if probe_language(c.text) == "zh")
    return "zh" if chinese * 2 > len(chunks) else "en"


HEAD_PARAMETERS = 16  # parameter names a member's head field keeps


def head_text(chunk: Chunk) -> str:
    """Return a member's name, first sentence and parameter names: the field that says what the member is for
    and what it takes (a constructor documented with an options list is found by an option's name)."""
    if not chunk.member or chunk.part:
        return ""
    body = [line.strip() for line in chunk.text.splitlines()[1:] if line.strip() and not line.startswith(("#", "```"))]
    first = re.split(r"(?<=[。！？.!?])\s*", body[0])[0] if body else ""
    names = [m.group(1) for line in body if (m := DEFINED_NAME_RE.match(line)) and m.group(1) != chunk.member]
    parameters = " ".join(list(dict.fromkeys(names))[:HEAD_PARAMETERS])
    return f"{chunk.member} {first[:120]} {parameters}".rstrip()


def build_head_index(chunks: list[Chunk], *, stem: bool = False):
    """BM25 over member names and first sentences only, so a member that is *about* the question's words
    outranks a long chunk that merely mentions them."""
    head = _bm25s().BM25()
    head.index(indexable([tokenize(head_text(c), characters=True, stem=stem) for c in chunks]), show_progress=False)
    return head


EMPTY_TOKEN = "\x00"  # no question tokenizes to it


def indexable(corpus_tokens: list[list[str]]) -> list[list[str]]:
    """A corpus bm25s can index: one with no token at all (a knowledge base without members has an empty member
    field everywhere) gets a token no question has, since bm25s cannot build an empty vocabulary."""
    if any(corpus_tokens):
        return corpus_tokens
    return [[EMPTY_TOKEN] for _ in corpus_tokens]


def bm25_text(chunk: Chunk) -> str:
    """Return the text BM25 indexes: class names and the heading path in front of the body, like the vector side."""
    return chunk.embedding_text


@dataclass
class VersionReader:
    """One opened version: chunks, catalog, BM25 index, vectors (in memory, or LanceDB's ANN index when large)."""

    kb: str
    version: str
    manifest: dict
    chunks: list[Chunk]
    catalog: Catalog
    bm25: object
    vectors: np.ndarray | None
    table: object
    head: object  # BM25 over member names and first sentences
    field_vectors: np.ndarray | None = None  # each chunk's field vector; None: ANN-searched or built before them
    _class_token_cache: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        """Derive the per-chunk lookups a search needs: class codes, chunk ids, member positions."""
        self.stem = self.manifest.get("tokenizer") == TOKENIZER
        self._class_codes = {name: i for i, name in enumerate(sorted({c.class_name for c in self.chunks}))}
        self.chunk_classes = np.array([self._class_codes[c.class_name] for c in self.chunks], dtype=np.int32)
        self._id_index = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        members: dict[str, list[int]] = {}
        for i, chunk in enumerate(self.chunks):
            if chunk.member:
                members.setdefault(chunk.member, []).append(i)
        self._member_positions = {m: np.array(p, dtype=np.int64) for m, p in members.items()}
        self.member_chunks = np.array([bool(c.member) for c in self.chunks], dtype=bool)
        self._sections: dict[tuple[str, str], int] = {}  # (class, member) -> its section's first chunk
        self._groups: dict[tuple[str, tuple[str, ...]], int] = {}  # (page, (title, "## group")) -> the group's note
        for i, chunk in enumerate(self.chunks):
            if chunk.member:
                self._sections.setdefault((chunk.class_name, chunk.member), i)
            elif len(chunk.heading_path) == 2:
                self._groups.setdefault((chunk.source, chunk.heading_path), i)
            elif len(chunk.heading_path) == 1:  # a short page: its groups' notes share its first chunk
                for group in re.findall(r"^##\s+(.+?)\s*$", chunk.text, re.MULTILINE):
                    self._groups.setdefault((chunk.source, (chunk.heading_path[0], group)), i)

    @classmethod
    def open(cls, store: IndexStore, kb: str, version: str, *, manifest: dict | None = None) -> "VersionReader":
        """Open a finished version: from its own files when searched in memory, else through LanceDB."""
        folder = store.version_dir(kb, version)
        if manifest is None:
            manifest = store.load_manifest(kb, version)
        in_memory = manifest["chunk_count"] <= store.ann_min_vectors
        table = field_vectors = None
        if in_memory and "memory_files" in manifest:
            chunks, vectors, field_vectors = _read_memory_files(folder, manifest)
        else:  # built before the in-memory files, or searched through the ANN index
            db = store.connect()
            table = db.open_table(table_name(kb, version))
            columns = table.to_arrow() if in_memory else table.search().select(
                [c for c in table.schema.names if c != "vector"]).limit(None).to_arrow()
            chunks = _chunks_from_arrow(columns)
            vectors = None
            if in_memory:
                vectors = columns.column("vector").combine_chunks().flatten().to_numpy().reshape(len(chunks), -1)
                vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        bm25s = _bm25s()
        catalog = Catalog.from_dict(json.loads((folder / "catalog.json").read_text(encoding="utf-8")))
        add_words(catalog.aliases_to_teach())
        bm25 = bm25s.BM25.load(str(folder / "bm25"), show_progress=False, verbosity=0)
        if (folder / "bm25_head").exists():
            head = bm25s.BM25.load(str(folder / "bm25_head"), show_progress=False, verbosity=0)
        else:  # a version built before head indexes existed
            head = build_head_index(chunks, stem=manifest.get("tokenizer") == TOKENIZER)
        return cls(kb, version, manifest, chunks, catalog, bm25, vectors, None if in_memory else table, head,
                   field_vectors)

    @property
    def count(self) -> int:
        return len(self.chunks)

    @property
    def bm25_count(self) -> int:
        return int(self.bm25.scores["num_docs"])

    @property
    def dimension(self) -> int:
        return int(self.manifest["dimension"])

    def tokenize(self, text: str, *, characters: bool = False) -> list[str]:
        """Tokenize a question the way this version's BM25 indexes were built."""
        return tokenize(text, characters=characters, stem=self.stem)

    def class_mask(self, class_name: str) -> np.ndarray:
        code = self._class_codes.get(class_name)
        if code is None:
            return np.zeros(len(self.chunks), dtype=bool)
        return self.chunk_classes == code

    def class_tokens(self, name: str) -> frozenset[str]:
        """The BM25 tokens of a class's own names (Latin and Chinese), tokenized once per version."""
        cached = self._class_token_cache.get(name)
        if cached is None:
            entry = self.catalog.classes.get(name, {})
            cached = frozenset(self.tokenize(f"{name} {entry.get('alias', '')}"))
            self._class_token_cache[name] = cached
        return cached

    def member_mask(self, member: str) -> np.ndarray:
        mask = np.zeros(len(self.chunks), dtype=bool)
        positions = self._member_positions.get(member)
        if positions is not None:
            mask[positions] = True
        return mask

    def section_position(self, class_name: str, member: str) -> int | None:
        """The first chunk of a class's member section, or None."""
        return self._sections.get((class_name, member)) if member else None

    def group_position(self, source: str, heading_path: tuple[str, ...]) -> int | None:
        """The chunk holding the text under a page's `##` heading before its first member (the group's note)."""
        return self._groups.get((source, tuple(heading_path)))

    def index_of(self, chunk_id: str) -> int | None:
        return self._id_index.get(chunk_id)

    def dense_scores(self, vector: np.ndarray) -> np.ndarray | None:
        """Cosine similarity of every chunk (vectors are normalised), or None for an ANN-searched version."""
        if self.vectors is None:
            return None
        return self.vectors @ vector

    def field_scores(self, vector: np.ndarray) -> np.ndarray | None:
        """Cosine similarity of every chunk's field (Chunk.field_text), or None when the version has no field vectors."""
        if self.field_vectors is None:
            return None
        return self.field_vectors @ vector

    def dense_search(self, vector: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        scores = self.dense_scores(vector)
        if scores is not None:
            return top_positions(scores, k)
        result = self.table.search(vector).metric("cosine").select(["chunk_index", "source"]).limit(k).to_arrow()
        positions, similarities = [], []
        lookup = self._position_lookup()
        for source, index, distance in zip(
            result.column("source").to_pylist(), result.column("chunk_index").to_pylist(), result.column("_distance").to_pylist()
        ):
            positions.append(lookup[(source, index)])
            similarities.append(1.0 - float(distance))
        return positions, similarities

    def _position_lookup(self) -> dict:
        with self._lock:
            if not hasattr(self, "_positions"):
                self._positions = {(c.source, c.chunk_index): i for i, c in enumerate(self.chunks)}
        return self._positions

    def document_frequency(self, token: str) -> int:
        """The number of chunks whose BM25 text holds a token (bm25s keeps one column of its sparse score matrix
        per token, so a token's frequency is the length of its column)."""
        column = self.bm25.vocab_dict.get(token)
        indptr = self.bm25.scores["indptr"]
        if column is None or column + 1 >= len(indptr):
            return 0
        return int(indptr[column + 1] - indptr[column])

    def vocabulary_coverage(self, tokens: list[str]) -> float:
        """Share of the tokens that occur anywhere in this version's corpus."""
        if not tokens:
            return 0.0
        return sum(1 for t in tokens if t in self.bm25.vocab_dict) / len(tokens)

    def head_scores(self, text: str, drop: set[str] = frozenset()) -> np.ndarray:
        tokens = [t for t in self.tokenize(text, characters=True) if t not in drop]
        known = [t for t in tokens if t in self.head.vocab_dict]
        if not known:
            return np.zeros(len(self.chunks), dtype=np.float32)
        return self.head.get_scores(known)

    def bm25_scores(self, tokens: list[str]) -> np.ndarray:
        known = [t for t in tokens if t in self.bm25.vocab_dict]
        if not known:
            return np.zeros(len(self.chunks), dtype=np.float32)
        return self.bm25.get_scores(known)


def top_positions(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[list[int], list[float]]:
    """Return the positions and scores of the k best, best first; masked-out and non-positive BM25 rows are skipped."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    k = min(k, scores.shape[0])
    if k <= 0:
        return [], []
    candidates = np.argpartition(-scores, k - 1)[:k]
    ordered = candidates[np.argsort(-scores[candidates], kind="stable")]
    values = scores[ordered]
    finite = np.isfinite(values)
    return ordered[finite].tolist(), values[finite].tolist()
