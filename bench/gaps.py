"""`make bench-gaps`: group a replayed log of the development sets' questions into coverage gaps and score it.

The log: every question of ../shared/golden (retrieval, real users' and generation sets, both corpora) asked
1 to 6 times (a fixed random draw, heavier on few questions, as real traffic is), some repeats re-typed (lower
case, no end punctuation, extra spaces), plus chitchat and keyboard noise. Each request is searched by the engine
over the corpora as `make bench` built them ($RAG_DATA_DIR/bench; run `make bench` first) and recorded as the
question service records it: nothing adopted is an empty result; a chitchat question gets its fixed reply (not
a gap); an answer whose evidence misses the question's expected class gets a thumbs-down, as its reader would
give. Low confidence is not simulated (it needs the answer stage). Then the production job (opsboard.gaps)
groups the unanswered ones, with the bundled embedder.

Printed per half of the golden ids (A: odd, B: even; the threshold was chosen on A) and whole: unanswered
questions, groups, purity (share of questions whose group's most common expected class is their own; a
negative question's topic is itself, noise is one topic), the same purity by class and member, the groups a
person reads (largest first) to see 90% of the unanswered requests, and the job's time. State lives in
$RAG_DATA_DIR/bench-gaps (SQLite), rebuilt on every run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import string
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"
SETS = ("retrieval.jsonl", "real_questions_dev.jsonl", "generation.jsonl")
CHITCHAT = ["hello", "你好", "thanks!", "谢谢", "who are you?", "你是谁", "good morning", "再见", "ok", "cool, thank you"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=20261205)
    parser.add_argument("--threshold", type=float, default=None, help="cosine distance (default: the product's)")
    parser.add_argument("--sweep", default="", help="comma-separated thresholds to score instead of one")
    return parser.parse_args()


def configure(data_dir: Path) -> None:
    shutil.rmtree(data_dir, ignore_errors=True)
    (data_dir / "static").mkdir(parents=True)
    os.environ["RAG_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "ragsite.settings"
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ["DATABASE_URL"] = f"sqlite:///{data_dir / 'db.sqlite3'}"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def golden_items() -> list[dict]:
    items = []
    for name in SETS:
        path = SHARED / "golden" / name
        if path.is_file():
            items += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return items


def retyped(question: str, rng: random.Random) -> str:
    changed = question.rstrip("?？。.! ")
    if rng.random() < 0.5:
        changed = changed.lower()
    return ("  " if rng.random() < 0.3 else "") + changed.replace(" ", "  ", 1)


def replayed_log(items: list[dict], rng: random.Random) -> list[tuple[str, dict]]:
    """(question as typed, the item it asks) per request, shuffled."""
    log = []
    for item in items:
        times = min(6, 1 + int(rng.paretovariate(1.5)) - 1)
        for n in range(max(1, times)):
            log.append((item["question"] if n == 0 or rng.random() < 0.5 else retyped(item["question"], rng), item))
    for text in CHITCHAT:
        log.append((text, {"id": "chitchat", "kb": "v3d-api-en", "answerable": False, "expected_classes": []}))
    for n in range(20):
        noise = "".join(rng.choice(string.ascii_lowercase + "  ") for _ in range(rng.randint(6, 30)))
        log.append((noise, {"id": "noise", "kb": rng.choice(["v3d-api-en", "v3d-api-zh"]), "answerable": False,
                            "expected_classes": []}))
    rng.shuffle(log)
    return log


def replay(log: list[tuple[str, dict]], bench_folder: Path) -> dict[str, dict]:
    """Search each request with the engine and record it as the question service would; returns
    {question as typed: item} of the recorded user requests."""
    from django.utils import timezone

    from assistant.models import Feedback
    from rag.engine.embed import LocalE5Embedder, QueryVectorCache
    from rag.engine.index import VersionReader
    from rag.engine.plan import Planner
    from rag.engine.search import Searcher
    from rag.engine.types import SearchOptions
    from rag.models import Channel, RequestRecord
    from rag.services.records import outcome_of
    from rag.engine.index import IndexStore

    store = IndexStore(lancedb_uri=str(bench_folder / "lancedb"), index_dir=bench_folder / "index")
    queries = QueryVectorCache(LocalE5Embedder(num_threads=1))
    searchers = {}
    asked: dict[str, dict] = {}
    start = timezone.now() - datetime.timedelta(days=6)
    for n, (question, item) in enumerate(log):
        kb = item["kb"]
        if kb not in searchers:
            reader = VersionReader.open(store, kb, "rebuild")
            searchers[kb] = Searcher(reader=reader, queries=queries, planner=Planner(reader.catalog))
        result = searchers[kb].run(question, SearchOptions())
        record = RequestRecord.objects.create(
            request_id=f"bench-{n}", channel=Channel.WEB if n % 3 else Channel.MCP, kind="search", kb=kb,
            question=question, plan=result.plan.as_dict(), hit_count=len(result.hits),
            adopted=[{"chunk_id": h.chunk.chunk_id, "class_name": h.chunk.class_name, "member": h.chunk.member,
                      "source": h.chunk.source} for h in result.hits],
            outcome=outcome_of(result=result, answer=None, error_code=""))
        RequestRecord.objects.filter(pk=record.pk).update(created_at=start + datetime.timedelta(
            minutes=7 * n))
        expected = set(item.get("expected_classes") or [])
        if result.hits and expected and not expected & {h.chunk.class_name for h in result.hits}:
            Feedback.objects.create(request=record, reason="wrong class")
        asked[question] = item
    return asked


def topic(item: dict, *, member: bool = False) -> str:
    if item["id"] in ("noise", "chitchat"):
        return item["id"]
    if not item.get("expected_classes"):
        return "negative:" + item["id"]
    head = item["expected_classes"][0]
    return f"{head}.{(item.get('expected_members') or [''])[0]}" if member else head


def score(asked: dict[str, dict], half: str | None) -> dict:
    from opsboard import grouping
    from opsboard.models import GapQuestion
    from rag.metrics import id_half

    by_key = {}
    for question, item in asked.items():
        by_key[(item["kb"], grouping.question_key(question)[:255])] = item
    rows = [(q, by_key[(q.kb, q.key)]) for q in GapQuestion.objects.select_related("group")
            if (q.kb, q.key) in by_key]
    if half:
        rows = [(q, item) for q, item in rows if item["id"] in ("noise", "chitchat") or id_half(item["id"]) == half]
    labels = [q.group_id or -q.pk for q, _ in rows]
    weights = [q.times for q, _ in rows]
    sizes = Counter()
    for label, weight in zip(labels, weights):
        sizes[label] += weight
    return {"questions": len(rows), "requests": sum(weights), "groups": len(sizes),
            "purity": grouping.purity(labels, [topic(i) for _, i in rows], weights),
            "member_purity": grouping.purity(labels, [topic(i, member=True) for _, i in rows], weights),
            "read_for_90": grouping.groups_to_cover(list(sizes.values()))}


def main() -> int:
    args = parse_args()
    data = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve()
    bench_folder = data / "bench"
    if not (bench_folder / "index").is_dir():
        print(f"no bench build in {bench_folder}: run `make bench` first", file=sys.stderr)
        return 1
    items = golden_items()
    if not items:
        print("no golden sets in ../shared/golden: skipped", file=sys.stderr)
        return 0
    configure(data / "bench-gaps")
    from opsboard import gaps, grouping
    from rag.models import RequestRecord

    rng = random.Random(args.seed)
    log = replayed_log(items, rng)
    started = time.perf_counter()
    asked = replay(log, bench_folder)
    replay_s = time.perf_counter() - started
    unanswered = gaps.unanswered(*_window()).count()
    print(f"replayed {len(log)} requests ({len(set(q for q, _ in log))} wordings) in {replay_s:.0f} s; "
          f"{unanswered} unanswered ({RequestRecord.objects.filter(outcome='empty').count()} empty, "
          f"{RequestRecord.objects.filter(feedback__isnull=False).count()} thumbs-down)")
    thresholds = [float(t) for t in args.sweep.split(",") if t] or [args.threshold or grouping.DISTANCE_THRESHOLD]
    results = sweep("replayed log: what the engine left unanswered", asked, thresholds)
    # The same log as if the docs answered none of it: every question a gap, so grouping has work to do.
    from assistant.models import Feedback

    answered = RequestRecord.objects.filter(feedback__isnull=True).exclude(outcome="chitchat")
    Feedback.objects.bulk_create([Feedback(request=r, reason="bench: every question a gap") for r in answered])
    results += sweep("every question of the log unanswered", asked, thresholds)
    (data / "bench-gaps" / "gaps.json").write_text(json.dumps(results, indent=1))
    return 0


def sweep(title: str, asked: dict[str, dict], thresholds: list[float]) -> list[dict]:
    from opsboard import gaps
    from opsboard.models import GapGroup, GapQuestion

    print(f"\n{title}")
    print(f"{'threshold':>9} {'part':>5} {'questions':>9} {'requests':>8} {'groups':>6} {'purity':>7} "
          f"{'class.member':>12} {'read 90%':>8} {'job s':>6}")
    results = []
    for threshold in thresholds:
        GapGroup.objects.all().delete()
        GapQuestion.objects.update(group=None)
        started = time.perf_counter()
        run = gaps.gaps_compute(threshold=threshold)
        job_s = time.perf_counter() - started
        for part in ("A", "B", None):
            s = score(asked, part)
            results.append({"log": title, "threshold": threshold, "part": part or "whole", **s,
                            "job_s": round(job_s, 2), "groups_stored": run.groups})
            print(f"{threshold:>9.3f} {part or 'whole':>5} {s['questions']:>9} {s['requests']:>8} {s['groups']:>6} "
                  f"{s['purity']:>7.1%} {s['member_purity']:>12.1%} {s['read_for_90']:>8} {job_s:>6.1f}")
    return results


def _window():
    from django.utils import timezone

    now = timezone.now()
    return now - datetime.timedelta(days=30), now


if __name__ == "__main__":
    sys.exit(main())
