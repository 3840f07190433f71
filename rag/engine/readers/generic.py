"""Any other HTML page: its main content (`<main>`, `[role=main]`, `<article>`, a content block, else the body
without navigation, header, footer and sidebars) cut at its headings; a heading or a definition term that names
an identifier (`open()`, `max_age`) makes a member section."""

from __future__ import annotations

from ..docmodel import PAGE_API, PAGE_GUIDE, DocPage, RawPage, Section
from .base import Sections, walk
from .html import Markdown, drop_all, has_class, parse, text_of
from .markdown import class_alias_of, class_name_of, identifier_member_of

MAIN_XPATHS = ("//main", "//*[@role='main']", "//article", "//*[@id='content']", "//*[@id='main-content']",
               f"//*[{has_class('content')}]", f"//*[{has_class('main-content')}]", "//body")
CHROME_XPATH = ("//nav|//header|//footer|//aside|//*[@role='navigation']|//*[@role='banner']"
                "|//*[@role='contentinfo']|//*[@role='search']|//*[@aria-hidden='true']"
                f"|//*[{has_class('sidebar')}]|//*[{has_class('navbar')}]|//*[{has_class('breadcrumb')}]"
                f"|//*[{has_class('breadcrumbs')}]|//*[{has_class('toc')}]|//*[@id='toc']"
                f"|//*[{has_class('skip-link')}]|//*[{has_class('visually-hidden')}]|//*[{has_class('sr-only')}]")


class GenericHtmlReader:
    name = "html"

    def matches(self, page: RawPage) -> bool:
        return page.suffix in {".html", ".htm"}

    def run(self, page: RawPage, *, fallback_title: str = "") -> DocPage:
        root = parse(page.text)
        title_element = root.find(".//title")
        drop_all(root, CHROME_XPATH)
        main = next((found[0] for xpath in MAIN_XPATHS if (found := root.xpath(xpath))), root)
        h1 = main.xpath(".//h1") or root.xpath("//h1")
        title = text_of(h1[0]) if h1 else ""
        if not title and title_element is not None:
            title = text_of(title_element).split(" | ")[0].split(" — ")[0].split(" - ")[0].strip()
        title = title or fallback_title
        if h1 and h1[0].getparent() is not None:
            h1[0].getparent().remove(h1[0])
        sections = Sections(Markdown())
        walk(main, sections)
        items = tuple(_with_members(sections.result()))
        symbol = class_name_of(title)
        return DocPage(title=title, symbol=symbol, alias=class_alias_of(title, symbol), sections=items,
                       kind=PAGE_API if any(s.member for s in items) else PAGE_GUIDE, generator=self.name,
                       skipped="" if items else "no text")


def _with_members(sections):
    """A prose section whose own heading names an identifier is that member's section."""
    for section in sections:
        member = identifier_member_of(section.headings[-1]) if section.headings and section.kind == "topic" else ""
        if member:
            heading, _, body = section.markdown.partition("\n")
            markdown = "### " + heading.lstrip("#").strip() + ("\n" + body if body else "")
            yield Section(markdown=markdown, headings=section.headings, symbol=member, member=member,
                          kind="member", signature=section.headings[-1], anchor=section.anchor)
        else:
            yield section

