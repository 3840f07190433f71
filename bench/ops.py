"""`make bench-ops`: fill the request table with synthetic records and time the ops pages over them.

Inserts --records records (default 1,000,000) spread over the last 30 days (web, MCP and eval traffic with
failures, empty results, low confidence, degraded answers, thumbs-down feedback, log-normal latencies, tokens on
chats, a few API keys on MCP; payloads the size of real ones), rolls up the closed hours as the five-minute job
would have, builds the daily reports of those days, then requests every ops page through Django's test client
as a superuser: each page 5 times, the first reported apart as cold. Prints median and max milliseconds, SQL
queries per page, the database size and the peak memory while timing (the fill runs in a child process); for a
page over --slow-ms it also prints its slowest queries with their query plans. Writes the figures to
<data dir>/bench/ops.json.

State lives in its own data directory, --data-dir (default ./data/bench-ops), never in the one of `make run`.
The database is SQLite in that directory unless DATABASE_URL is set: a PostgreSQL URL is then used with its
database name replaced by --pg-database (default bench_ops), which the script creates, so the tables of the
database named in the URL are never touched. A database already holding --records records, the newest less
than --max-age-hours old, is reused (the pages read windows ending now); --refill starts over.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import random
import resource
import statistics
import sys
import time
from collections import Counter, deque
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH = 10_000
DAYS = 30
QUESTIONS = [
    "怎么重建索引？", "PerspectiveCamera 的 fov 默认值是多少？", "How do I switch to PostgreSQL?", "什么是 RRF 融合？",
    "What does reindex --if-changed do?", "保留几个索引版本？", "How are API keys stored?", "雾效 Fog 怎么设置？",
    "How does the chitchat gate work?", "怎么配置生成模型？", "What is the default knowledge base?",
    "Texture.minFilter 有哪些取值？", "How do I make a mirror-like floor with Reflector?", "向量缓存怎么复用？",
    "WebGLRenderer setPixelRatio 是做什么的？", "How do I load a glTF model?",
]
DISTINCT_PER_QUESTION = 2_000  # the counter appended to a question: repeats like real traffic, not all unique
COMMON_WORD = "PerspectiveCamera"
RARE_WORD = "no-such-word-anywhere"
KEY_PREFIXES = ["rk3f9a2c7d1e", "rk8b0c4e6a2f", "rkd71e5a9c3b", "rk02f6b8d4e1", "rk5c9e1a7f0d"]
ERROR_CODES = ["generation_unavailable"] * 4 + ["timeout"] * 2 + ["rate_limited"] * 2 + ["kb_not_found",
                                                                                       "internal_error"]
STAGES = ("plan", "bm25", "embed", "dense", "fuse", "adopt")
FEEDBACK_REASONS = ["", "", "答非所问", "wrong class", "引用的文档过时了", "not what I asked"]
CLASSES = ["PerspectiveCamera", "Texture", "Vector3", "Fog", "Reflector", "WebGLRenderer", "DepthTexture", "Scene",
           "Object3D", "GLTFLoader", "App", "CubeReflectionProbe"]


# -- setup ------------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="request records to insert")
    parser.add_argument("--refill", action="store_true", help="start from an empty database even if one matches")
    parser.add_argument("--runs", type=int, default=5, help="requests per page (the first is reported as cold)")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data" / "bench-ops", help="the bench's own state")
    parser.add_argument("--pg-database", default="bench_ops", help="database created on a PostgreSQL DATABASE_URL")
    parser.add_argument("--max-age-hours", type=float, default=12, help="refill when the newest record is older")
    parser.add_argument("--slow-ms", type=float, default=1000, help="explain the queries of pages slower than this")
    parser.add_argument("--seed", type=int, default=20261130)
    return parser.parse_args()


def postgres_url(url: str, database: str) -> str:
    """The caller's PostgreSQL URL pointed at `database`, which is created when missing."""
    import psycopg

    parts = urlsplit(url)
    given = parts.path.lstrip("/")
    if database == given:
        raise SystemExit(f"--pg-database must differ from the database of DATABASE_URL ({given}).")
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    try:
        handle = psycopg.connect(admin, autocommit=True)
    except psycopg.OperationalError:  # no maintenance database: create from the one the caller named
        handle = psycopg.connect(urlunsplit(parts._replace(scheme="postgresql")), autocommit=True)
    with handle:
        if not handle.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            handle.execute(f'CREATE DATABASE "{database}"')
    return urlunsplit(parts._replace(path="/" + database))


