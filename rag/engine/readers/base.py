"""What the HTML readers share: a builder that cuts a page's main content into sections in document order.

A reader walks the main content of its page: a heading starts a prose section, a member the generator marks
(Sphinx's `dl.py`, Javadoc's `section.detail`, …) becomes a section of its own, and everything else is prose
of the section it falls in. Containers are entered only when they hold a heading or a member; any other
element is converted whole, so a code block, table or admonition stays one piece.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..docmodel import Section
from .html import MAX_DEPTH, Markdown, heading_level, text_of

IDENTIFIER_RE = re.compile(r"[A-Za-z_$~][\w$]*")
CONTAINER_TAGS = {"div", "section", "article", "main", "body", "span", "center", "td", "tr", "tbody", "table",
                  "font", "form"}


def short_name(symbol: str) -> str:
    """The last name of a qualified symbol: `click.Command.invoke` -> `invoke`, `b2World::Step` -> `Step`,
    `org.apache.commons.lang3.StringUtils` -> `StringUtils`, `equals(java.lang.Object)` -> `equals`."""
    symbol = symbol.split("(", 1)[0].strip()
    symbol = re.split(r"<", symbol, maxsplit=1)[0]
    parts = [p for p in re.split(r"::|\.|#|/", symbol) if p]
    if not parts:
        return ""
    match = IDENTIFIER_RE.search(parts[-1])
    return match.group(0) if match else ""


class Sections:
    """Collect a page's sections in order: prose under the current headings, and members as they come."""

    def __init__(self, converter: Markdown | None = None, *, top_level: int = 2):
        self.converter = converter or Markdown()
        self.top_level = top_level  # the heading level a page's first section heading counts as
        self.items: list[Section] = []
        self.stack: list[tuple[int, str, str]] = []  # (level, text, anchor)
        self._pending: list = []
        self._heading_line = ""

    @property
    def headings(self) -> tuple[str, ...]:
        return tuple(text for _, text, _ in self.stack)

    def heading(self, element, *, text: str = "") -> None:
        """Start a prose section at a heading element (its level decides what it is nested under)."""
        text = text or text_of(element)
        if not text:
            return
        self.flush()
        level = heading_level(element) or 2
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        anchor = element.get("id") or ""
        if not anchor:
            parent = element.getparent()
            if parent is not None and parent.tag in {"section", "div"} and parent.get("id"):
                anchor = parent.get("id")
        self.stack.append((level, text, anchor))
        self._heading_line = "#" * min(6, max(2, level)) + " " + text

    def prose(self, element) -> None:
        """Add an element to the current prose section."""
        self._pending.append(element)

    def text(self, markdown: str) -> None:
        """Add Markdown already converted to the current prose section."""
        self._pending.append(markdown)

    def member(self, section: Section) -> None:
        """Add a member section; it takes the current headings in front of its own."""
        self.flush()
        self._heading_line = ""
        self.items.append(section)

    def flush(self) -> None:
        parts = [p if isinstance(p, str) else self.converter.run(p) for p in self._pending]
        body = "\n\n".join(p for p in parts if p.strip())
        self._pending = []
        if not body.strip() and not self._heading_line:
            return
        # A heading with no prose of its own (members follow) is kept as a section the chunker skips (no body),
        # so the page's Markdown still shows it.
        markdown = f"{self._heading_line}\n\n{body}".strip() if self._heading_line else body
        anchor = self.stack[-1][2] if self.stack else ""
        self.items.append(Section(markdown=markdown, headings=self.headings, anchor=anchor, kind="topic"))
        self._heading_line = ""

    def result(self) -> tuple[Section, ...]:
        self.flush()
        return tuple(self.items)


def walk(container, sections: Sections, *, handle: Callable | None = None, structure: str = "",
         depth: int = 0) -> None:
    """Walk a container's children in order: `handle(element, sections)` takes the elements it knows (members)
    and returns True; headings start sections; containers holding a heading or a member (the XPath
    `structure` finds members) are entered; anything else is prose."""
    probe = ".//h1|.//h2|.//h3|.//h4|.//h5|.//h6" + (f"|{structure}" if structure else "")
    if container.text and container.text.strip():
        sections.text(" ".join(container.text.split()))
    for child in container:
        if not isinstance(child.tag, str):
            continue
        if handle is not None and handle(child, sections):
            pass
        elif heading_level(child):
            sections.heading(child)
        elif depth < MAX_DEPTH and child.tag in CONTAINER_TAGS and child.xpath(probe):
            walk(child, sections, handle=handle, structure=structure, depth=depth + 1)
        else:
            sections.prose(child)
        if child.tail and child.tail.strip():
            sections.text(" ".join(child.tail.split()))
