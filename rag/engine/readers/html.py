"""HTML for the readers: parse a page with lxml, strip page chrome, and turn an element into clean Markdown.

Every generator's reader finds its own sections; this module does what they share. The Markdown keeps code
blocks intact (with their language when the markup names it), tables as tables, lists and definition lists,
and drops permalink marks, comments, scripts and styles. A tree deeper than MAX_DEPTH is read as plain text
below that depth, so hostile HTML cannot exhaust the stack.
"""

from __future__ import annotations

import re

from lxml import etree
from lxml import html as lxml_html

MAX_DEPTH = 100
XML_DECLARATION_RE = re.compile(r"\A\s*<\?xml[^>]*\?>", re.I)
GENERATOR_RE = re.compile(r"<meta\s[^>]*name=[\"']generator[\"'][^>]*>", re.I)
TAG_RE = re.compile(r"<[^>]*>")
COMMENT_RE = re.compile(r"<!--.*?-->|<(script|style)\b.*?</\1\s*>", re.S | re.I)
HEADING_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
BLOCK_TAGS = HEADING_TAGS | {"p", "pre", "ul", "ol", "dl", "table", "blockquote", "div", "section", "article",
                             "main", "details", "figure", "hr", "header", "footer", "aside", "nav", "center",
                             "dt", "dd", "li", "form", "fieldset", "summary", "body"}
DROPPED_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "object", "button", "input", "select",
                "textarea", "map", "link", "meta", "head")
PERMALINK_TEXT = {"¶", "#", "§", "🔗", "\uf0c1"}
SPACE_RE = re.compile(r"[ \t\r\f\v\u00a0]+")
LANGUAGE_RE = re.compile(r"^(?:language|lang|highlight)-([\w+#-]+)$")


def parse(text: str):
    """Parse a page into an lxml tree (an HTML document element); comments and processing instructions go."""
    text = XML_DECLARATION_RE.sub("", text, count=1)
    if not text.strip():
        text = "<html><body></body></html>"
    parser = lxml_html.HTMLParser(remove_comments=True, remove_pis=True, recover=True, huge_tree=True)
    try:
        root = lxml_html.document_fromstring(text, parser=parser)
    except (etree.ParserError, ValueError):
        root = lxml_html.document_fromstring("<html><body></body></html>", parser=parser)
    if _lost_text(root, text):  # nested deeper than libxml2 follows: read the page as plain text instead
        root = lxml_html.document_fromstring("<html><body><p></p></body></html>", parser=parser)
        root.find(".//p").text = " ".join(TAG_RE.sub(" ", COMMENT_RE.sub(" ", text)).split())
    for element in list(root.iter(*DROPPED_TAGS)):  # listed first: dropping while iterating skips elements
        if element.tag != "head" and element.getparent() is not None:
            drop(element)
    return root


def _lost_text(root, text: str) -> bool:
    """Whether the parser dropped most of a page's text (it stops following elements below a depth)."""
    if len(text) < 2000 and text.count("<") < 400:
        return False
    kept = sum(len(t) for t in root.itertext())
    raw = len("".join(TAG_RE.sub("", COMMENT_RE.sub("", text)).split()))
    return kept < raw / 2


def generator_of(text: str) -> str:
    """The content of a page's `<meta name="generator">`, lowercased; "" when it has none."""
    match = GENERATOR_RE.search(text[:20000])
    if not match:
        return ""
    content = re.search(r"content=[\"']([^\"']*)[\"']", match.group(0), re.I)
    return content.group(1).lower() if content else ""


def drop(element) -> None:
    """Remove an element but keep the text that follows it (lxml keeps that text on the element)."""
    parent = element.getparent()
    if parent is None:
        return
    tail = element.tail
    previous = element.getprevious()
    if tail:
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(element)


def drop_all(root, xpath: str) -> None:
    """Remove every element an XPath finds."""
    for element in root.xpath(xpath):
        drop(element)


def classes(element) -> set[str]:
    return set((element.get("class") or "").split())