def configure(args: argparse.Namespace) -> None:
    """Point settings at the bench's data directory and database, then set Django up."""
    data_dir = args.data_dir.resolve()
    (data_dir / "static").mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request without it
    os.environ["RAG_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "ragsite.settings"
    os.environ["DJANGO_DEBUG"] = "false"
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        os.environ["DATABASE_URL"] = postgres_url(url, args.pg_database)
    else:  # unset or anything else: SQLite in the bench's folder, never a database of the caller's
        os.environ["DATABASE_URL"] = f"sqlite:///{data_dir / 'db.sqlite3'}"
    import django

    django.setup()


def database_label() -> str:
    from django.db import connection

    settings = connection.settings_dict
    return f"{connection.vendor} {settings['NAME']}" if connection.vendor != "sqlite" else f"sqlite {settings['NAME']}"


def database_size() -> int:
    from django.db import connection

    if connection.vendor == "sqlite":
        name = Path(connection.settings_dict["NAME"])
        return sum(p.stat().st_size for p in (name, Path(f"{name}-wal")) if p.exists())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0]


def reset_peak_rss() -> None:
    """Forget the peak so far (Linux: writing 5 to clear_refs resets VmHWM), so the fill does not count."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- synthetic records -------------------------------------------------------------------------------------


COLUMNS = ("id", "request_id", "channel", "kind", "kb", "index_version", "question", "plan", "retrieved", "adopted",
           "excluded", "answer", "citations", "confidence", "mode", "degraded", "reason", "error_code",
           "prompt_tokens", "completion_tokens", "latency_ms", "hit_count", "timings", "api_key_prefix", "tool",
           "arguments", "session_id", "transport", "app", "outcome", "created_at")


def _chunk_id(rng: random.Random) -> str:
    return f"{rng.getrandbits(64):016x}"


def payload_pools(rng: random.Random) -> dict:
    """Pre-built JSON payloads the size of recorded ones (retrieved ~2 KB, adopted ~650 B, an answer ~400 chars)."""
    def routes():
        names = ["dense", "bm25:question"] + (["bm25:classes"] if rng.random() < 0.3 else [])
        return json.dumps({name: [[_chunk_id(rng), round(rng.uniform(0.5, 9), 5)] for _ in range(20)]
                           for name in names})

    def adopted(count):
        return [{"chunk_id": _chunk_id(rng), "score": round(rng.uniform(0.01, 0.03), 6),
                 "class_name": (cls := rng.choice(CLASSES)), "member": rng.choice(["fov", "near", "far", "minFilter",
                                                                                   "setPixelRatio", "density", ""]),
                 "source": f"api/{cls}.md"} for _ in range(count)]

    answers = [
        "**PerspectiveCamera.fov** — 摄像机视锥体垂直视野角度，默认值为 50 [1]。\n\n"
        "从视图底部到顶部，以角度表示。修改后需要调用 .updateProjectionMatrix() [2]。" * 2,
        ("**Texture.minFilter** — .minFilter : number [1]\n\nHow the texture is sampled when a texel covers less than "
         "one pixel. The default is v3d.LinearMipmapLinearFilter, which uses mipmapping and a trilinear filter [2]."),
        "重建索引用 `manage.py rag reindex`；加 `--if-changed` 时只有文档变化才构建新版本 [1]。旧版本保留 "
        "RAG_KEEP_VERSIONS 个，默认 5 个 [2]。构建在后台任务里进行，页面显示进度。" * 2,
    ]
    pools = {"retrieved": [routes() for _ in range(256)], "answers": answers, "adopted": {}, "citations": {}}
    for count in range(1, 9):
        variants = [adopted(count) for _ in range(64)]
        pools["adopted"][count] = [json.dumps(v) for v in variants]
        pools["citations"][count] = [json.dumps([{"number": n + 1, "chunk_id": a["chunk_id"], "source": a["source"]}
                                                 for n, a in enumerate(v[:3])]) for v in variants]
    return pools


def diurnal_moments(rng: random.Random, count: int, end: float) -> list[float]:
    """`count` sorted POSIX times over the last DAYS days, busier in the local afternoon than at night."""
    start, moments = end - DAYS * 86400, []
    while len(moments) < count:
        moment = rng.uniform(start, end)
        hour = ((moment / 3600) + 8) % 24  # Asia/Shanghai, the project's default time zone
        if rng.random() < 0.35 + 0.65 * (1 - math.cos(2 * math.pi * (hour - 3) / 24)) / 2:
            moments.append(moment)
    moments.sort()
    return moments


_POOLS: dict = {}


def _start_generator(seed: int) -> None:
    _POOLS.update(payload_pools(random.Random(seed)))


def _as_stored(moment: datetime.datetime, vendor: str):
    """What Django's SQLite backend stores for an aware datetime (naive UTC text); PostgreSQL takes it as is."""
    return str(moment.replace(tzinfo=None)) if vendor == "sqlite" else moment


