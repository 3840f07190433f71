"""A documentation website as a knowledge base's source (E1, issue 30): its pages are fetched into a folder of the
data folder, which the build then reads like any other (the HTML readers know the generators).

`https://docs.example.com/api/` is crawled within that host and path prefix: from its sitemap.xml when it has one
(`<prefix>sitemap.xml`, else the host's `/sitemap.xml`, sitemap indexes followed one level), else by following the
links of each page from the prefix itself. robots.txt is honoured; at most RAG_CRAWL_MAX_PAGES pages are fetched,
RAG_CRAWL_DELAY seconds apart. A later sync sends each page's ETag and Last-Modified back (a 304 keeps the page as it
was). Redirects are followed only within the prefix, a page's canonical link names it, and responses that are not
HTML (images, archives, PDFs), errors and pages robots.txt excludes are skipped, each with its reason. A page the
site no longer has is removed from the folder, so it leaves the knowledge base at the next build.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.robotparser
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import requests
from bs4 import BeautifulSoup
from django.conf import settings

from infra.errors import ServiceError

STATE_FILE = ".crawl.json"  # hidden: ingest skips it
USER_AGENT = "sdk-docs-assistant/1 (+documentation sync)"
REDIRECT_LIMIT = 5
SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


@dataclass
class CrawlReport:
    """What a crawl did: pages written or kept, requests made, and the URLs it skipped with why."""

    pages: int = 0  # HTML pages the folder now holds
    fetched: int = 0  # GET requests answered 200 with a page
    not_modified: int = 0  # conditional GETs answered 304
    requests: int = 0  # every request made (robots.txt and sitemaps included)
    skipped: list[dict] = field(default_factory=list)  # {"url", "reason"}
    budget_hit: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"pages": self.pages, "fetched": self.fetched, "not_modified": self.not_modified,
                "requests": self.requests, "skipped": self.skipped, "budget_hit": self.budget_hit,
                "seconds": round(self.seconds, 3)}


def in_scope(url: str, prefix: str) -> bool:
    """A URL of the prefix's scheme and host whose path lies under the prefix's path."""
    return urldefrag(url)[0].startswith(prefix)


def page_file(url: str, prefix: str) -> str:
    """The folder path a page is stored at: its path below the prefix, `index.html` for a directory URL, `.html`
    added when the name has no HTML suffix."""
    relative = unquote(urlsplit(urldefrag(url)[0]).path[len(urlsplit(prefix).path):]).lstrip("/")
    if not relative or relative.endswith("/"):
        relative += "index.html"
    parts = [p for p in relative.split("/") if p not in ("", ".", "..")]
    name = "/".join(parts) or "index.html"
    return name if name.lower().endswith((".html", ".htm")) else name + ".html"


class Crawler:
    """Fetch a site's pages under a prefix into a folder, conditionally after the first time."""

    def __init__(self, prefix: str, folder: Path, *, max_pages: int | None = None, delay: float | None = None,
                 concurrency: int | None = None, progress=None):
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.folder = folder
        self.max_pages = settings.RAG_CRAWL_MAX_PAGES if max_pages is None else max_pages
        self.delay = settings.RAG_CRAWL_DELAY if delay is None else delay
        self.concurrency = max(1, settings.RAG_CRAWL_CONCURRENCY if concurrency is None else concurrency)
        self.report = CrawlReport()
        self.progress = progress  # called (pages handled, URLs known so far) after each batch
        self._last = 0.0
        self._pace = threading.Lock()  # request starts are spaced by the delay, whichever fetcher sends them
        self._count = threading.Lock()  # the report's counters
        self._local = threading.local()  # one requests.Session per fetcher thread

    @property
    def session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers["User-Agent"] = USER_AGENT
        return session

    def _note(self, counter: str = "", skipped: dict | None = None) -> None:
        with self._count:
            if counter:
                setattr(self.report, counter, getattr(self.report, counter) + 1)
            if skipped:
                self.report.skipped.append(skipped)

    def run(self) -> CrawlReport:
        started = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        state_path = self.folder / STATE_FILE
        before = json.loads(state_path.read_text(encoding="utf-8")) if state_path.exists() else {}
        robots = self._robots()
        seeds = self._sitemap_urls()
        follow_links = seeds is None
        queue = deque(seeds if seeds is not None else [self.prefix])
        seen = set(queue)
        after: dict[str, dict] = {}
        files: set[str] = set()
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="crawl") as pool:
            while queue:
                batch = []  # up to `concurrency` pages fetched at once, then handled in the order they were found
                while queue and len(batch) < self.concurrency:
                    url = queue.popleft()
                    if len(files) + len(batch) >= self.max_pages:
                        self.report.budget_hit = True
                        self.report.skipped.append({"url": url, "reason": f"page budget of {self.max_pages} reached"})
                    elif not robots.can_fetch(USER_AGENT, url):
                        self.report.skipped.append({"url": url, "reason": "excluded by robots.txt"})
                    else:
                        batch.append(url)
                for page in pool.map(lambda url: self._fetch_page(url, before), batch):
                    if page is None:
                        continue
                    key, entry, links = page
                    duplicate = entry["file"] in files  # two URLs (a redirect, a canonical link) for one page
                    after[key] = entry  # each URL keeps its validators: the next crawl asks for it conditionally
                    files.add(entry["file"])
                    if duplicate or not follow_links:
                        continue
                    for link in links:
                        if link not in seen and in_scope(link, self.prefix):
                            seen.add(link)
                            queue.append(link)
                if self.progress is not None:
                    self.progress(len(seen) - len(queue), len(seen))
        if self.report.budget_hit:  # not the whole site: nothing is removed, and the build does not go on
            raise ServiceError("source_sync_failed", f"{self.prefix} has more than RAG_CRAWL_MAX_PAGES = "
                                                     f"{self.max_pages} pages; the active version keeps serving.",
                               status=502)
        for entry in before.values():  # pages the site no longer has leave the folder
            if entry["file"] not in files:
                (self.folder / entry["file"]).unlink(missing_ok=True)
        state_path.write_text(json.dumps(after, indent=1, sort_keys=True), encoding="utf-8")
        self.report.pages = len(files)
        self.report.seconds = time.perf_counter() - started
        return self.report

    def _get(self, url: str, headers: dict | None = None) -> tuple[str, requests.Response | None]:
        """GET within the prefix, following redirects only inside it; return the final URL and the response."""
        for _ in range(REDIRECT_LIMIT + 1):
            with self._pace:
                wait = self._last + self.delay - time.monotonic()
                if wait > 0:
                    time.sleep(wait)  # the politeness delay between two requests to the site
                self._last = time.monotonic()
            self._note("requests")
            try:
                response = self.session.get(url, headers=headers or {}, allow_redirects=False, timeout=(5, 30))
            except requests.RequestException as exc:
                raise ServiceError("source_sync_failed", f"cannot fetch {url}: {type(exc).__name__}",
                                   status=502) from exc
            if response.status_code in (301, 302, 303, 307, 308) and "Location" in response.headers:
                target = urljoin(url, response.headers["Location"])
                if not in_scope(target, self.prefix):
                    self._note(skipped={"url": url, "reason": f"redirects outside the site prefix: {target}"})
                    return url, None
                url = target
                continue
            return url, response
        self._note(skipped={"url": url, "reason": "too many redirects"})
        return url, None

    def _robots(self) -> urllib.robotparser.RobotFileParser:
        parts = urlsplit(self.prefix)
        parser = urllib.robotparser.RobotFileParser()
        robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
        try:
            self._note("requests")
            response = self.session.get(robots_url, timeout=(5, 30))
        except requests.RequestException as exc:
            raise ServiceError("source_sync_failed", f"cannot reach {parts.netloc}: {type(exc).__name__}",
                               status=502) from exc
        parser.parse(response.text.splitlines() if response.status_code == 200 else [])
        return parser

    def _sitemap_urls(self) -> list[str] | None:
        """The page URLs the site's sitemap lists under the prefix, or None when it has no sitemap."""
        parts = urlsplit(self.prefix)
        for sitemap in (self.prefix + "sitemap.xml", f"{parts.scheme}://{parts.netloc}/sitemap.xml"):
            locations = self._sitemap(sitemap, depth=1)
            if locations is not None:
                return [u for u in dict.fromkeys(locations) if in_scope(u, self.prefix)]
        return None

    def _sitemap(self, url: str, depth: int) -> list[str] | None:
        import xml.etree.ElementTree as ElementTree

        self._note("requests")
        try:
            response = self.session.get(url, timeout=(5, 30))
        except requests.RequestException:
            return None
        if response.status_code != 200:
            return None
        try:
            root = ElementTree.fromstring(response.content)
        except ElementTree.ParseError:
            return None
        locations = [loc.text.strip() for loc in root.iter(f"{SITEMAP_NS}loc") if loc.text]
        if root.tag == f"{SITEMAP_NS}sitemapindex":
            nested = []
            for child in locations if depth > 0 else []:
                nested += self._sitemap(child, depth - 1) or []
            return nested
        return locations

    def _fetch_page(self, url: str, before: dict) -> tuple[str, dict, list[str]] | None:
        """Fetch one page (conditionally when it was fetched before); write it; return (its key, state, links)."""
        known = before.get(urldefrag(url)[0])
        headers = {}
        if known and (self.folder / known["file"]).exists():
            if known.get("etag"):
                headers["If-None-Match"] = known["etag"]
            if known.get("last_modified"):
                headers["If-Modified-Since"] = known["last_modified"]
        final, response = self._get(url, headers)
        if response is None:
            return None
        if response.status_code == 304 and known:
            self._note("not_modified")
            _, links = self._read(final, (self.folder / known["file"]).read_bytes())
            return urldefrag(url)[0], known, links
        if response.status_code != 200:
            self._note(skipped={"url": url, "reason": f"HTTP {response.status_code}"})
            return None
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind not in ("text/html", "application/xhtml+xml"):
            self._note(skipped={"url": url, "reason": f"not HTML ({kind or 'no content type'})"})
            return None
        self._note("fetched")
        body = response.content
        key, links = self._read(final, body)
        name = page_file(key, self.prefix)
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != body:
            partial = path.with_name(f".{path.name}.{threading.get_ident()}.partial")
            partial.write_bytes(body)
            partial.replace(path)  # two URLs of one page may be fetched at once: each write is whole
        entry = {"file": name, "etag": response.headers.get("ETag", ""),
                 "last_modified": response.headers.get("Last-Modified", ""), "url": key,
                 "sha1": hashlib.sha1(body).hexdigest()}
        return urldefrag(url)[0], entry, links

    def _read(self, url: str, body: bytes) -> tuple[str, list[str]]:
        """Parse a page once: its canonical URL (when it names one inside the prefix, else the URL it was fetched
        from) and the URLs it links to."""
        soup = BeautifulSoup(body, "lxml")
        key = urldefrag(url)[0]
        link = soup.find("link", rel="canonical", href=True)
        if link is not None and in_scope(urljoin(url, link["href"]), self.prefix):
            key = urldefrag(urljoin(url, link["href"]))[0]
        return key, list(dict.fromkeys(urldefrag(urljoin(url, a["href"]))[0] for a in soup.find_all("a", href=True)))
