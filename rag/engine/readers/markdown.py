"""Markdown pages at any heading depth, as API references and MkDocs or Docusaurus sites write them.

A page with `###` headings is read as the reference shape always was: the text before the first `###`, then
one section per `###` member (and per later `##`). A page without `###` is cut at its own headings (`##`,
`####`, a second `#`), and such a heading is a member only when it names an identifier (`open()`, `max_age`,
`` `Session.get` ``), never a prose title such as "Installation". MkDocs admonitions and content tabs and
Docusaurus admonitions become plain Markdown, and MDX import lines go.
"""

from __future__ import annotations

import re

from ..docmodel import PAGE_GUIDE, DocPage, RawPage, Section

FENCE_RE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LATIN_NAME_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:[ .][A-Za-z_$][A-Za-z0-9_$]*)*")
PARENS_RE = re.compile(r"[（(]([^（）()]*)[）)]")
MEMBER_RE = re.compile(r"^\s*\.?\s*((?:[A-Za-z_$][\w$]*\.)*[A-Za-z_$][\w$]*)\s*(?=$|[(\[:<（：]|\s+[(:\[（]|\s*$)")
ADMONITION_RE = re.compile(r"^(\s*)(?:!!!|\?\?\?\+?)\s*([\w-]+)(?:\s+\"([^\"]*)\")?\s*$")
TAB_RE = re.compile(r"^(\s*)===\+?\s+\"([^\"]*)\"\s*$")
DOCUSAURUS_RE = re.compile(r"^\s*:::\s*([\w-]*)\s*(.*?)\s*$")
MKDOCSTRINGS_RE = re.compile(r"^(\s*):::\s+([A-Za-z_][\w.]*)\s*$")  # `::: pkg.module.Class`: rendered from source
MDX_IMPORT_RE = re.compile(r"^(?:import\s.+\sfrom\s+['\"].+['\"];?|export\s+(?:const|default)\s.*)\s*$")


def class_name_of(title: str) -> str:
    """Return the structured class name of a page title.

    `透视相机（PerspectiveCamera）` -> `PerspectiveCamera`; `光线投射Raycaster` -> `Raycaster`;
    `多细节层次（LOD，Levels of Detail）` -> `LOD`; a title without a Latin name is its own class name.
    """
    for inner in PARENS_RE.findall(title):
        head = re.split(r"[，,;；]", inner)[0].strip()
        if re.search(r"[A-Za-z]", head):
            match = LATIN_NAME_RE.search(head)
            if match:
                return match.group(0).strip()
    if re.search(r"[\u3400-\u9fff]", title):
        names = [m.group(0) for m in LATIN_NAME_RE.finditer(title)]
        if names:
            return max(names, key=len).strip()
    return title.strip()


def class_alias_of(title: str, class_name: str) -> str:
    """Return the rest of the title once the Latin name is taken out: `透视相机（PerspectiveCamera）` -> `透视相机`."""
    alias = PARENS_RE.sub(lambda m: "" if class_name in m.group(1) else m.group(0), title)
    alias = alias.replace(class_name, "").strip(" （）()-·:：")
    return alias if alias and alias != class_name else ""


def member_of(heading: str) -> str:
    """Return the identifier of a member heading: `.setPixelRatio ( value : number ) : undefined` -> `setPixelRatio`,
    `` `Request.send_early_hints` `` -> `send_early_hints`."""
    match = MEMBER_RE.match(heading.replace("`", ""))
    if not match:
        return ""
    return match.group(1).split(".")[-1]


def identifier_member_of(heading: str, code: frozenset[str] = frozenset()) -> str:
    """Return the identifier a heading names when it reads as code, not prose: `open()`, `` `max_age` ``,
    `Session.get`, `camelCase`, `snake_case`, `CONSTANT`, or a word the page's own code uses (`Request` where
    its examples write `Request(scope)`: `code`, from `code_words`); "" for "Installation" or "Getting started"."""
    quoted = re.fullmatch(r"\s*`([^`]+)`.*", heading)
    text = quoted.group(1) if quoted else heading
    member = member_of(text)
    if not member:
        return ""
    name = MEMBER_RE.match(text).group(1)
    code_like = (quoted is not None or "(" in text or "." in name or "_" in name or "$" in name
                 or re.search(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]", name) or name[0].islower()
                 or (name.isupper() and len(name) > 1) or re.match(r"\s*\S+\s*:", text) or name in code)
    return member if code_like else ""


CODE_SPAN_RE = re.compile(r"`([^`\n]+)`")
IDENTIFIER_WORD_RE = re.compile(r"[A-Za-z_$][\w$]*")


def code_words(lines: list[str]) -> frozenset[str]:
    """The identifiers a page writes as code: in its fenced blocks and its inline code spans."""
    words: set[str] = set()
    in_code = False
    for line in lines:
        if FENCE_RE.match(line):
            in_code = not in_code
        elif in_code:
            words.update(IDENTIFIER_WORD_RE.findall(line))
        else:
            for span in CODE_SPAN_RE.findall(line):
                words.update(IDENTIFIER_WORD_RE.findall(span))
    return frozenset(words)


