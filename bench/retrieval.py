"""`make bench`: build the shared corpora, score the development golden set, time and size the engine.

Prints seed 001's retrieval table for hybrid, vector-only and BM25-only search, search latency per stage,
cold and no-change build times, embedding throughput and the peak memory of a process serving searches.
Needs ../shared/corpora and ../shared/golden (skipped with a message when absent). State goes to
$RAG_DATA_DIR/bench (default ./data/bench), which is wiped first so the first build is cold.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag.engine.chunk import chunk_documents  # noqa: E402
from rag.engine.embed import LocalE5Embedder, QueryVectorCache  # noqa: E402
from rag.engine.index import IndexStore, VersionReader  # noqa: E402
from rag.engine.ingest import read_folder  # noqa: E402
from rag.metrics import RetrievedChunk, score_question, summarize  # noqa: E402
from rag.engine.plan import Planner  # noqa: E402
from rag.engine.search import Searcher  # noqa: E402

SHARED = ROOT.parent / "shared"
CORPORA = ("v3d-api-zh", "v3d-api-en")
STAGES = ("plan", "embed", "dense", "bm25", "fuse", "adopt", "total")


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


def serve(folder: Path) -> dict:
    """Run in a fresh process: open the rebuilt versions, answer the golden set in every mode, time it."""
    golden = [json.loads(line) for line in (SHARED / "golden" / "retrieval.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    store = store_at(folder)
    embedder = LocalE5Embedder()
    embedder.open()
    searchers = {}
    for kb in {item["kb"] for item in golden}:
        reader = VersionReader.open(store, kb, "rebuild")
        searchers[kb] = reader
    out = {"modes": {}, "latency": {}, "bare_query_embed_ms": None}

    # Bare query embedding, each question once, with nothing else running.
    bare = []
    for item in golden:
        t0 = time.perf_counter()
        embedder.embed_query(item["question"] + " ")  # a different string from the searches below
        bare.append((time.perf_counter() - t0) * 1000)
    out["bare_query_embed_ms"] = {"p50": round(statistics.median(bare), 2), "p95": round(pct(bare, 0.95), 2)}

    for mode in ("hybrid", "vector", "bm25"):
        queries = QueryVectorCache(embedder)  # cold cache per mode: every search embeds its question
        scores, stages = [], {s: [] for s in STAGES}
        for item in golden:
            reader = searchers[item["kb"]]
            searcher = Searcher(reader=reader, queries=queries, planner=Planner(reader.catalog))
            result = searcher.run(item["question"], mode=mode)
            retrieved = [RetrievedChunk(h.chunk.class_name, h.chunk.member, h.chunk.source) for h in result.hits]
            scores.append(score_question(item, retrieved))
            for stage in STAGES:
                stages[stage].append(float(result.timings_ms.get(stage, 0.0)))
        summary = summarize(scores)
        out["modes"][mode] = {"metrics": summary.metrics, "counts": summary.counts,
                              "gates": [gate.as_dict() for gate in summary.gates], "passed": summary.passed}
        out["latency"][mode] = {s: {"p50": round(statistics.median(v), 3), "p95": round(pct(v, 0.95), 3)}
                                for s, v in stages.items()}
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def bm25_scale(n_docs: int = 100_000) -> dict:
    """Time one BM25 route at n_docs chunks (the zh corpus's token lists repeated) with bm25s."""
    import bm25s
    import numpy as np

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
    import numpy as np
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


def print_report(build_report: dict, served: dict, extra: dict) -> None:
    print("\n== Build ==")
    for kb, b in build_report.items():
        print(f"{kb}: {b['chunks']} chunks (p50 {b['chunk_chars_p50']} chars) · cold build {b['cold_build_s']} s · "
              f"bare embedding {b['bare_embedding_s']} s ({b['embedded_per_s']} chunks/s) · cold/embedding "
              f"{b['cold_over_embedding']}× (target ≤ 1.1) · no-change rebuild {b['rebuild_s']} s, "
              f"{b['rebuild_embedded']} embedded = {b['rebuild_over_cold'] * 100:.2f}% of cold (target ≤ 3%)")
    print("\n== Retrieval on the development golden set (seed 001 gates) ==")
    names = ["class_hit", "member_hit", "false_empty", "colloquial_class_hit", "member_layer_member_hit",
             "typo_class_hit", "multi_class_hit", "hit_at_1", "hit_at_3", "member_first_hit", "member_mrr",
             "strict_class_hit", "chitchat_empty", "out_of_catalog_empty", "no_answer_empty"]
    gates = {g["metric"]: g for g in served["modes"]["hybrid"]["gates"]}
    print(f"{'metric':26s} {'hybrid':>8s} {'vector':>8s} {'bm25':>8s}   gate")
    for name in names:
        row = [served["modes"][m]["metrics"].get(name) for m in ("hybrid", "vector", "bm25")]
        cells = " ".join(f"{v * 100:7.1f}%" if v is not None else f"{'-':>8s}" for v in row)
        gate = gates.get(name)
        gate_text = f"{gate['op']} {gate['threshold'] * 100:.0f}%: {gate['status']}" if gate else ""
        print(f"{name:26s} {cells}   {gate_text}")
    counts = served["modes"]["hybrid"]["counts"]
    print(f"(questions: {counts}; class window 5, or max(5, 3 × classes); member hit in the first 3)")
    print("hybrid gates:", "ALL PASS" if served["modes"]["hybrid"]["passed"] else "FAIL")
    print("\n== Search latency, ms (each question once, cold query cache) ==")
    bare = served["bare_query_embed_ms"]
    print(f"bare query embedding: p50 {bare['p50']} · p95 {bare['p95']}")
    for mode, stages in served["latency"].items():
        print(f"{mode:7s} " + " · ".join(f"{s} {v['p50']}/{v['p95']}" for s, v in stages.items()))
    total = served["latency"]["hybrid"]["total"]
    print(f"hybrid p50 / bare embed p50 = {total['p50'] / bare['p50']:.2f}× (target ≤ 1.5) · "
          f"p95 / bare p50 = {total['p95'] / bare['p50']:.2f}× (target ≤ 2.5)")
    print(f"\n== Memory ==\npeak RSS of a process serving both versions: {served['peak_rss_mb']} MB (target < 600)")
    if extra:
        print("\n== Scale ==")
        if "bm25" in extra:
            print(f"bm25s, one route at {extra['bm25']['docs']} chunks: {extra['bm25']['route_ms_p50']} ms p50")
        for n, d in extra.get("dense", {}).items():
            ann = (f" · LanceDB IVF_HNSW_SQ {d['ann_ms_p50']} ms, recall@10 {d['ann_recall_at_10']}, built in {d['ann_build_s']} s"
                   if "ann_ms_p50" in d else "")
            print(f"dense {n} vectors: numpy {d['numpy_ms_p50']} ms · LanceDB flat {d['lancedb_flat_ms_p50']} ms{ann} · {d['memory_mb']} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--no-scale", action="store_true", help="skip the 100k BM25 and dense scaling runs")
    parser.add_argument("--reuse", action="store_true", help="keep the last bench build (skip building)")
    parser.add_argument("--scale-only", action="store_true", help="only the scaling runs")
    args = parser.parse_args()
    folder = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve() / "bench"
    if args.serve:
        print(json.dumps(serve(Path(args.serve)), ensure_ascii=False))
        return 0
    if not (SHARED / "corpora").is_dir() or not (SHARED / "golden" / "retrieval.jsonl").is_file():
        print(f"make bench needs {SHARED}/corpora and {SHARED}/golden; not found, nothing to measure.")
        return 0
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
    print("serving the golden set in a fresh process …", file=sys.stderr, flush=True)
    served = json.loads(subprocess.run([sys.executable, __file__, "--serve", str(folder)], check=True,
                                       capture_output=True, text=True).stdout)
    extra = {} if args.no_scale else {"bm25": bm25_scale(), "dense": dense_scale()}
    print_report(build_report, served, extra)
    (folder / "last.json").write_text(json.dumps({"build": build_report, "serve": served, "scale": extra},
                                                 ensure_ascii=False, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
