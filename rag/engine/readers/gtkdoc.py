"""GTK-Doc pages (DocBook XSL output): a reference page (`div.refentry`) becomes an overview (its purpose line and
Description) and one section per symbol of its "… details" (`div.refsect2`: the C identifier, its prototype as one
line, the generator's anchor, then description, parameters, returns and since). The summary tables, navigation bar,
"Top | Description" shortcuts and footer go; numbered example listings become code blocks. Tables of contents and
symbol indexes yield nothing; other pages (appendices, glossaries, object hierarchies) are prose cut at headings.

A reference page's symbol is its refentry title, the name the generator's table of contents gives it: `cairo_t`
for a page about a type, `Paths` for a page about a topic. Each member's symbol is its C identifier (an enum's
values stay in the enum's section); a signal or property is `GtkWidget::destroy` or `GtkWidget:name`.
"""

from __future__ import annotations

import re
from html import unescape
from dataclasses import replace

from ..docmodel import PAGE_API, PAGE_GUIDE, PAGE_INDEX, DocPage, RawPage, Section
from .base import Sections, walk
from .html import Markdown, drop, drop_all, has_class, heading_level, parse, text_of

GTKDOC_RE = re.compile(r"<meta\s[^>]*content=[\"']GTK-Doc", re.I)
MARKUP_RE = re.compile(r'class="shortcuts"|<table class="navigation" id="top"|class="refsect2"|class="refnamediv"|'
                       r'class="parameter_name"|class="function_type"|content="DocBook XSL')
CHROME = (f"//table[{has_class('navigation')}]|//div[{has_class('footer')}]|//td[{has_class('gallery_image')}]"
          f"|//div[{has_class('navheader')}]|//div[{has_class('navfooter')}]")
HOME_RE = re.compile(r"<link\s+rel=[\"']home[\"'][^>]*\stitle=[\"']([^\"']*)")  # the book: titles end ": <book>"
DETAIL_RE = re.compile(r"^The “(?P<name>[^”]+)” (?P<kind>signal|property|child property|style property)$")
CODE_SPACE_RE = re.compile(r"(?<=`) +(?=[.,;:)](?:\s|$))")  # "`filename` ." as DocBook wraps it -> "`filename`."
TABLE_HEADERS = {"parameter": "Parameter", "enum_member": "Value", "struct_member": "Field", "property": "Property",
                 "signal": "Signal"}


def member_kind(heading: str, name: str, proto: str) -> str:
    """The C kind of a documented symbol, from its heading (`()`, `enum …`) and its prototype (`#define`, …)."""
    if re.match(r"#\s*define\b", proto):
        return "macro"
    first = heading.split()[0] if heading else ""
    if first in {"enum", "struct", "union"}:
        return first
    if re.match(rf"[^(]*\(\s*\*\s*{re.escape(name)}\s*\)", proto):
        return "typedef"  # a callback type: `void (*cairo_destroy_func_t) (void *data);`
    if heading.endswith("()"):
        return "function"
    compound = re.match(r"(?:typedef\s+)?(struct|union|enum)\b[^;{]*\{", proto)
    if compound:
        return compound.group(1)
    if proto.startswith("typedef"):
        return "typedef"
    return "constant" if re.match(r"(?:extern\s+)?const\b", proto) else "variable"


def _prepare(root) -> None:
    """Give headings the anchor written before them, turn numbered listings into code, label member tables."""
    for anchor in root.xpath("//a[@name][not(node())]"):
        following = anchor.getnext()
        heading = following if following is not None and heading_level(following) else anchor.getparent()
        if heading is not None and heading_level(heading) and not heading.get("id"):
            heading.set("id", anchor.get("name"))
    for frame in root.xpath(f"//table[{has_class('listing_frame')}]"):
        code = frame.xpath(f".//td[{has_class('listing_code')}]/pre")
        if code:
            code[0].tail = frame.tail
            frame.getparent().replace(frame, code[0])
    for table in root.xpath(f"//div[{has_class('refsect3')}]//table"):
        rows = [row.xpath("./td") for row in table.xpath(".//tr[td]")]
        kind = (rows[0][0].get("class") or "").removesuffix("_name") if rows else ""
        if kind not in TABLE_HEADERS:
            continue
        width = max(len(cells) for cells in rows)
        blank = {i for i in range(1, width) if not any(i < len(cells) and text_of(cells[i]) for cells in rows)}
        for cell in [cells[i] for cells in rows for i in blank if i < len(cells)]:
            drop(cell)  # an annotations column with no annotations, a description column left empty
        names = [name for i, name in enumerate((TABLE_HEADERS[kind], "Description", "Annotations")) if i not in blank]
        if len(names) > 1:
            header = table.makeelement("tr", {})
            for name in names:
                header.append(header.makeelement("th", {}))
                header[-1].text = name
            rows[0][0].getparent().addprevious(header)


def _tidy(markdown: str) -> str:
    """No space before the punctuation after a code span, no no-break spaces in code blocks."""
    return CODE_SPACE_RE.sub("", markdown).replace("\u00a0", " ")