def synthetic_batch(task: tuple[int, list[float], int, str]) -> tuple[list[tuple], list[tuple], Counter]:
    """One batch of records (ids from `first_id`, one per moment) and their feedback rows, and what they hold."""
    first_id, moments, seed, vendor = task
    rng, pools, utc = random.Random(seed), _POOLS, datetime.UTC
    rows, feedback, mix = [], [], Counter()
    for offset, moment in enumerate(moments):
        record_id = first_id + offset
        roll = rng.random()
        channel = "web" if roll < 0.5 else "mcp" if roll < 0.85 else "eval"
        chat_share = {"web": 0.8, "mcp": 0.4, "eval": 0.5}[channel]
        kind = "chat" if rng.random() < chat_share else "search"
        template = QUESTIONS[rng.randrange(len(QUESTIONS))]
        question = f"{template} #{rng.randrange(DISTINCT_PER_QUESTION)}"
        outcome = rng.random()
        failed, empty = outcome < 0.02, 0.02 <= outcome < 0.07
        hit_count = 0 if failed or empty else rng.randint(1, 8)
        latency = rng.lognormvariate(math.log(50), 0.6)
        if rng.random() < 0.03:  # the tail: a slow model, a cold cache, a long queue
            latency = rng.lognormvariate(math.log(1500), 0.9)
        plan = retrieved = "{}"
        adopted = citations = "[]"
        answer = confidence = mode = reason = error_code = ""
        degraded, prompt_tokens, completion_tokens = False, 0, 0
        if failed:
            error_code = rng.choice(ERROR_CODES)
            latency *= 3
        else:
            quoted, plan_kind, cls = json.dumps(question), rng.choice(["api", "doc", "api"]), rng.choice(CLASSES)
            plan = (f'{{"question": {quoted}, "corrected_question": {quoted}, "kind": "{plan_kind}", '
                    f'"classes": ["{cls}"], "hinted_classes": [], "members": [], "corrections": [], '
                    f'"unknown_identifiers": [], "reason": ""}}')
            retrieved = rng.choice(pools["retrieved"])
            if hit_count:
                variant = rng.randrange(64)
                adopted = pools["adopted"][hit_count][variant]
            if kind == "chat":
                if hit_count:
                    answer, citations = rng.choice(pools["answers"]), pools["citations"][hit_count][variant]
                    confidence = "low" if rng.random() < 0.16 else rng.choice(["high", "medium"])
                else:
                    answer, confidence = "文档里没有找到相关内容。", "none"
                mode = "generated"
                if rng.random() < 0.0165:  # the model was down: an extractive answer instead
                    degraded, mode, reason = True, "extractive", "generation_unavailable"
                else:
                    prompt_tokens, completion_tokens = rng.randint(600, 2600), rng.randint(40, 450)
                    latency += rng.lognormvariate(math.log(900), 0.5)
        key = tool = session = transport = ""
        arguments = "{}"
        if channel == "mcp":
            key = KEY_PREFIXES[min(int(rng.expovariate(0.8)), len(KEY_PREFIXES) - 1)]  # one busy key, a few quiet
            tool = ("ask_sdk_docs" if kind == "chat" else "search_sdk_docs")
            session, transport = f"{rng.getrandbits(128):032x}", "http" if rng.random() < 0.8 else "stdio"
            arguments = json.dumps({"question": question}, ensure_ascii=False)
        stages = ", ".join(f'"{stage}": {rng.uniform(0.1, 5):.3f}' for stage in STAGES)
        timings = f'{{{stages}, "total": {latency:.3f}}}'
        created = datetime.datetime.fromtimestamp(moment, utc)
        # The outcome the question service would record for these fields (rag.services.records.outcome_of).
        ended = ("failed" if failed else "empty" if not hit_count else "degraded" if degraded
                 else "low" if confidence == "low" else "ok")
        row = (record_id, f"req_{rng.getrandbits(128):032x}", channel, kind, "sdk", "20261101-000000-ab12", question,
               plan, retrieved, adopted, "[]", answer, citations, confidence, mode, degraded, reason, error_code,
               prompt_tokens, completion_tokens, round(latency, 3), hit_count, timings, key, tool, arguments, session,
               transport, "", ended, _as_stored(created, vendor))
        rows.append(row)
        thumbs = channel == "web" and rng.random() < 0.02
        if thumbs:
            feedback.append((rng.choice(FEEDBACK_REASONS), _as_stored(created + datetime.timedelta(seconds=30), vendor),
                             record_id))
        mix.update({"records": 1, channel: 1, "failed": failed, "empty": empty, "low": confidence == "low",
                    "degraded": degraded, "thumbs_down": thumbs})
    return rows, feedback, mix


