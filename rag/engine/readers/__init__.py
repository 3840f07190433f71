"""Readers (E1): one per documentation generator, each turning a page into the document model.

`read_page` picks the reader from the page itself (its meta generator tag and characteristic markup), never
from its folder or a setting; a page no generator reader claims is read as plain HTML, or as Markdown.
"""

from __future__ import annotations

from ..docmodel import DocPage, RawPage
from .doxygen import DoxygenReader
from .generic import GenericHtmlReader
from .gtkdoc import GtkDocReader
from .javadoc import JavadocReader
from .jsdoc import JsDocReader, TypeDocReader
from .markdown import MarkdownReader
from .sphinx import SphinxReader

HTML_READERS = (SphinxReader(), JavadocReader(), DoxygenReader(), TypeDocReader(), JsDocReader(), GtkDocReader())


def reader_for(page: RawPage):
    """The reader that understands this page."""
    if page.suffix in {".md", ".markdown"}:
        return MarkdownReader()
    for reader in HTML_READERS:
        if reader.matches(page):
            return reader
    return GenericHtmlReader()


def read_page(page: RawPage, *, fallback_title: str = "") -> DocPage:
    """Read one page into the document model with the reader its markup calls for."""
    reader = reader_for(page)
    if isinstance(reader, (MarkdownReader, GenericHtmlReader)):
        return reader.run(page, fallback_title=fallback_title)
    return reader.run(page)