def slug_of(heading: str) -> str:
    """The anchor Markdown sites give a heading (Python-Markdown's toc and GitHub alike): lowercase, punctuation
    dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def normalise(body: str) -> str:
    """MkDocs admonitions and tabs, Docusaurus admonitions and MDX imports as plain Markdown (outside code)."""
    if not any(marker in body for marker in ("!!!", "???", "===", ":::", "import ", "export ")):
        return body
    out: list[str] = []
    in_code = False
    dedent: str | None = None
    quote = ""
    for original in body.splitlines():
        line = original
        if dedent is not None and line.strip() and not line.startswith(dedent):
            dedent, quote = None, ""
        if dedent and line.startswith(dedent):
            line = line[len(dedent):]
        if FENCE_RE.match(line):
            in_code = not in_code
            out.append(line)
            continue
        if in_code:
            out.append(line)
            continue
        if match := MKDOCSTRINGS_RE.match(line):
            out.append(f"`{match.group(2)}`")  # its options block (indented YAML) goes with it
            dedent, quote = match.group(1) + "    ", "\x00"
        elif quote == "\x00" and dedent is not None and original.startswith(dedent):
            continue
        elif match := ADMONITION_RE.match(line):
            kind, title = match.group(2).capitalize(), match.group(3)
            out.append(f"> **{kind}: {title}**" if title else f"> **{kind}**")
            dedent, quote = match.group(1) + "    ", "> "
        elif match := TAB_RE.match(line):
            out.append(f"**{match.group(2)}**")
            dedent, quote = match.group(1) + "    ", ""
        elif match := DOCUSAURUS_RE.match(line):
            if match.group(1):
                title = match.group(2).strip("[]{} ")
                out.append(f"> **{match.group(1).capitalize()}: {title}**" if title else
                           f"> **{match.group(1).capitalize()}**")
        elif MDX_IMPORT_RE.match(line):
            continue
        elif dedent is not None and quote and quote != "\x00" and original.startswith(dedent):
            out.append(quote + line)  # the body of an admonition is part of its quote
        else:
            out.append(line)
    return "\n".join(out)


class MarkdownReader:
    """Read a Markdown page (front matter already split off) into the document model."""

    name = "markdown"

    def matches(self, page: RawPage) -> bool:
        return page.suffix in {".md", ".markdown"}

    def run(self, page: RawPage, *, fallback_title: str = "") -> DocPage:
        body = normalise(page.text)
        lines = body.splitlines()
        code = code_words(lines)
        title, sections = (_member_sections(lines) if is_member_shape(lines, code) else _heading_sections(lines, code))
        title = title or fallback_title
        class_name = class_name_of(title)
        kind = "api" if any(s.member for s in sections) else PAGE_GUIDE
        return DocPage(title=title, symbol=class_name, alias=class_alias_of(title, class_name),
                       sections=tuple(sections), kind=kind, generator="markdown",
                       skipped="" if sections else "no text")


def is_member_shape(lines: list[str], code: frozenset[str] = frozenset()) -> bool:
    """Whether a page is written in the reference shape, a member per `###`: it has `###` headings and most of
    them name an identifier (`.fov : Number`, `setSize( width, height )`); a site page whose `###` headings are
    prose ("Common patterns", "Usage") is cut at every heading instead."""
    h3 = [line[4:].strip() for line in _outside_code(lines) if line.startswith("### ")]
    return bool(h3) and sum(1 for heading in h3 if identifier_member_of(heading, code)) * 2 >= len(h3)


def _outside_code(lines: list[str]):
    in_code = False
    for line in lines:
        if FENCE_RE.match(line):
            in_code = not in_code
        elif not in_code:
            yield line


def _member_sections(lines: list[str]) -> tuple[str, list[Section]]:
    """The reference shape: the text before the first `###`, then one section per `###` (or later `##`)."""
    title = ""
    h2 = ""
    sections: list[Section] = []
    current: list[str] = []
    current_h2, current_h3 = "", ""
    seen_h3 = False
    in_code = False

    def close() -> None:
        text = "\n".join(current).strip()
        if text:
            headings = tuple(h for h in (current_h2, current_h3) if h)
            member = member_of(current_h3) if current_h3 else ""
            # A `###` section stands where members stand, even under a heading that names no identifier (例子).
            sections.append(Section(markdown=text, headings=headings, member=member,
                                    kind="member" if current_h3 else "topic",
                                    anchor=slug_of(headings[-1]) if headings else ""))

    for line in lines:
        if FENCE_RE.match(line):
            in_code = not in_code
        elif not in_code:
            if line.startswith("# ") and not title:
                title = line[2:].strip()
            elif line.startswith("### "):
                close()
                seen_h3 = True
                current, current_h2, current_h3 = [], h2, line[4:].strip()
            elif line.startswith("## "):
                h2 = line[3:].strip()
                if seen_h3:
                    close()
                    current, current_h2, current_h3 = [], h2, ""
        current.append(line)
    close()
    return title, sections


def _heading_sections(lines: list[str], code: frozenset[str] = frozenset()) -> tuple[str, list[Section]]:
    """A page without `###`: one section per heading below the title, with the headings above it as its path.

    A section's member is its own heading's identifier, else the nearest heading above it that names one: the
    "Parameters" or "Body" under `Request` document `Request`."""
    title = ""
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    current: list[str] = []
    in_code = False

    def close() -> None:
        text = "\n".join(current).strip()
        if not text:
            return
        headings = tuple(h for _, h in stack)
        member = next((m for _, h in reversed(stack) if (m := identifier_member_of(h, code))), "")
        sections.append(Section(markdown=text, headings=headings, member=member,
                                kind="member" if member else "topic", anchor=slug_of(headings[-1]) if headings else ""))

    for line in lines:
        if FENCE_RE.match(line):
            in_code = not in_code
        elif not in_code and (match := HEADING_RE.match(line)):
            level, text = len(match.group(1)), match.group(2).strip()
            if level == 1 and not title:
                title = text
            elif text:
                close()
                current = []
                level = max(level, 2)
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, text))
        current.append(line)
    close()
    return title, sections
