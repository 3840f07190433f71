"""Ingest (E1): read a folder of Markdown and HTML API pages into `SourceDocument`s."""

from __future__ import annotations

import re
from pathlib import Path

from .text import sha1
from .types import SourceDocument

MARKDOWN_SUFFIXES = {".md", ".markdown"}
HTML_SUFFIXES = {".html", ".htm"}


class IngestError(Exception):
    pass


def html_to_markdown(html: str) -> str:
    """Convert an HTML API page to the Markdown structure the chunker expects (h1-h3, code fences)."""
    from bs4 import BeautifulSoup, NavigableString, Tag

    soup = BeautifulSoup(html, "html.parser")
    for dropped in soup(["script", "style", "nav", "header", "footer", "noscript"]):
        dropped.decompose()
    root = soup.body or soup
    blocks: list[str] = []

    def inline(node) -> str:
        if isinstance(node, NavigableString):
            return str(node)
        if node.name == "code":
            return "`" + node.get_text() + "`"
        if node.name == "br":
            return "\n"
        return "".join(inline(child) for child in node.children)

    def walk(node) -> None:
        for child in node.children:
            if isinstance(child, NavigableString):
                text = str(child).strip()
                if text:
                    blocks.append(text)
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in {"h1", "h2", "h3", "h4", "h5", "h6"}:
                level = min(int(name[1]), 3) if name != "h1" else 1
                text = " ".join(child.get_text(" ").split())
                if text:
                    blocks.append("#" * level + " " + text)
            elif name == "pre":
                code = child.get_text()
                language = ""
                inner = child.find("code")
                for css in (inner.get("class", []) if inner else []) + child.get("class", []):
                    if css.startswith(("language-", "lang-")):
                        language = css.split("-", 1)[1]
                blocks.append(f"```{language}\n{code.rstrip()}\n```")
            elif name in {"p", "blockquote", "dd", "dt"}:
                text = inline(child).strip()
                if text:
                    blocks.append(("> " if name == "blockquote" else "") + re.sub(r"[ \t]+", " ", text))
            elif name in {"ul", "ol"}:
                items = [" ".join(li.get_text(" ").split()) for li in child.find_all("li", recursive=False)]
                blocks.append("\n".join(f"- {item}" for item in items if item))
            elif name == "table":
                rows = []
                for tr in child.find_all("tr"):
                    cells = [" ".join(c.get_text(" ").split()) for c in tr.find_all(["td", "th"])]
                    rows.append("| " + " | ".join(cells) + " |")
                blocks.append("\n".join(rows))
            else:
                walk(child)

    walk(root)
    markdown = "\n\n".join(b for b in blocks if b)
    if not markdown.lstrip().startswith("# "):
        title = soup.title.get_text().strip() if soup.title else ""
        if title:
            markdown = f"# {title}\n\n{markdown}"
    return markdown + "\n"


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
    root = Path(root)
    if not root.is_dir():
        raise IngestError(f"source folder not found: {root}")
    real_root = root.resolve()
    documents: list[SourceDocument] = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        suffix = path.suffix.lower()
        if suffix not in MARKDOWN_SUFFIXES | HTML_SUFFIXES or not path.is_file():
            continue
        if not path.resolve().is_relative_to(real_root):
            continue  # a symlink leading out of the knowledge base
        raw = path.read_text(encoding="utf-8", errors="replace")
        text = html_to_markdown(raw) if suffix in HTML_SUFFIXES else raw
        documents.append(
            SourceDocument(
                path=relative.as_posix(),
                title=page_title(text, fallback=path.stem),
                text=text,
                content_hash=sha1(raw),
            )
        )
    return documents
