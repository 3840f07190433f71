"""Ingest (E1): read a folder of Markdown and HTML API pages into `SourceDocument`s.

Each page is read by the reader its own markup calls for (readers/: Sphinx, Javadoc, Doxygen, JSDoc, TypeDoc,
gtk-doc, plain HTML, Markdown at any heading depth) into the document model the chunker cuts; its `text` is
that model as Markdown (a Markdown page's own body). A page that yields nothing says why (`skipped_pages`).

Any bytes make a document or an `IngestError`: invalid UTF-8 is decoded with U+FFFD, NUL characters (which
PostgreSQL refuses in text and JSON) become U+FFFD too, as in request records, and a file name that is not
UTF-8 keeps its bytes as `\\xNN` escapes.
"""

from __future__ import annotations

import datetime
import math
import os
import re
from pathlib import Path

from .docmodel import DocPage, RawPage
from .readers import read_page
from .text import sha1
from .types import SourceDocument

MARKDOWN_SUFFIXES = {".md", ".markdown"}
HTML_SUFFIXES = {".html", ".htm"}
FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
SURROGATE_RE = re.compile("[\ud800-\udfff]")
MAX_LABELS = 50
MAX_HTML_DEPTH = 100  # deeper elements are read as plain text: the walk below recurses once per level
MAX_FRONT_MATTER_VALUES = 10_000  # YAML aliases can make a small block expand without limit


class IngestError(Exception):
    pass


def storable(text: str) -> str:
    """Text as the database stores it: NUL characters and lone surrogates replaced by U+FFFD."""
    return SURROGATE_RE.sub("\ufffd", text.replace("\x00", "\ufffd"))


def render_markdown(page: DocPage) -> str:
    """A page's document model as one Markdown text: its title, then each section as read."""
    body = "\n\n".join(section.markdown for section in page.sections)
    return f"# {page.title}\n\n{body}\n" if page.title else body + "\n"


def html_to_markdown(html: str) -> str:
    """Convert an HTML page to clean Markdown through the reader its markup calls for."""
    return render_markdown(read_page(RawPage("page.html", html, ".html")))


def split_front_matter(text: str) -> tuple[dict, str]:
    """Split a Markdown page's YAML front matter (between `---` lines at the very top) from its body.

    Returns (fields, body); a page without front matter, or whose block is not a YAML mapping, comes back
    whole with no fields. Values are made JSON-safe (dates as ISO 8601 strings)."""
    match = FRONT_MATTER_RE.match(text)
    if not match:
        return {}, text
    import yaml

    try:
        data = yaml.safe_load(match.group(1))
        if not isinstance(data, dict):
            return {}, text
        budget = [MAX_FRONT_MATTER_VALUES]
        return {storable(str(name)): _json_safe(value, budget) for name, value in data.items()}, text[match.end():]
    except (yaml.YAMLError, RecursionError, _TooLarge):  # RecursionError: nesting deeper than the stack, or an alias
        return {}, text                                   # to itself (`a: &a [*a]`)


class _TooLarge(Exception):
    pass


def _json_safe(value, budget: list[int]):
    """A YAML value as JSON the database accepts: dates as ISO 8601, NaN and infinities as strings, text storable."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if isinstance(value, dict):
        return {storable(str(k)): _json_safe(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v, budget) for v in value]
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return storable(str(value))


def front_matter_labels(meta: dict) -> list[tuple[str, str]]:
    """The (label, value) pairs of front matter `labels:`, written as a mapping (`labels: {level: [beginner,
    advanced], product: engine}`) or a list (`labels: ["level: beginner", {product: engine}]`); at most MAX_LABELS,
    each once, in order. Anything else in `labels:` is ignored."""
    raw = meta.get("labels")
    pairs: list[tuple[str, str]] = []

    def add(name, value) -> None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, bool | int | float | str) and str(name).strip() and str(item).strip():
                pairs.append((str(name).strip()[:64], str(item).strip()[:200]))

    if isinstance(raw, dict):
        for name, value in raw.items():
            add(name, value)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict):
                for name, value in item.items():
                    add(name, value)
            elif isinstance(item, str) and ":" in item:
                name, _, value = item.partition(":")
                add(name, value)
    return list(dict.fromkeys(pairs))[:MAX_LABELS]


def page_title(markdown: str, fallback: str) -> str:
    """Return the text of the first `# ` heading outside code, or the fallback."""
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        elif not in_code and line.startswith("# "):
            return line[2:].strip()
    return fallback


def read_folder(root: Path) -> list[SourceDocument]:
    """Read every Markdown and HTML page under root (sorted, hidden files and outside links skipped)."""
    return [read_document(path, raw, suffix=suffix) for path, raw, suffix in _pages(root)]


def folder_hashes(root: Path) -> dict[str, str]:
    """The content hash of every page read_folder would read, without reading the pages (the readers' work)."""
    return {path: sha1(raw) for path, raw, _ in _pages(root)}


def _pages(root: Path):
    """Yield (path relative to root, text, suffix) of each Markdown and HTML page under root, sorted."""
    root = Path(root)
    if not root.is_dir():
        raise IngestError(f"source folder not found: {root}")
    real_root = root.resolve()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        suffix = path.suffix.lower()
        if suffix not in MARKDOWN_SUFFIXES | HTML_SUFFIXES or not path.is_file():
            continue
        if not path.resolve().is_relative_to(real_root):
            continue  # a symlink leading out of the knowledge base
        raw = storable(path.read_text(encoding="utf-8", errors="replace"))
        yield os.fsencode(relative.as_posix()).decode("utf-8", "backslashreplace"), raw, suffix


def read_document(path: str, raw: str, *, suffix: str) -> SourceDocument:
    """Read one page's text into a document: front matter split off a Markdown page, then its reader's model."""
    meta: dict = {}
    body = raw
    if suffix in MARKDOWN_SUFFIXES:
        meta, body = split_front_matter(raw)
    stem = os.fsencode(Path(path).stem).decode("utf-8", "backslashreplace")
    fallback = (meta["title"] if isinstance(meta.get("title"), str) and meta["title"].strip() else stem).strip()
    page = read_page(RawPage(path, body, ".md" if suffix in MARKDOWN_SUFFIXES else ".html"), fallback_title=fallback)
    text = body if suffix in MARKDOWN_SUFFIXES else render_markdown(page)
    title = page_title(text, fallback=fallback) if suffix in MARKDOWN_SUFFIXES else (page.title or fallback)
    return SourceDocument(path=path, title=title, text=text, content_hash=sha1(raw), meta=meta, page=page)


def skipped_pages(documents: list[SourceDocument]) -> list[dict]:
    """The pages that yield nothing to index, each with the reason ({"path", "reason"}), in order."""
    return [{"path": d.path, "reason": d.page.skipped} for d in documents if d.page is not None and d.page.skipped]