def insert_batch(rows: list[tuple], feedback: list[tuple]) -> None:
    from django.db import connection

    record_sql = "INSERT INTO rag_requestrecord ({}) VALUES ({})".format(
        ", ".join(connection.ops.quote_name(c) for c in COLUMNS), ", ".join(["%s"] * len(COLUMNS)))
    feedback_sql = "INSERT INTO assistant_feedback (reason, created_at, request_id) VALUES (%s, %s, %s)"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # COPY is several times faster than INSERT there
            with cursor.cursor.copy(f"COPY rag_requestrecord ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            if feedback:
                with cursor.cursor.copy("COPY assistant_feedback (reason, created_at, request_id) FROM STDIN") as copy:
                    for row in feedback:
                        copy.write_row(row)
        else:  # the driver's own executemany: Django's wrapper would rewrite every row's parameters
            raw = connection.connection
            raw.executemany(record_sql.replace("%s", "?"), rows)
            if feedback:
                raw.executemany(feedback_sql.replace("%s", "?"), feedback)


def empty_tables() -> None:
    """Start over: a new SQLite file (deleting a million rows one cascade at a time is slow), or TRUNCATE."""
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE assistant_feedback, opsboard_dailyreport, opsboard_hourstat, rag_requestrecord "
                           "RESTART IDENTITY")
        return
    name = Path(connection.settings_dict["NAME"])
    connection.close()
    for path in (name, Path(f"{name}-wal"), Path(f"{name}-shm")):
        path.unlink(missing_ok=True)
    call_command("migrate", interactive=False, verbosity=0)


