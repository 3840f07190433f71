"""`make bench-sync`: syncing knowledge bases from where their docs live (issue 30), timed in one run.

git: the English shared corpus (about 270 pages) is committed to a bare repository in a temporary folder and synced
over file://. Printed: the cold build (every chunk and field embedded), a no-change sync (`--if-changed`: fetch,
compare, build nothing) as a share of it, and a sync after 5 pages were edited (only their chunks embedded),
against 5% of the cold build plus the embedding of what changed.
website: a real generated HTML reference (Click's Sphinx pages from Debian's python-click-doc, prepared by
bench/formats/prepare.sh) served by a local HTTP server with Last-Modified; a cold crawl and build, then a
no-change sync (every page answered 304, nothing built), and the crawl's pages per second at 1 and 4 fetches at a
time (and with a politeness delay).

Everything runs in a fresh data folder (`$RAG_DATA_DIR/bench-sync`, replaced each run); the embedding cache starts
empty, so the cold figures are cold.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DATA = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve() / "bench-sync"
CLICK = Path(os.environ.get("RAG_DATA_DIR", ROOT / "data")).resolve() / "bench-formats" / "click"


def git(folder: Path, *args: str) -> str:
    environment = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                   "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
                   "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    return subprocess.run(["git", *args], cwd=folder, env=environment, capture_output=True, text=True,
                          check=True).stdout.strip()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main() -> int:
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    repos = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    server = None
    if CLICK.is_dir():
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(CLICK.resolve())))
        threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{server.server_port}/" if server else ""
    os.environ.update(RAG_DATA_DIR=str(DATA), DJANGO_SETTINGS_MODULE="ragsite.settings", RAG_CRAWL_DELAY="0",
                      RAG_SOURCE_ROOTS=",".join(filter(None, [f"git+file://{repos}/", site])), RAG_WARM_UP="false")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    try:
        print("== Sync (issue 30): one run, fresh data folder, cold embedding cache ==")
        git_figures(repos)
        if server:
            website_figures(site)
        else:
            print("website: skipped (run bench/formats/prepare.sh for Click's HTML reference)")
    finally:
        if server:
            server.shutdown()
        shutil.rmtree(repos, ignore_errors=True)
    return 0


def timed(call):
    started = time.perf_counter()
    value = call()
    return value, time.perf_counter() - started


def git_figures(repos: Path) -> None:
    from rag.services.knowledge import index_build, index_unchanged_version, kb_ensure

    corpus = SHARED / "corpora" / "v3d-api-en"
    bare, work = repos / "en.git", repos / "work"
    bare.mkdir()
    git(bare, "init", "-q", "--bare", "-b", "main")
    shutil.copytree(corpus, work / "docs")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "pages")
    git(work, "push", "-q", str(bare), "HEAD:main")
    pages = sum(1 for _ in (work / "docs").rglob("*.md"))

    kb = kb_ensure(slug="git-en", source_dir=f"git+file://{bare}#path=docs")
    cold, cold_s = timed(lambda: index_build(kb))
    kb.refresh_from_db()  # its active version is the one just built
    unchanged, same_s = timed(lambda: index_unchanged_version(kb))
    edited = sorted((work / "docs").rglob("*.md"))[::50][:5]
    for page in edited:
        page.write_text(page.read_text(encoding="utf-8") + "\n\nA note added by the sync benchmark.\n", encoding="utf-8")
    git(work, "commit", "-q", "-am", "edit 5 pages")
    git(work, "push", "-q", str(bare), "HEAD:main")
    kb.refresh_from_db()
    after, edit_s = timed(lambda: index_build(kb))
    embed_s = after.timings.get("embed", 0.0)
    print(f"git ({pages} pages, {cold.chunk_count} chunks): cold build {cold_s:.1f} s "
          f"({cold.chunks_embedded} chunks embedded, embedding {cold.timings.get('embed', 0):.1f} s)")
    print(f"  no-change sync: {same_s:.2f} s = {same_s / cold_s:.2%} of cold (target <= 3%), "
          f"built nothing: {unchanged is not None and unchanged.pk == cold.pk}")
    print(f"  5 pages edited: {edit_s:.1f} s, pages {after.page_changes}, {after.chunks_embedded} chunks embedded "
          f"in {embed_s:.1f} s; rest {edit_s - embed_s:.1f} s = {(edit_s - embed_s) / cold_s:.2%} of cold "
          f"(target <= 5%)")


def website_figures(site: str) -> None:
    from rag.services.knowledge import index_build, index_unchanged_version, kb_ensure
    from rag.services.sources import last_crawl

    kb = kb_ensure(slug="site-click", source_dir=site)
    cold, cold_s = timed(lambda: index_build(kb))
    kb.refresh_from_db()
    crawl = last_crawl("site-click")
    unchanged, same_s = timed(lambda: index_unchanged_version(kb))
    again = last_crawl("site-click")
    print(f"website (Click's Sphinx HTML, {crawl['pages']} pages, {cold.chunk_count} chunks): cold crawl + build "
          f"{cold_s:.1f} s; crawl {crawl['seconds']:.1f} s = {crawl['pages'] / max(crawl['seconds'], 1e-9):.0f} "
          f"pages/s at 1 fetch at a time, {len(crawl['skipped'])} URLs skipped")
    print(f"  no-change sync: {same_s:.2f} s = {same_s / cold_s:.2%} of cold (target <= 3%), "
          f"{again['not_modified']} answered 304, {again['fetched']} fetched, built nothing: "
          f"{unchanged is not None and unchanged.pk == cold.pk}")
    from rag.services.crawl import Crawler

    for concurrency, delay in ((1, 0.0), (4, 0.0), (4, 0.05)):
        folder = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
        report = Crawler(site, folder, concurrency=concurrency, delay=delay).run()
        shutil.rmtree(folder, ignore_errors=True)
        page_requests = report.fetched + len(report.skipped)
        print(f"  crawl at {concurrency} fetch(es) at a time, delay {delay} s: {report.pages} pages in "
              f"{report.seconds:.2f} s = {report.pages / report.seconds:.0f} pages/s"
              + (f" (the delay alone takes at least {page_requests * delay:.2f} s)" if delay else ""))


if __name__ == "__main__":
    sys.exit(main())
