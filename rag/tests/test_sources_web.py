"""Issue 30: a knowledge base synced from a documentation website. The site is served here, on 127.0.0.1, from
pages JSDoc generated (reader_fixtures/jsdoc), with a robots.txt, a redirect, a 404, an image and an optional
sitemap; ETag and Last-Modified are honoured, so a second sync of an unchanged site only asks "changed?"."""

from __future__ import annotations

import hashlib
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import serve_on_loopback

from rag.models import KnowledgeBase
from rag.tests.test_cli import run_json, run_json_failure

pytestmark = pytest.mark.django_db

JSDOC = Path(__file__).resolve().parent / "reader_fixtures" / "jsdoc"
EXTRA_LINKS = ('<a href="old.html">old</a> <a href="logo.png">logo</a> <a href="private/notes.html">notes</a> '
               '<a href="../outside.html">outside</a> <a href="https://elsewhere.example/x.html">elsewhere</a>')


class Site:
    """The pages served (path -> (content type, bytes)) and every request the server got (path, headers, time)."""

    def __init__(self):
        index = (JSDOC / "commander-index.html").read_text(encoding="utf-8").replace("</body>", EXTRA_LINKS + "</body>")
        self.pages = {
            "/api/": ("text/html", index.encode()),
            "/api/index.html": ("text/html", index.encode()),
            "/api/Option.html": ("text/html", (JSDOC / "commander-Option.html").read_bytes()),
            "/api/global.html": ("text/html", (JSDOC / "commander-global.html").read_bytes()),
            "/api/logo.png": ("image/png", b"\x89PNG\r\n\x1a\n" + bytes(64)),
            "/api/private/notes.html": ("text/html", b"<html><body><h1>Private</h1></body></html>"),
            "/outside.html": ("text/html", b"<html><body><h1>Outside</h1></body></html>"),
            "/robots.txt": ("text/plain", b"User-agent: *\nDisallow: /api/private/\n"),
        }
        self.redirects = {"/api/old.html": "/api/Option.html"}
        self.requests: list[tuple[str, dict, float]] = []
        self.lock = threading.Lock()
        self.modified = formatdate(1_700_000_000, usegmt=True)
        self.slow: threading.Event | None = None  # set: each page waits for it (up to 5 s) before answering
        self.in_flight = self.most_in_flight = 0

    def page_requests(self, path: str = "") -> list[tuple[str, dict, float]]:
        return [r for r in self.requests if r[0].startswith("/api/") and r[0].endswith(".html" if not path else path)]


@pytest.fixture
def site(settings, tmp_path):
    state = Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            with state.lock:
                state.requests.append((self.path, dict(self.headers), time.monotonic()))
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
            try:
                if state.slow is not None and self.path.startswith("/api/"):
                    state.slow.wait(0.3)  # a slow page: requests sent meanwhile overlap it
                self.serve()
            finally:
                with state.lock:
                    state.in_flight -= 1

        def serve(self):
            if self.path in state.redirects:
                self.send_response(301)
                self.send_header("Location", state.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path not in state.pages:
                return self.answer(404, "text/html", b"<html><body>Not found</body></html>")
            kind, body = state.pages[self.path]
            etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            self.answer(200, kind, body, etag)

        def answer(self, status, kind, body, etag=None):
            self.send_response(status)
            self.send_header("Content-Type", kind + ("; charset=utf-8" if kind.startswith("text/") else ""))
            self.send_header("Content-Length", str(len(body)))
            if etag:
                self.send_header("ETag", etag)
                self.send_header("Last-Modified", state.modified)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serve_on_loopback(Handler) as base:
        state.base = base.removesuffix("/v1")
        settings.DATA_DIR = tmp_path / "data"
        settings.RAG_SOURCE_ROOTS = [str(tmp_path / "data" / "sources"), state.base + "/api/"]
        settings.RAG_CRAWL_DELAY = 0.0
        yield state


def test_a_website_is_crawled_within_its_prefix_and_a_second_sync_only_asks_if_pages_changed(site, engine):
    first = run_json("reindex", "--kb", "site", "--source", site.base + "/api/")

    assert first["pages"] == {"added": 3, "changed": 0, "removed": 0, "renamed": 0, "unchanged": 0}
    crawl = first["source"]["crawl"]
    reasons = {item["url"].removeprefix(site.base): item["reason"] for item in crawl["skipped"]}
    assert reasons["/api/Argument.html"] == "HTTP 404"
    assert reasons["/api/logo.png"] == "not HTML (image/png)"
    assert reasons["/api/private/notes.html"] == "excluded by robots.txt"
    assert not [r for r in site.requests if r[0] in ("/api/private/notes.html", "/outside.html")]
    assert first["source"]["kind"] == "website" and first["source"]["revision"].startswith("crawled ")
    found = run_json("search", "--kb", "site", "How do I make an option mandatory?")["results"]
    assert found and found[0]["source"] == "Option.html"
    assert KnowledgeBase.objects.get(slug="site").base_url == site.base + "/api/"  # citations link to the site

    asked = len(site.page_requests())
    second = run_json("reindex", "--kb", "site", "--if-changed")

    again = site.page_requests()[asked:]
    assert second["unchanged"] is True and second["version"] == first["version"]
    assert again and all("If-None-Match" in headers for path, headers, _ in again
                         if path in ("/api/", "/api/index.html", "/api/Option.html", "/api/global.html"))
    assert second["source"]["crawl"]["fetched"] == 0 and second["source"]["crawl"]["not_modified"] == 5  # 3 pages, 5 URLs

    kind, body = site.pages["/api/Option.html"]
    site.pages["/api/Option.html"] = (kind, body.replace(b"</body>", b"<p>Options may be hidden from help.</p></body>"))
    del site.pages["/api/global.html"]

    third = run_json("reindex", "--kb", "site")

    assert third["pages"] == {"added": 0, "changed": 1, "removed": 1, "renamed": 0, "unchanged": 1}
    assert run_json_failure("read", "--kb", "site", "global.html")["code"] == "source_not_found"


def test_a_site_with_a_sitemap_is_read_from_it_and_its_links_are_not_followed(site, engine, capsys):
    sitemap = ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
               f'<url><loc>{site.base}/api/index.html</loc></url><url><loc>{site.base}/api/Option.html</loc></url>'
               f'<url><loc>{site.base}/elsewhere/page.html</loc></url></urlset>')
    site.pages["/api/sitemap.xml"] = ("application/xml", sitemap.encode())

    synced = run_json("reindex", "--kb", "site", "--source", site.base + "/api/")

    assert synced["synced_notes"] == 2 and not site.page_requests("global.html")
    assert "fetching pages: 2/2 (100%)" in capsys.readouterr().err  # the crawl's progress, then the embedding's
    assert not [r for r in site.requests if r[0].startswith("/elsewhere/")]


