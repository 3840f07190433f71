"""`make bench-versions`: three SDK versions side by side (issue 32), measured in one run.

The English shared corpus is version 1.0; versions 1.1 and 1.2 are made from it by a seeded script that renames,
removes, adds and re-signs member sections (a member renamed keeps its page and description; the script keeps the
ground truth). Printed: the cold build of 1.0 (fresh data folder, empty embedding cache), the builds of 1.1 and
1.2 as a share of it (they share the embeddings of every unchanged chunk), the diff's precision and recall per kind
of change against the script's truth, search latency (median) on the latest version with one version open and
with all three open, and this process's resident memory after opening one and three.

Runs in `$RAG_DATA_DIR/bench-versions` (replaced each run).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DATA = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve() / "bench-versions"
CHANGES_PER_KIND = 12  # of each kind (rename, remove, add, new signature) per version
MEMBER_RE = re.compile(r"^### \.?([A-Za-z_$][\w$]*)(\s*[(:].*|\s*)$")  # `### .fov : Number`, `### .load ( url )`
KINDS = ("added", "removed", "renamed", "signature_changed")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sections(text: str) -> list[tuple[int, int, str]]:
    """(start line, end line, member) of each `###` member section of a page."""
    lines = text.split("\n")
    heads = [(i, m.group(1)) for i, line in enumerate(lines) if (m := MEMBER_RE.match(line))]
    ends = [i for i, line in enumerate(lines) if line.startswith(("#", "## "))]
    found = []
    for i, member in heads:
        end = next((j for j in ends if j > i), len(lines))
        found.append((i, end, member))
    return found


def class_of(text: str) -> str:
    title = text.split("\n", 1)[0].lstrip("# ").strip()
    match = re.search(r"[（(]([A-Za-z_$][\w$.]*)[）)]\s*$", title)
    return match.group(1) if match else title


def next_version(source: Path, target: Path, rng: random.Random, tag: str) -> dict[str, set]:
    """Copy `source` to `target` with scripted changes; return the truth ({kind: set of `Class.member` or pairs})."""
    shutil.copytree(source, target)
    pages = sorted(target.rglob("*.md"))
    candidates = []  # (page, member) of members documented once on their page
    for page in pages:
        text = page.read_text(encoding="utf-8")
        members = [member for _, _, member in sections(text)]
        candidates += [(page, member) for member in members
                       if members.count(member) == 1 and member != class_of(text)]  # constructors keep their name
    picked = rng.sample(candidates, 3 * CHANGES_PER_KIND)
    truth: dict[str, set] = {kind: set() for kind in KINDS}
    plan = {"renamed": picked[:CHANGES_PER_KIND], "removed": picked[CHANGES_PER_KIND:2 * CHANGES_PER_KIND],
            "signature_changed": picked[2 * CHANGES_PER_KIND:]}
    added_pages = rng.sample(pages, CHANGES_PER_KIND)
    for kind, chosen in plan.items():
        for page, member in chosen:
            text = page.read_text(encoding="utf-8")
            lines = text.split("\n")
            start, end, _ = next(s for s in sections(text) if s[2] == member)
            name = f"{class_of(text)}.{member}"
            if kind == "removed":
                del lines[start:end]
                truth["removed"].add(name)
            elif kind == "renamed":
                renamed = f"{member}{tag}"
                lines[start] = lines[start].replace(member, renamed, 1)
                truth["renamed"].add((name, f"{class_of(text)}.{renamed}"))
            else:
                head = lines[start]
                lines[start] = (head.replace(")", ", options : Object )", 1) if "(" in head
                                else head + f" : {tag}Type")
                truth["signature_changed"].add(name)
            page.write_text("\n".join(lines), encoding="utf-8")
    for number, page in enumerate(added_pages):
        text = page.read_text(encoding="utf-8")
        member = f"addedIn{tag}{number}"
        marker = "\n## Source"
        addition = (f"\n### .{member} ( value : Number ) : undefined\n\nSets the {number}th new setting added by "
                    f"the scripted release {tag} to the given value.\n")
        text = text.replace(marker, addition + marker, 1) if marker in text else text + addition
        page.write_text(text, encoding="utf-8")
        truth["added"].add(f"{class_of(text)}.{member}")
    return truth


def scores(found: dict, truth: dict) -> dict[str, tuple[float, float]]:
    result = {}
    for kind in KINDS:
        got = set(map(tuple, found[kind])) if kind == "renamed" else set(
            m["member"] if isinstance(m, dict) else m for m in found[kind])
        hit = len(got & truth[kind])
        result[kind] = (hit / len(got) if got else 1.0, hit / len(truth[kind]) if truth[kind] else 1.0)
    return result


def main() -> int:
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    os.environ.update(RAG_DATA_DIR=str(DATA), DJANGO_SETTINGS_MODULE="ragsite.settings", RAG_WARM_UP="false",
                      RAG_SOURCE_ROOTS=str(Path(tempfile.gettempdir()).resolve()))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from rag.models import Channel
    from rag.services.knowledge import index_build
    from rag.services.questions import QuestionRequest, question_search
    from rag.services.sdk import sdk_version_ensure, sdk_versions_diff

    work = Path(tempfile.mkdtemp(prefix="bench-versions-"))
    try:
        rng = random.Random(32)
        folders = {"1.0": work / "1.0"}
        shutil.copytree(SHARED / "corpora" / "v3d-api-en", folders["1.0"])
        truths = {}
        for older, newer, tag in (("1.0", "1.1", "V11"), ("1.1", "1.2", "V12")):
            folders[newer] = work / newer
            truths[(older, newer)] = next_version(folders[older], folders[newer], rng, tag)

        print("== SDK versions (issue 32): one run, fresh data folder, cold embedding cache ==")
        builds = {}
        for version in ("1.0", "1.1", "1.2"):
            row = sdk_version_ensure(sdk="v3d", version=version, source=str(folders[version]), language="en")
            started = time.perf_counter()
            built = index_build(row)
            builds[version] = (time.perf_counter() - started, built)
        cold_s, cold = builds["1.0"]
        print(f"1.0 cold build: {cold_s:.1f} s, {cold.chunk_count} chunks ({cold.chunks_embedded} embedded)")
        for version in ("1.1", "1.2"):
            seconds, built = builds[version]
            print(f"{version} build: {seconds:.1f} s = {seconds / cold_s:.1%} of the cold build; "
                  f"{built.chunks_embedded} chunks embedded, {built.chunks_reused} reused from the cache")

        for (older, newer), truth in truths.items():
            found = sdk_versions_diff("v3d", older, newer).as_dict()
            figures = scores(found, truth)
            shown = ", ".join(f"{kind} P {p:.1%} R {r:.1%} ({len(truth[kind])})" for kind, (p, r) in figures.items())
            every = [len(truth[kind]) for kind in KINDS]
            precision = sum(p * n for (p, _), n in zip(figures.values(), every)) / sum(every)
            recall = sum(r * n for (_, r), n in zip(figures.values(), every)) / sum(every)
            print(f"diff {older} -> {newer}: precision {precision:.1%}, recall {recall:.1%} (target >= 95%); {shown}")

        questions = []
        for name in ("retrieval.jsonl", "real_questions_dev.jsonl"):
            for line in (SHARED / "golden" / name).read_text(encoding="utf-8").splitlines():
                row = json.loads(line) if line.strip() else {}
                if row.get("kb") == "v3d-api-en":
                    questions.append(row["question"])

        def ask(question: str, version: str | None = None) -> float:
            started = time.perf_counter()
            question_search(QuestionRequest(question=question, kb="v3d", sdk_version=version, channel=Channel.CLI,
                                            record=False))
            return (time.perf_counter() - started) * 1000

        for question in questions:  # warm: every question's vector is cached, so both passes time the search alone
            ask(question)
        one_rss = rss_mb()
        one = [ask(question) for question in questions]
        for version in ("1.0", "1.1"):  # open the other two versions in this process
            for question in questions[:5]:
                ask(question, version)
        three_rss = rss_mb()
        three = [ask(question) for question in questions]
        print(f"search on latest (1.2), {len(questions)} English dev questions, query vectors cached: median "
              f"{statistics.median(one):.1f} ms with one version open, {statistics.median(three):.1f} ms with three "
              f"open (ratio {statistics.median(three) / statistics.median(one):.2f})")
        print(f"resident memory of this process: {one_rss:.0f} MB with one version open, {three_rss:.0f} MB with "
              f"three (+{(three_rss - one_rss) / 2:.0f} MB a version)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
