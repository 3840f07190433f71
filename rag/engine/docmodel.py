"""The document model (E1, E2): what a reader makes of one page, whatever generator wrote it.

A reader (readers/) turns a `RawPage` into a `DocPage`: a title, the symbol the page documents and its
sections in order, each with its own symbol, kind, signature, anchor and clean Markdown. The chunker and the
catalog see only this model, never HTML.
"""

from __future__ import annotations

from dataclasses import dataclass

# Page kinds. An "index" page (a generated index, search page or source listing) yields nothing; a "file"
# reference page documents the functions and macros of one header, not a class.
PAGE_API = "api"
PAGE_GUIDE = "guide"
PAGE_FILE = "file"
PAGE_INDEX = "index"


@dataclass(frozen=True, slots=True)
class RawPage:
    """One file as read from a source: its path in the source, its suffix and its text."""

    path: str  # relative to the source root, "/" separators
    text: str
    suffix: str  # ".md", ".html", …


@dataclass(frozen=True, slots=True)
class Section:
    """A piece of a page about one thing: a member, a class's overview, or a stretch of prose."""

    markdown: str  # clean Markdown, starting with its own heading line when it has one
    headings: tuple[str, ...] = ()  # the headings above it below the page title, its own last, as written
    symbol: str = ""  # fully qualified where the generator says so: "click.Command.invoke"; "" for prose
    member: str = ""  # the identifier users type: "invoke"; "" for prose and for a class's own overview
    owner: str = ""  # the class (or module, struct, file) the section belongs to; "" means the page's symbol
    kind: str = "topic"  # method, property, function, class, constant, macro, …; "topic" for prose
    signature: str = ""
    anchor: str = ""  # the generator's id, so a citation can link to page.html#anchor


@dataclass(frozen=True, slots=True)
class DocPage:
    """One page read: the title, the symbol it documents, its sections; `skipped` says why it yields nothing."""

    title: str
    symbol: str  # the class, module, interface or topic the page documents, as users type it
    sections: tuple[Section, ...] = ()
    alias: str = ""  # the title without its Latin name (透视相机 for 透视相机（PerspectiveCamera）)
    kind: str = PAGE_API
    generator: str = "markdown"
    skipped: str = ""  # "" for a page that yields sections; else the reason, as the build report gives it