def test_a_crawl_over_its_page_budget_fails_and_the_active_version_keeps_serving(site, engine, settings):
    first = run_json("reindex", "--kb", "site", "--source", site.base + "/api/")
    settings.RAG_CRAWL_MAX_PAGES = 2

    failed = run_json_failure("reindex", "--kb", "site")

    assert failed["code"] == "source_sync_failed" and "RAG_CRAWL_MAX_PAGES" in failed["error"]
    assert KnowledgeBase.objects.get(slug="site").active_version.name == first["version"]
    assert run_json("read", "--kb", "site", "global.html")["content"]  # nothing was removed


def test_the_politeness_delay_spaces_the_requests(site, engine, settings):
    settings.RAG_CRAWL_DELAY = 0.2

    run_json("reindex", "--kb", "site", "--source", site.base + "/api/")

    pages = [when for path, _, when in site.requests if path != "/robots.txt" and not path.endswith(".xml")]
    # The crawler waits 0.2 s between requests; the server notes each one a little after it is sent, so the span
    # is checked with one delay to spare (a lower bound: a busy machine only makes it longer).
    assert len(pages) >= 5 and pages[-1] - pages[0] >= 0.2 * (len(pages) - 2)


def test_a_website_outside_the_allowed_prefixes_is_refused_before_any_request(site, settings):
    settings.RAG_SOURCE_ROOTS = [*settings.RAG_SOURCE_ROOTS, "https://docs.example.com"]
    refused = run_json_failure("reindex", "--kb", "site", "--source", site.base + "/")
    internal = run_json_failure("reindex", "--kb", "site", "--source", "http://169.254.169.254/latest/")
    lookalike = run_json_failure("reindex", "--kb", "site", "--source", "https://docs.example.com.evil.example/api/")

    assert refused["code"] == internal["code"] == lookalike["code"] == "source_not_allowed"
    assert site.requests == [] and not KnowledgeBase.objects.exists()


def test_four_fetchers_crawl_the_same_pages_at_once(site, engine, settings):
    settings.RAG_CRAWL_CONCURRENCY = 4
    site.slow = threading.Event()  # never set: every page takes 0.3 s, so fetchers sent together overlap

    synced = run_json("reindex", "--kb", "site", "--source", site.base + "/api/")

    assert synced["synced_notes"] == 3 and site.most_in_flight > 1
    reasons = {item["url"].removeprefix(site.base): item["reason"] for item in synced["source"]["crawl"]["skipped"]}
    assert reasons["/api/Argument.html"] == "HTTP 404" and reasons["/api/private/notes.html"] == "excluded by robots.txt"
