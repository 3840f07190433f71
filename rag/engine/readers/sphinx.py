"""Sphinx pages: the Python, C, C++ and JavaScript domains' object descriptions (`dl.py.method`, …) become
member sections with their signature and id; prose is cut at its headings; the sidebar, the related-links bar,
permalinks and `[source]` links go. Autodoc's field lists (napoleon's too) stay with their member as lists.
"""

from __future__ import annotations

import re

from ..docmodel import PAGE_API, PAGE_GUIDE, PAGE_INDEX, DocPage, RawPage, Section
from .base import Sections, short_name, walk
from .html import Markdown, drop_all, generator_of, has_class, parse, text_of

DOMAINS = {"py", "c", "cpp", "js"}
CLASS_LIKE = {"class", "exception", "struct", "union", "enum", "enum-class", "enum-struct", "interface", "concept"}
OBJECT_XPATH = "|".join(f".//dl[{has_class(domain)}]" for domain in sorted(DOMAINS))
MARKUP_RE = re.compile(r'<dl class="(?:py|c|cpp|js) |class="sphinxsidebar"|_static/doctools\.js|'
                       r'id="searchbox"|class="headerlink"')


def _owner_object(element):
    """The nearest object description around an element (a method's class), None at the top."""
    for ancestor in element.iterancestors("dl"):
        if object_type(ancestor)[0]:
            return ancestor
    return None


def object_type(dl) -> tuple[str, str]:
    """(domain, object type) of a Sphinx object description: `<dl class="py method">` -> ("py", "method")."""
    names = (dl.get("class") or "").split()
    if len(names) >= 2 and names[0] in DOMAINS:
        return names[0], names[1]
    return "", ""


class SphinxReader:
    name = "sphinx"

    def matches(self, page: RawPage) -> bool:
        return page.suffix in {".html", ".htm"} and (
            generator_of(page.text).startswith("sphinx") or len(set(MARKUP_RE.findall(page.text[:400000]))) >= 2)

    def run(self, page: RawPage) -> DocPage:
        root = parse(page.text)
        main = (root.xpath("//div[@role='main']") or root.xpath(f"//div[{has_class('body')}]")
                or root.xpath(f"//div[{has_class('document')}]") or root.xpath("//body") or [root])[0]
        drop_all(root, f"//a[{has_class('headerlink')}]|//div[{has_class('sphinxsidebar')}]"
                       f"|//div[{has_class('related')}]|//div[{has_class('footer')}]|//nav"
                       f"|//span[{has_class('viewcode-link')}]/ancestor-or-self::a|//span[{has_class('viewcode-link')}]"
                       f"|//a[{has_class('viewcode-back')}]|//div[@id='searchbox']")
        h1 = main.xpath(".//h1")
        title = text_of(h1[0]) if h1 else text_of(root.find(".//title")).split(" — ")[0]
        if main.xpath(f".//table[{has_class('indextable')}]|.//table[{has_class('modindextable')}]"
                      f"|.//div[{has_class('genindex-jumpbox')}]|.//div[@id='search-results']"
                      "|.//form[@action='search.html' or @action='']//input[@name='q']"):
            return DocPage(title=title, symbol=title, kind=PAGE_INDEX, generator=self.name,
                           skipped="index or search page")
        modules = main.xpath(".//*[starts-with(@id, 'module-')]/@id")
        symbol = modules[0][len("module-"):] if modules else title
        sections = Sections(Markdown())

        def handle(element, sections: Sections) -> bool:
            """An object description at the top of the page (nested ones go with their owner)."""
            domain, kind = object_type(element) if element.tag == "dl" else ("", "")
            if domain:
                self._object(element, sections, domain=domain, kind=kind, owner="")
            return bool(domain)

        if h1 and h1[0].getparent() is not None:  # the title is the page's, not a section's
            h1[0].getparent().remove(h1[0])
        walk(main, sections, handle=handle, structure=OBJECT_XPATH)
        items = sections.result()
        kind = PAGE_API if any(s.member or s.kind != "topic" for s in items) else PAGE_GUIDE
        return DocPage(title=title, symbol=symbol, sections=items, kind=kind, generator=self.name,
                       skipped="" if items else "no text")

    def _object(self, dl, sections: Sections, *, domain: str, kind: str, owner: str) -> None:
        """Each `dt` signature of an object description with its `dd`; nested objects become sections of their own."""
        signatures = [dt for dt in dl if dt.tag == "dt"]
        description = next((dd for dd in dl if dd.tag == "dd"), None)
        if not signatures:
            return
        dt = signatures[0]
        symbol = self._symbol(dt, domain)
        name = short_name(symbol)
        signature = text_of(dt)
        overloads = "\n".join(text_of(d) for d in signatures[1:])
        nested = [d for d in description.xpath(OBJECT_XPATH) if _owner_object(d) is dl] if description is not None else []
        inner = set(nested)  # each becomes a section of its own
        parts = [f"```\n{overloads}\n```"] if overloads else []
        if description is not None:
            parts.append(Markdown(skip=lambda element: element in inner).run(description))
        body = "\n\n".join(p for p in parts if p.strip())
        class_like = kind in CLASS_LIKE
        headings = sections.headings + ((owner,) if owner else ()) + (signature,)
        markdown = f"### {signature}\n\n{body}".strip()
        sections.member(Section(
            markdown=markdown, headings=headings, symbol=symbol, member="" if class_like else name,
            owner=name if class_like else owner, kind=kind, signature=signature, anchor=dt.get("id") or ""))
        inner_owner = name if class_like else owner
        for child in nested:
            child_domain, child_kind = object_type(child)
            self._object(child, sections, domain=child_domain, kind=child_kind, owner=inner_owner)

    @staticmethod
    def _symbol(dt, domain: str) -> str:
        """The object's qualified name: the `dt` id for Python and JavaScript, the written name for C and C++."""
        anchor = dt.get("id") or ""
        if domain in {"py", "js"} and anchor and not anchor.startswith("id"):
            return anchor
        prename = "".join(dt.xpath(f".//*[{has_class('sig-prename')} or {has_class('descclassname')}]//text()"))
        name = "".join(dt.xpath(f".//*[{has_class('sig-name')} or {has_class('descname')}]//text()"))
        if name.strip():
            return (prename + name).strip()
        if anchor.startswith(("c.", "js.")):
            return anchor.split(".", 1)[1]
        return text_of(dt).split("(")[0].split()[-1] if text_of(dt) else anchor