def fill(count: int, seed: int) -> dict:
    """Insert `count` records (and their feedback) in batches; return counts and rates.

    Other processes make the batches while this one inserts them: making rows costs about as much as storing them.
    """
    from django.db import connection, transaction

    moments = diurnal_moments(random.Random(seed), count, time.time())
    tasks = ((first, moments[first:first + BATCH], seed + first, connection.vendor) for first in range(0, count, BATCH))
    mix = Counter(dict.fromkeys(("records", "web", "mcp", "eval", "failed", "empty", "low", "degraded",
                                 "thumbs_down"), 0))
    connection.close()  # no connection crosses the fork
    started, done, workers = time.perf_counter(), 0, max(1, (os.cpu_count() or 2) - 1)

    def store(batch: tuple[list[tuple], list[tuple], Counter]) -> None:
        nonlocal done
        rows, feedback, made = batch
        with transaction.atomic():  # ids are given (1…count), so feedback rows point at records without a lookup
            insert_batch(rows, feedback)
        mix.update(made)
        done += len(rows)
        if done % 100_000 == 0 or done == count:
            print(f"  inserted {done:>9,} records  {done / (time.perf_counter() - started):>8,.0f}/s", flush=True)

    with multiprocessing.get_context("fork").Pool(workers, _start_generator, (seed,)) as pool:
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:  # a bulk load: no fsync per batch, a big page cache
                cursor.execute("PRAGMA synchronous=OFF")
                cursor.execute("PRAGMA cache_size=-1000000")
        pending: deque = deque()
        for task in tasks:  # two batches in flight per worker: more would only pile up in this process's memory
            pending.append(pool.apply_async(synthetic_batch, (task,)))
            if len(pending) > 2 * workers:
                store(pending.popleft().get())
        while pending:
            store(pending.popleft().get())
    seconds = time.perf_counter() - started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for table in ("rag_requestrecord", "assistant_feedback"):
                cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                               f"COALESCE((SELECT MAX(id) FROM {table}), 1))")
            cursor.execute("ANALYZE rag_requestrecord; ANALYZE assistant_feedback")
    else:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    connection.close()  # drop the load's page cache before measuring memory
    return {"seconds": round(seconds, 1), "rate_per_s": round(count / seconds), "mix": dict(mix)}


def build_reports() -> dict:
    """Build the daily report of each filled day (the reports page lists them); time each build."""
    from django.utils import timezone

    from opsboard.services import daily_report_build

    today, timings = timezone.localdate(), []
    for back in range(DAYS, 0, -1):
        started = time.perf_counter()
        daily_report_build(today - datetime.timedelta(days=back))
        timings.append((time.perf_counter() - started) * 1000)
    return {"reports": len(timings), "median_ms": round(statistics.median(timings), 1),
            "max_ms": round(max(timings), 1)}


def roll_up() -> dict:
    """Roll up every closed hour of the filled days, as the five-minute job would have by now; time that job too."""
    from opsboard.services import rollup_hours

    started = time.perf_counter()
    written = rollup_hours(hours=(DAYS + 1) * 24)
    backfill = time.perf_counter() - started
    started = time.perf_counter()
    rollup_hours()
    return {"hours_written": written, "backfill_s": round(backfill, 1),
            "job_ms": round((time.perf_counter() - started) * 1000, 1)}


def group_gaps() -> dict:
    """Run the hourly gaps job as it would run now, twice: the first embeds the questions it has not kept yet
    (at most opsboard.gaps.MAX_EMBEDDED_PER_RUN), the second is the job of an ordinary hour."""
    from opsboard.gaps import gaps_compute

    runs = []
    for _ in range(2):
        started = time.perf_counter()
        run = gaps_compute()
        runs.append({"s": round(time.perf_counter() - started, 1), "questions": run.questions, "groups": run.groups,
                     "embedded_left": run.embedded_left})
    return {"first": runs[0], "next": runs[1]}


