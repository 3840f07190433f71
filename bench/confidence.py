"""`make bench`: how often an answer of each confidence level is correct, on the golden sets.

Every question of ../shared/golden retrieval.jsonl ("written"), generation.jsonl ("generation") and
real_questions_dev.jsonl ("real") is searched (hybrid) on the last bench build (data/bench, written by
bench/retrieval.py), and so is every question of the shipped docs sets (evaluation/golden/docs, "docs") on
a build of docs/ made here from its shipped vector pack (seconds; kb "docs" in the same bench store). Each
is answered without a model, as a fresh install answers. An answer is correct when:
- answerable: the evidence it cites holds every expected class, and an expected member's own section
  (of an expected class) when members are expected;
- not answerable: it is refused (chitchat, out of catalog or insufficient material: nothing cited).

The level is `rag.engine.generate.evidence_confidence` of the plan and the adopted evidence, the same for
model answers. Prints count, correct and precision per level for each set, whole and per fixed half (half A:
ids ending in an odd number, where the thresholds were tuned; half B: even, held out). `--dump FILE` writes one
JSON line per question with its signals, for tuning. Needs the bench build; run bench/retrieval.py once first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from retrieval import QUERY_VECTORS, SHARED, StoredQueryEmbedder, searcher_for, store_at  # noqa: E402

from rag.engine.chunk import chunk_documents  # noqa: E402
from rag.engine.embed import LocalE5Embedder, QueryVectorCache  # noqa: E402
from rag.engine.generate import (CONFIDENCE_ORDER, ExtractiveGenerator, answer_without_model,  # noqa: E402
                                 evidence_signals)
from rag.engine.index import IndexError_, VersionReader  # noqa: E402
from rag.engine.ingest import read_folder  # noqa: E402
from rag.engine.vectorpack import read_pack  # noqa: E402
from rag.metrics import HALVES, id_half  # noqa: E402

SETS = {"written": "retrieval.jsonl", "generation": "generation.jsonl", "real": "real_questions_dev.jsonl",
        "docs": "evaluation/golden/docs (retrieval.jsonl and generation.jsonl)"}
DOCS_GOLDEN = ROOT / "evaluation" / "golden" / "docs"
DOCS_VERSION = "confidence"  # the docs build this bench makes
LEVELS = tuple(reversed(CONFIDENCE_ORDER))  # high first
TARGET_HIGH = 0.90  # issue 12: "high" answers are correct at least 9 times in 10
TARGET_LOW = 0.50  # "low" answers are mostly wrong: correct less than half the time


def set_files(name: str) -> list[Path]:
    if name == "docs":
        return [DOCS_GOLDEN / "retrieval.jsonl", DOCS_GOLDEN / "generation.jsonl"]
    return [SHARED / "golden" / SETS[name]]


def load_set(name: str) -> list[dict]:
    return [json.loads(line) for path in set_files(name) if path.is_file()
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def build_docs(store, embedder) -> None:
    """Index docs/ as kb "docs" from its shipped vectors (chunks the pack lacks are embedded)."""
    model = embedder.embedder
    chunks = chunk_documents(read_folder(ROOT / "docs"))
    store.build("docs", DOCS_VERSION, chunks, model, prebuilt=read_pack(ROOT / "docs", model.model_id, model.dimension))


def is_correct(item: dict, answer, hits) -> bool:
    """Whether the answer is right by its cited evidence (see the module docstring)."""
    if not item["answerable"]:
        return not answer.citations
    by_id = {h.chunk.chunk_id: h.chunk for h in hits}
    cited = [by_id[c.chunk_id] for c in answer.citations]  # numbered in the answer's order, not the evidence's
    expected = set(item.get("expected_classes") or [])
    if not expected <= {chunk.class_name for chunk in cited}:
        return False
    members = set(item.get("expected_members") or [])
    return not members or any(c.member in members and (not expected or c.class_name in expected) for c in cited)


def answer_all(folder: Path, sets: tuple[str, ...], version: str) -> list[dict]:
    """Search and answer every question; one record per question."""
    golden = {name: load_set(name) for name in sets}
    store = store_at(folder)
    queries_store = StoredQueryEmbedder(folder / QUERY_VECTORS, embedder=LocalE5Embedder(num_threads=1)).load()
    kbs = sorted({item["kb"] for items in golden.values() for item in items})
    if "docs" in kbs:
        build_docs(store, queries_store)
    searchers = {kb: searcher_for(VersionReader.open(store, kb, DOCS_VERSION if kb == "docs" else version),
                                  QueryVectorCache(queries_store)) for kb in kbs}
    generator = ExtractiveGenerator()
    records = []
    for name, items in golden.items():
        for item in items:
            result = searchers[item["kb"]].run(item["question"], mode="hybrid", complete=True)
            hits = list(result.hits)
            answer = answer_without_model(result.plan, hits, weak_evidence=result.weak_evidence)
            if answer is None:
                answer = generator.run(result.plan.corrected_question, result.plan, hits)
            records.append({
                "set": name, "id": item["id"], "half": id_half(item["id"]), "kb": item["kb"],
                "layer": item.get("layer", "plain" if item["answerable"] else "negative"),
                "answerable": item["answerable"], "question": item["question"],
                "expected_classes": item.get("expected_classes") or [],
                "expected_members": item.get("expected_members") or [],
                "plan": {"kind": result.plan.kind, "classes": list(result.plan.classes),
                         "hinted_classes": list(result.plan.hinted_classes), "members": list(result.plan.members)},
                "mode": answer.mode, "confidence": answer.confidence, "correct": is_correct(item, answer, hits),
                "cited": [f"{chunk.class_name}.{chunk.member}" for c in answer.citations
                          for chunk in [h.chunk for h in hits if h.chunk.chunk_id == c.chunk_id][:1]],
                "signals": asdict(evidence_signals(result.plan, hits)) if hits else None,
            })
    queries_store.save()
    return records


def precision_table(records: list[dict]) -> dict:
    """Per level: count, correct and precision (None when no answer has the level)."""
    table = {}
    for level in LEVELS:
        rows = [r for r in records if r["confidence"] == level]
        right = sum(r["correct"] for r in rows)
        table[level] = {"count": len(rows), "correct": right, "precision": right / len(rows) if rows else None}
    return table


def report(records: list[dict], sets: tuple[str, ...]) -> dict:
    out = {}
    for name in (*sets, "all"):
        rows = [r for r in records if name == "all" or r["set"] == name]
        out[name] = {"whole": precision_table(rows),
                     **{half: precision_table([r for r in rows if r["half"] == half]) for half in HALVES}}
    return out


def _cell(entry: dict) -> str:
    if not entry["count"]:
        return f"{'-':>16}"
    return f"{entry['count']:>4} {entry['correct']:>4} {entry['precision']:>6.1%}"


def _verdict(level: str, entry: dict) -> str:
    if not entry["count"]:
        return "-"
    if level == "high":
        return "PASS" if entry["precision"] >= TARGET_HIGH else "FAIL"
    if level == "low":
        return "PASS" if entry["precision"] < TARGET_LOW else "FAIL"
    return ""


def print_report(tables: dict) -> None:
    print("\n== Confidence calibration: answers without a model on the golden sets (bench/confidence.py) ==")
    print("correct: the cited evidence holds every expected class and, when members are expected, an expected\n"
          "member's section; negatives correct when refused. Targets: high >= 90% correct, low < 50% (mostly wrong).\n"
          "Thresholds tuned on half A (ids ending in an odd number); half B (even) is held out.")
    parts = ("whole", *HALVES)
    for name, table in tables.items():
        print(f"\n{name}: {SETS.get(name, 'every set together')}")
        print(f"{'level':<8}" + "".join(f"{('half ' + p) if p in HALVES else p:>17}" for p in parts) + "   target A · B")
        print(f"{'':<8}" + "".join(f"{'n':>5}{'ok':>5}{'prec':>7}" for _ in parts))
        for level in LEVELS:
            row = table["whole"][level]
            if not any(table[p][level]["count"] for p in parts) and not row["count"]:
                continue
            verdicts = " · ".join(v for v in (_verdict(level, table[h][level]) for h in HALVES) if v)
            print(f"{level:<8}" + "".join(f" {_cell(table[p][level])}" for p in parts) + f"   {verdicts}")


def bench_arguments(description: str, sets) -> tuple[argparse.Namespace, Path]:
    """The arguments of a bench that answers golden sets on the bench build (this one and bench/answers.py), and
    the bench folder."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", choices=tuple(sets), help="score only this set (repeatable)")
    parser.add_argument("--version", default="rebuild", help="the bench build's version to answer from")
    parser.add_argument("--dump", type=Path, metavar="FILE", help="write one JSON line per question")
    return parser.parse_args(), Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve() / "bench"


def main() -> int:
    args, folder = bench_arguments(__doc__, SETS)
    sets = tuple(n for n in (args.set or SETS) if any(path.is_file() for path in set_files(n)))
    if not sets:
        print("confidence calibration skipped: ../shared/golden holds none of the golden sets.")
        return 0
    started = time.perf_counter()
    try:
        records = answer_all(folder, sets, args.version)
    except IndexError_ as exc:
        print(f"confidence calibration skipped: no bench build ({exc}); run bench/retrieval.py once first.")
        return 0
    tables = report(records, sets)
    print_report(tables)
    (folder / "confidence.json").write_text(json.dumps(tables, indent=1))
    if args.dump:
        args.dump.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    print(f"\nconfidence calibration: {len(records)} questions in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