def has_class(name: str) -> str:
    """An XPath test for one CSS class: `//div[{has_class('body')}]`."""
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


def text_of(element) -> str:
    """An element's text with whitespace collapsed and permalink marks removed."""
    if element is None:
        return ""
    text = " ".join("".join(element.itertext()).split())
    for mark in PERMALINK_TEXT:
        if text.endswith(" " + mark) or text.endswith(mark) and len(text) > 1 and mark != "#":
            text = text[: -len(mark)].rstrip()
    return text


def heading_level(element) -> int:
    return int(element.tag[1]) if isinstance(element.tag, str) and element.tag in HEADING_TAGS else 0


def is_permalink(element) -> bool:
    """A permalink anchor beside a heading or signature: `¶`, `#`, an empty anchor, or one classed so."""
    if element.tag != "a":
        return False
    css = classes(element)
    if css & {"headerlink", "anchor", "anchorjs-link", "hash-link", "permalink", "header-anchor", "tsd-anchor",
              "headerlink-icon"}:
        return True
    text = "".join(element.itertext()).strip()
    return (element.get("href") or "").startswith("#") and text in PERMALINK_TEXT


class Markdown:
    """Convert an element to Markdown; `skip(element)` leaves out an element (and its subtree)."""

    def __init__(self, *, skip=None, heading_offset: int = 0):
        self.skip = skip
        self.heading_offset = heading_offset

    def run(self, element) -> str:
        blocks: list[str] = []
        if self._skipped(element):
            return ""
        self._block(element, blocks, 0)
        text = "\n\n".join(b for b in (block.strip("\n") for block in blocks) if b.strip())
        return re.sub(r"\n{3,}", "\n\n", text).strip()

    def inline(self, element, depth: int = 0) -> str:
        """The inline text of an element: code spans in backticks, line breaks kept, whitespace collapsed."""
        parts: list[str] = []
        self._inline(element, parts, depth, top=True)
        return SPACE_RE.sub(" ", "".join(parts)).replace(" \n", "\n").replace("\n ", "\n").strip()

    def _skipped(self, element) -> bool:
        return not isinstance(element.tag, str) or is_permalink(element) or bool(self.skip and self.skip(element))

    def _inline(self, element, parts: list[str], depth: int, *, top: bool = False) -> None:
        if not top:
            if self._skipped(element):
                parts.append(element.tail or "")
                return
        tag = element.tag if isinstance(element.tag, str) else ""
        if depth > MAX_DEPTH:
            parts.append(" ".join("".join(element.itertext()).split()))
        elif tag == "br":
            parts.append("\n")
        elif tag in {"code", "tt", "kbd", "samp"} and not top:
            code = " ".join("".join(element.itertext()).split())
            if code:
                fence = "``" if "`" in code else "`"
                parts.append(f"{fence}{code}{fence}")
        elif tag == "img" and not top:
            alt = (element.get("alt") or "").strip()
            if alt:
                parts.append(alt)
        else:
            if element.text:
                parts.append(element.text.replace("\n", " "))
            for child in element:
                self._inline(child, parts, depth + 1)
        if not top and element.tail:
            parts.append(element.tail.replace("\n", " "))

    def _has_blocks(self, element) -> bool:
        return any(isinstance(child.tag, str) and child.tag in BLOCK_TAGS for child in element)

    def _blocks(self, element, blocks: list[str], depth: int) -> None:
        """Append the blocks of an element's children (its own text counts as a paragraph)."""
        pending: list[str] = []

        def flush() -> None:
            text = SPACE_RE.sub(" ", "".join(pending)).strip()
            if text:
                blocks.append(text)
            pending.clear()

        if element.text and element.text.strip():
            pending.append(element.text.replace("\n", " "))
        for child in element:
            if self._skipped(child):
                if child.tail and isinstance(child.tag, str):
                    pending.append(child.tail.replace("\n", " "))
                continue
            tag = child.tag
            if tag in BLOCK_TAGS or tag == "pre":
                flush()
                self._block(child, blocks, depth + 1)
                if child.tail and child.tail.strip():
                    pending.append(child.tail.replace("\n", " "))
            else:
                self._inline(child, pending, depth + 1)
        flush()

    def _block(self, element, blocks: list[str], depth: int) -> None:
        tag = element.tag
        if depth > MAX_DEPTH:
            text = " ".join("".join(element.itertext()).split())
            if text:
                blocks.append(text)
        elif tag in HEADING_TAGS:
            text = self.inline(element, depth)
            text = " ".join(text.split())
            if text:
                level = min(6, max(1, heading_level(element) + self.heading_offset))
                blocks.append("#" * level + " " + text)
        elif tag == "pre":
            blocks.append(fenced(element))
        elif tag in {"p", "summary", "dt"}:
            if self._has_blocks(element):
                self._blocks(element, blocks, depth)
            else:
                text = self.inline(element, depth)
                if text:
                    blocks.append(f"**{text}**" if tag == "dt" and "\n" not in text else text)
        elif tag in {"ul", "ol"}:
            items = [self._list_item(li, depth, n, ordered=tag == "ol")
                     for n, li in enumerate((c for c in element if c.tag == "li" and not self._skipped(c)), 1)]
            text = "\n".join(item for item in items if item)
            if text:
                blocks.append(text)
        elif tag == "dl":
            for child in element:
                if self._skipped(child):
                    continue
                if child.tag == "dt":
                    text = self.inline(child, depth)
                    if text:
                        blocks.append(f"**{text}**" if "\n" not in text else text)
                elif child.tag == "dd":
                    self._blocks(child, blocks, depth)
                elif isinstance(child.tag, str):
                    self._block(child, blocks, depth + 1)
        elif tag == "table":
            table = self._table(element, depth)
            if table:
                blocks.append(table)
        elif tag == "blockquote":
            inner: list[str] = []
            self._blocks(element, inner, depth)
            text = "\n\n".join(inner)
            if text.strip():
                blocks.append("\n".join("> " + line if line else ">" for line in text.splitlines()))
        elif tag == "hr":
            return
        else:
            self._blocks(element, blocks, depth)

    def _list_item(self, li, depth: int, number: int, *, ordered: bool) -> str:
        inner: list[str] = []
        self._blocks(li, inner, depth + 1)
        text = "\n".join(inner).strip()
        if not text:
            return ""
        marker = f"{number}. " if ordered else "- "
        lines = text.splitlines()
        return "\n".join([marker + lines[0]] + ["  " + line if line else "" for line in lines[1:]])

    def _table(self, table, depth: int) -> str:
        rows = []
        for tr in table.iter("tr"):
            if depth + 2 > MAX_DEPTH:
                break
            cells = [c for c in tr if c.tag in {"td", "th"} and not self._skipped(c)]
            row = []
            for cell in cells:
                text = " ".join(self.inline(cell, depth + 2).split()).replace("|", "\\|")
                row.append(text)
            if any(row):
                rows.append(row)
        if not rows:
            return ""
        width = max(len(r) for r in rows)
        if width == 1:  # a one-column table is a list
            return "\n".join(f"- {r[0]}" for r in rows if r[0])
        rows = [r + [""] * (width - len(r)) for r in rows]
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines)


def fenced(pre) -> str:
    """A `<pre>` as a fenced code block, its language from the classes of it, its parent or its `<code>`."""
    code = "".join(pre.itertext()).strip("\n")
    language = ""
    candidates = [pre, pre.getparent()] + list(pre.iter("code"))[:1]
    parent = pre.getparent()
    if parent is not None and parent.getparent() is not None:
        candidates.append(parent.getparent())
    for element in candidates:
        if element is None:
            continue
        for css in classes(element):
            match = LANGUAGE_RE.match(css)
            if match and match.group(1) not in {"default", "none", "text"}:
                language = match.group(1)
                break
        if language:
            break
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code.rstrip()}\n{fence}"


def to_markdown(element, *, skip=None, heading_offset: int = 0) -> str:
    """Convert one element (and its subtree) to clean Markdown."""
    return Markdown(skip=skip, heading_offset=heading_offset).run(element)