def ensure_filled(args: argparse.Namespace) -> dict:
    """Reuse the database when it holds what was asked for, else fill it; roll up hours; build daily reports."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db.models import Max
    from django.utils import timezone

    from rag.models import RequestRecord

    call_command("migrate", interactive=False, verbosity=0)
    saved = Path(settings.DATA_DIR) / "bench" / "fill.json"
    count = RequestRecord.objects.count()
    newest = RequestRecord.objects.aggregate(newest=Max("created_at"))["newest"]
    age_hours = (timezone.now() - newest).total_seconds() / 3600 if newest else None
    if not args.refill and count == args.records and age_hours is not None and age_hours < args.max_age_hours:
        print(f"Reusing {count:,} records (newest {age_hours:.1f} h old); --refill starts over.")
        setup = {**(json.loads(saved.read_text()) if saved.exists() else {}), "reused": True}
    else:
        if count:
            why = "--refill" if args.refill else (f"{count:,} records, not {args.records:,}" if count != args.records
                                                  else f"newest record {age_hours:.1f} h old")
            print(f"Emptying the tables ({why}).")
            empty_tables()
        print(f"Inserting {args.records:,} records in batches of {BATCH:,} …", flush=True)
        setup = {"reused": False, **fill(args.records, args.seed)}
        mix = setup["mix"]
        print("  mix: " + ", ".join(f"{name} {mix[name] / mix['records']:.1%}" for name in mix if name != "records"))
    print("Rolling up hours …", flush=True)
    setup["rollup"] = roll_up()
    print("Grouping the coverage gaps …", flush=True)
    setup["gaps"] = group_gaps()
    if not setup["reused"]:
        print("Building the daily reports …", flush=True)
        setup["daily_report_build"] = build_reports()
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(setup, indent=1))
    return setup


# -- timing the pages --------------------------------------------------------------------------------------


def ops_client():
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-ops", defaults={"is_superuser": True,
                                                                                   "is_staff": True})
    group, _ = Group.objects.get_or_create(name=settings.RAG_OPS_GROUP)
    user.groups.add(group)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return client


def pages_to_time() -> list[tuple[str, str]]:
    from opsboard.selectors import PAGE_SIZE
    from rag.models import RequestRecord

    newest_ids = list(RequestRecord.objects.order_by("-id").values_list("id", flat=True)[:PAGE_SIZE])
    middle = RequestRecord.objects.order_by("-id").values_list("id", flat=True).first() // 2
    detail = RequestRecord.objects.filter(channel="web", kind="chat", hit_count__gt=0, feedback__isnull=False) \
        .order_by("-id").values_list("request_id", flat=True).first()
    from opsboard.models import GapGroup

    largest_gap = GapGroup.objects.order_by("-size").values_list("id", flat=True).first() or 0
    return [
        ("overview 24h", "/ops/"),
        ("overview 7d", "/ops/?window=7d"),
        ("overview 30d", "/ops/?window=30d"),
        ("eval traffic 24h", "/ops/eval-traffic"),
        ("eval traffic 30d", "/ops/eval-traffic?window=30d"),
        ("requests", "/ops/requests"),
        ("requests mcp+failed", "/ops/requests?channel=mcp&outcome=failed"),
        ("requests thumbs-down", "/ops/requests?outcome=thumbs_down"),
        (f"requests q={COMMON_WORD}", f"/ops/requests?q={COMMON_WORD}"),
        ("requests q=<no match>", f"/ops/requests?q={RARE_WORD}"),
        ("requests key", f"/ops/requests?key={KEY_PREFIXES[-1]}"),
        ("requests page 2", f"/ops/requests?before={newest_ids[-1]}"),
        ("requests mcp+failed deep", f"/ops/requests?channel=mcp&outcome=failed&before={middle}"),
        ("request detail", f"/ops/requests/{detail}"),
        ("live.json", "/ops/live.json"),
        ("reports", "/ops/reports"),
        ("gaps 7d", "/ops/gaps"),
        ("gaps 30d", "/ops/gaps?window=30d"),
        ("gaps.json 30d", "/ops/gaps.json?window=30d"),
        ("gap detail", f"/ops/gaps/{largest_gap}"),
    ]


def time_page(client, url: str, runs: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings, queries, slowest = [], 0, []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
        queries = len(captured.captured_queries)
        slowest = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))[:5]
    warm = timings[1:] or timings
    return {"url": url, "cold_ms": round(timings[0], 1), "median_ms": round(statistics.median(warm), 1),
            "max_ms": round(max(warm), 1), "queries": queries, "bytes": len(response.content),
            "slowest_queries": [{"ms": round(float(q["time"]) * 1000, 1), "sql": q["sql"]} for q in slowest]}


def query_plan(sql: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            return [f"{'  ' * (parent > 0)}{detail}" for _, parent, _, detail in cursor.fetchall()]
        cursor.execute("EXPLAIN " + sql)
        return [line for (line,) in cursor.fetchall()]


def in_child_process(function, *args):
    """Return function(*args) run in a forked child, so that its memory does not count in this process's peak."""
    from django.db import connection

    connection.close()  # no connection crosses the fork
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=lambda: sender.send(function(*args)))
    child.start()
    sender.close()
    try:
        result = receiver.recv()
    except EOFError:
        result = None
    child.join()
    if child.exitcode:
        raise SystemExit(f"filling the database failed (exit code {child.exitcode})")
    return result


