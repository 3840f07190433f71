"""`make bench`: the answers given without a model (issue 29), scored by seed 001's generation rules.

Every question of ../shared/golden/generation.jsonl ("generation") and of the shipped docs set
(evaluation/golden/docs/generation.jsonl, "docs") is searched (hybrid) on the last bench build and answered the
way a fresh install answers: `answer_without_model`, else the extractive composer. The rules are the eval
center's (`evaluation.rules.score_generation`, no judge). Printed for the whole set and each fixed half (half A:
ids ending in an odd number, where the composer was tuned; half B: even, held out):

- must_mention: answerable questions whose answer contains every `must_mention` item (target >= 70%);
- forbidden: answers containing a `forbidden` statement (target 0);
- refused: questions the docs cannot answer, answered with no citation and confidence low or none (target 100%);
- citations legal: answers whose citations all point into the evidence and are numbered 1..n (target 100%);
- class / member named: answerable questions whose answer names every expected class / member (seed gates
  >= 95% and >= 85%);
- then how often each confidence level is right, as confidence is defined (docs/en/retrieval.md#confidence:
  the cited evidence holds every expected class and an expected member's section; a question the docs cannot
  answer is right when refused; targets high >= 90%, medium >= 60%), and the composer's cost per answer next
  to retrieval's (ms, p50/p95). bench/confidence.py gives the same table over every golden set.

Needs the bench build; run bench/retrieval.py once first. `--dump FILE` writes one JSON line per question.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from confidence import DOCS_GOLDEN, DOCS_VERSION, bench_arguments, build_docs, is_correct  # noqa: E402
from retrieval import QUERY_VECTORS, SHARED, StoredQueryEmbedder, pct, searcher_for, store_at  # noqa: E402

from evaluation.rules import GenerationOutcome, score_generation  # noqa: E402
from rag.engine.compose import _stems, read_text  # noqa: E402
from rag.engine.embed import LocalE5Embedder, QueryVectorCache  # noqa: E402
from rag.engine.generate import CONFIDENCE_ORDER, ExtractiveGenerator, answer_without_model  # noqa: E402
from rag.engine.index import IndexError_, VersionReader  # noqa: E402
from rag.engine.types import SearchOptions  # noqa: E402
from rag.metrics import HALVES, RetrievedChunk, id_half  # noqa: E402

SETS = {"generation": SHARED / "golden" / "generation.jsonl", "docs": DOCS_GOLDEN / "generation.jsonl"}
LEVELS = tuple(reversed(CONFIDENCE_ORDER))
TARGETS = {"must_mention": ">= 70%", "forbidden": "0", "refused": "100%", "citations_legal": "100%",
           "class_named": ">= 95%", "member_named": ">= 85%", "code_block": ""}
TARGET_PRECISION = {"high": 0.90, "medium": 0.60}  # issue 29: "high" right 9 times in 10, "medium" 6 in 10


def load(name: str) -> list[dict]:
    path = SETS[name]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def chunks_of(hits) -> tuple[RetrievedChunk, ...]:
    return tuple(RetrievedChunk(h.chunk.class_name, h.chunk.member, h.chunk.source) for h in hits)


def legal(answer, hits) -> bool:
    """Every citation points into the evidence, and they are numbered 1..n in the order they are listed."""
    ids = {h.chunk.chunk_id for h in hits}
    numbers = [c.number for c in answer.citations]
    return all(c.chunk_id in ids for c in answer.citations) and numbers == list(range(1, len(numbers) + 1)) \
        and not answer.invalid_citations


def answer_one(searcher, generator, item: dict) -> dict:
    started = time.perf_counter()
    result = searcher.run(item["question"], SearchOptions(complete=True))  # as an answer searches
    searched = time.perf_counter()
    hits = list(result.hits)
    answer = answer_without_model(result.plan, hits, weak_evidence=result.weak_evidence)
    if answer is None:
        answer = generator.run(result.plan.corrected_question, result.plan, hits)
    composed = time.perf_counter()
    outcome = GenerationOutcome(
        text=answer.text, confidence=answer.confidence, mode=answer.mode,
        citations=tuple(c.chunk_id for c in answer.citations), invalid_citations=len(answer.invalid_citations),
        evidence=chunks_of(hits), evidence_ids=tuple(h.chunk.chunk_id for h in hits), discarded=(),
        model_called=answer.model_called)
    rules = score_generation(item, outcome).rules
    answerable = bool(item["answerable"])
    refused = not answer.citations and answer.confidence in ("low", "none")
    named = all(name.lower() in answer.text.lower() for name in item.get("expected_classes") or [])
    right = is_correct(item, answer, hits)  # confidence's meaning (docs/en/retrieval.md#confidence)
    return {
        "id": item["id"], "half": id_half(item["id"]), "kb": item["kb"], "answerable": answerable,
        "question": item["question"], "answer": answer.text, "confidence": answer.confidence, "mode": answer.mode,
        "must_mention": rules["must_mention"], "forbidden": rules["no_forbidden_claim"] is False,
        "refused": refused, "citations_legal": legal(answer, hits),
        "class_named": named if answerable and item.get("expected_classes") else None,
        "member_named": rules["member_mentioned"], "code_block": rules["code_block"], "right": right,
        "missing": [w for w in item.get("must_mention") or [] if w.lower() not in answer.text.lower()],
        "search_ms": (searched - started) * 1000, "compose_ms": (composed - searched) * 1000,
    }


def rate(rows: list[dict], key: str, *, answerable: bool | None = None) -> tuple[int, int]:
    """(true, applicable) of a per-question flag; None marks a question the flag does not apply to."""
    chosen = [r for r in rows if answerable is None or r["answerable"] == answerable]
    values = [r[key] for r in chosen if r[key] is not None]
    return sum(bool(v) for v in values), len(values)


def table(rows: list[dict]) -> dict:
    out = {
        "must_mention": rate(rows, "must_mention", answerable=True),
        "forbidden": rate(rows, "forbidden"),
        "refused": rate(rows, "refused", answerable=False),
        "citations_legal": rate([r for r in rows if not r["refused"]], "citations_legal"),
        "class_named": rate(rows, "class_named", answerable=True),
        "member_named": rate(rows, "member_named", answerable=True),
        "code_block": rate(rows, "code_block", answerable=True),
    }
    for level in LEVELS:
        chosen = [r for r in rows if r["confidence"] == level]
        out[f"right when {level}"] = (sum(r["right"] for r in chosen), len(chosen))
    return out


def cell(value: tuple[int, int]) -> str:
    true, total = value
    return f"{true:>3}/{total:<3} {true / total:>6.1%}" if total else f"{'-':>15}"


def print_report(tables: dict, rows: list[dict]) -> None:
    print("\n== Answers without a model (bench/answers.py): seed 001's generation rules, no judge ==")
    print("Half A (ids ending in an odd number) tuned on; half B (even) held out.")
    for name, parts in tables.items():
        print(f"\n{name}: {SETS[name]}")
        print(f"{'':<22}" + "".join(f"{label:>17}" for label in ("whole", "half A", "half B")) + "   target")
        for key in parts["whole"]:
            level = key.removeprefix("right when ")
            target = TARGETS.get(key, f">= {TARGET_PRECISION[level]:.0%}" if level in TARGET_PRECISION else "")
            print(f"{key:<22}" + "".join(f" {cell(parts[p][key]):>16}" for p in ("whole", *HALVES)) + f"   {target}")
    search = [r["search_ms"] for r in rows]
    compose = [r["compose_ms"] for r in rows]
    print(f"\ncost per answer (ms, {len(rows)} questions): retrieval p50 {statistics.median(search):.1f} "
          f"p95 {pct(search, 95):.1f} · composer p50 {statistics.median(compose):.2f} p95 {pct(compose, 95):.2f}")


def main() -> int:
    args, folder = bench_arguments(__doc__, SETS)
    sets = tuple(n for n in (args.set or SETS) if SETS[n].is_file())
    if not sets:
        print("answers bench skipped: no generation set found.")
        return 0
    golden = {name: load(name) for name in sets}
    store = store_at(folder)
    queries = StoredQueryEmbedder(folder / QUERY_VECTORS, embedder=LocalE5Embedder(num_threads=1)).load()
    kbs = sorted({item["kb"] for items in golden.values() for item in items})
    try:
        if "docs" in kbs:
            build_docs(store, queries)
        searchers = {kb: searcher_for(VersionReader.open(store, kb, DOCS_VERSION if kb == "docs" else args.version),
                                      QueryVectorCache(queries)).searcher for kb in kbs}
    except IndexError_ as exc:
        print(f"answers bench skipped: no bench build ({exc}); run bench/retrieval.py once first.")
        return 0
    generator = ExtractiveGenerator()
    rows, tables = [], {}
    for name, items in golden.items():
        for item in items:  # each question twice: the first warms the query vector cache, the second is timed
            answer_one(searchers[item["kb"]], generator, item)
        _stems.cache_clear()  # the composer is timed reading its sections afresh
        read_text.cache_clear()
        scored = [dict(answer_one(searchers[item["kb"]], generator, item), set=name) for item in items]
        rows += scored
        tables[name] = {"whole": table(scored), **{h: table([r for r in scored if r["half"] == h]) for h in HALVES}}
    queries.save()
    print_report(tables, rows)
    (folder / "answers.json").write_text(json.dumps(tables, indent=1))
    if args.dump:
        args.dump.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