class GtkDocReader:
    name = "gtkdoc"

    def matches(self, page: RawPage) -> bool:
        return page.suffix in {".html", ".htm"} and bool(
            GTKDOC_RE.search(page.text[:20000]) or "Generated by GTK-Doc" in page.text[-4000:]
            or len(set(MARKUP_RE.findall(page.text[:400000]))) >= 4)

    def run(self, page: RawPage) -> DocPage:
        root = parse(page.text)
        drop_all(root, CHROME)
        _prepare(root)
        refentry = root.xpath(f"//div[{has_class('refentry')}]")
        if refentry:
            return self._reference(refentry[0])
        body = (root.xpath("//body") or [root])[0]
        heading = body.xpath(f".//div[{has_class('titlepage')}]//*[self::h1 or self::h2 or self::h3]")
        book = unescape(match.group(1)) if (match := HOME_RE.search(page.text[:20000])) else ""
        title = text_of(heading[0]) if heading else text_of(root.find(".//title")).removesuffix(f": {book}")
        if body.xpath(f".//div[{has_class('index')}]"):
            return self._skip(title, "symbol index")
        drop_all(body, f".//div[{has_class('toc')}]|.//div[{has_class('titlepage')}][not(.//h1 or .//h2 or .//h3)]")
        if heading:
            drop(heading[0])
        if not text_of(body):
            return self._skip(title, "table of contents")
        sections = Sections(Markdown())
        walk(body, sections)
        items = tuple(replace(s, markdown=_tidy(s.markdown)) for s in sections.result())
        return DocPage(title=title, symbol=title, sections=items, kind=PAGE_GUIDE, generator=self.name,
                       skipped="" if items else "no text")

    def _skip(self, title: str, reason: str) -> DocPage:
        return DocPage(title=title, symbol=title, kind=PAGE_INDEX, generator=self.name, skipped=reason)

    def _reference(self, refentry) -> DocPage:
        """A reference page: the overview, prose subsections, then one section per documented symbol."""
        title = text_of((refentry.xpath(f".//span[{has_class('refentrytitle')}]")
                         or refentry.xpath(f".//div[{has_class('refnamediv')}]//h2") or [None])[0])
        converter = Markdown()
        purpose = refentry.xpath(f".//div[{has_class('refnamediv')}]//p")
        overview = [text_of(purpose[0])] if purpose else []
        sections = Sections(converter)
        later, details = [], set()  # prose subsections, symbols, then "See Also" and the like, in page order
        anchor = (refentry.xpath("./a/@name") or [""])[0]
        for group in refentry.xpath(f"./div[{has_class('refsect1')}]"):
            name = (group.xpath("./a/@name") or [""])[0]
            if name.endswith((".description", ".includes")):
                anchor = name if name.endswith(".description") else anchor
                subsections = group.xpath(f"./div[{has_class('refsect2')}]")
                for element in subsections + group.xpath("./h2"):
                    element.getparent().remove(element)
                overview.append(converter.run(group))
                later[:0] = subsections
            elif name.endswith("details"):
                found = group.xpath(f"./div[{has_class('refsect2')}][h3]")
                details.update(found)
                later += found
            elif not group.xpath(".//td[@class='function_name' or @class='property_name' or @class='signal_name']"):
                later.append(group)  # not a summary table: See Also, Object Hierarchy, …
        sections.member(Section(markdown="\n\n".join(p for p in overview if p.strip()), symbol=title, kind="module",
                                anchor=anchor))
        for element in later:
            if element in details:
                sections.member(self._member(element, title, converter))
            else:
                walk(element, sections)
        items = tuple(replace(s, markdown=_tidy(s.markdown)) for s in sections.result() if s.markdown)
        return DocPage(title=title, symbol=title, sections=items, kind=PAGE_API, generator=self.name,
                       skipped="" if items else "no text")

    @staticmethod
    def _member(detail, owner: str, converter: Markdown) -> Section:
        """One symbol's `div.refsect2`: its anchor, heading, prototype, then everything below as Markdown."""
        h3 = detail.find("h3")
        heading = text_of(h3)
        anchor = h3.get("id") or ""
        following = h3.getnext()  # the prototype, when the symbol has one (an enum has none)
        protos = [following] if following is not None and following.tag == "pre" else []
        proto = " ".join("".join(protos[0].itertext()).split()) if protos else ""
        special = DETAIL_RE.match(heading)
        if special:
            name, kind = special.group("name"), "signal" if special.group("kind") == "signal" else "property"
            symbol = f"{owner}::{name}" if kind == "signal" else f"{owner}:{name}"
        else:
            name = re.sub(r"^(?:enum|struct|union)\s+|\s*\(\)$", "", heading)
            kind, symbol = member_kind(heading, name, proto), name
        for element in [h3, *protos, *detail.xpath("./a[@name][not(node())]")]:
            drop(element)
        signature = proto or heading
        markdown = f"### {signature}\n\n{converter.run(detail)}".strip()
        return Section(markdown=markdown, headings=(signature,), symbol=symbol, member=name, kind=kind,
                       signature=signature, anchor=anchor)