def main() -> int:
    args = parse_args()
    configure(args)
    from django.conf import settings

    print(f"Database: {database_label()}")
    setup = in_child_process(ensure_filled, args)
    client = ops_client()
    reset_peak_rss()
    results = {}
    for name, url in pages_to_time():
        results[name] = time_page(client, url, args.runs)
        print(f"  {name:28s} {results[name]['median_ms']:>9.1f} ms", flush=True)
    size, peak = database_size(), peak_rss_mb()

    print()
    print(f"{args.records:,} records, {database_label()}, {args.runs} runs per page (cold = the first)")
    print(f"{'page':28s} {'cold ms':>9s} {'median ms':>9s} {'max ms':>9s} {'queries':>7s}")
    for name, r in results.items():
        flag = "  <-- over budget" if r["median_ms"] > args.slow_ms else ""
        print(f"{name:28s} {r['cold_ms']:9.1f} {r['median_ms']:9.1f} {r['max_ms']:9.1f} {r['queries']:7d}{flag}")
    if "seconds" in setup:
        print(f"insert{' (when filled)' if setup['reused'] else ''}: {setup['seconds']} s, "
              f"{setup['rate_per_s']:,} records/s; daily report build: median "
              f"{setup['daily_report_build']['median_ms']} ms")
    rollup = setup["rollup"]
    print(f"hour rollup: {rollup['hours_written']} hour rows in {rollup['backfill_s']} s (backfill); "
          f"the five-minute job afterwards: {rollup['job_ms']} ms")
    for name, run in setup.get("gaps", {}).items():
        print(f"gaps job ({name} run): {run['s']} s, {run['questions']:,} unanswered questions in {run['groups']:,} "
              f"groups, {run['embedded_left']:,} left to embed")
    print(f"database size: {size / 2**20:,.0f} MiB; peak RSS while timing pages: {peak:,.0f} MiB")

    for name, r in results.items():
        if r["median_ms"] <= args.slow_ms:
            continue
        print(f"\n== {name} ({r['url']}): {r['median_ms']} ms; its slowest queries")
        for query in [q for q in r["slowest_queries"] if q["ms"] >= 10]:
            print(f"-- {query['ms']} ms: {query['sql'][:600]}{' …' if len(query['sql']) > 600 else ''}")
            query["plan"] = query_plan(query["sql"])
            print("\n".join("   " + line for line in query["plan"]))

    out = Path(settings.DATA_DIR) / "bench" / "ops.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"records": args.records, "database": database_label(), "runs": args.runs,
                               "setup": setup, "database_bytes": size, "peak_rss_mb": round(peak, 1),
                               "pages": results}, indent=1, ensure_ascii=False))
    print(f"\nWrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
