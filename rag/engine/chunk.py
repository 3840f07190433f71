"""Chunk (E2): one chunk per section of the document model (a member, a class overview, a stretch of prose);
split long sections again with overlap."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace

from .docmodel import PAGE_API, PAGE_FILE, PAGE_GUIDE, DocPage, RawPage, Section
from .readers.markdown import MarkdownReader, class_alias_of, class_name_of, member_of  # noqa: F401 - re-exported
from .text import sha1
from .types import Chunk, SourceDocument

FENCE_RE = re.compile(r"^\s{0,3}(```|~~~)")
# A path: segments of name characters joined by "/". Each match starts where a run of name characters starts,
# and runs are taken whole (possessive), so a long line costs linear time, not quadratic.
PATH_RE = re.compile(r"(?<![\w.$-])[\w.$-]++(?:/[\w.$-]++)+")


SUMMARY_CHARS = 80


def page_summary(preamble: str) -> str:
    """Return the first descriptive sentence of a page (after the title and any `>` note), cut short."""
    for line in _prose_lines(preamble):
        line = line.strip()
        if line.startswith((">", "|", "-", "*")) or not re.search(r"[\w\u3400-\u9fff]{4}", line):
            continue
        sentence = re.split(r"(?<=[。！？.!?])\s", line)[0]
        return sentence[:SUMMARY_CHARS]
    return ""


def _layout(text: str) -> tuple[list[int], set[int], list[tuple[int, int]]]:
    """Return every line start, the line starts outside fenced code, and the code spans (open, close)."""
    starts, outside, spans = [], set(), []
    opened = None
    offset = 0
    for line in text.splitlines(keepends=True):
        starts.append(offset)
        if opened is None:
            outside.add(offset)
        if FENCE_RE.match(line):
            if opened is None:
                opened = offset
            else:
                spans.append((opened, offset + len(line)))
                outside.add(offset + len(line))  # just after a closing fence
                opened = None
        offset += len(line)
    if opened is not None:
        spans.append((opened, len(text)))
    outside.add(len(text))
    return starts, outside, spans


# Where a long line may be cut, best first: after a sentence's end, at a space, after a Chinese clause, between
# Chinese characters.
SENTENCE_END_RE = re.compile(r"[.!?;:](?=\s)\s*|[。！？；：]\s*")
SPACE_RE = re.compile(r"\s+")
CLAUSE_RE = re.compile(r"[，、]")
CJK_RE = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")


def soft_cut(text: str, low: int, high: int) -> int | None:
    """The last place in (low, high] where a line longer than the window may be cut: just after a sentence's
    end, else just after a space or a Chinese comma, else beside a Chinese character; None when the stretch is
    one word."""
    window = text[low:high]
    for pattern in (SENTENCE_END_RE, SPACE_RE, CLAUSE_RE):
        ends = [m.end() for m in pattern.finditer(window) if m.end() > 0]
        if ends:
            return low + ends[-1]
    for position in range(high, low, -1):
        if CJK_RE.match(text[position - 1]) or (position < len(text) and CJK_RE.match(text[position])):
            return position
    return None


def split_text(text: str, *, max_chars: int = 800, overlap: int = 200) -> list[str]:
    """Split text into pieces of at most max_chars, neighbours sharing about `overlap` characters.

    Cuts fall on line starts, outside fenced code wherever such a cut exists in the window; a line
    longer than the window is cut after a sentence, else at a space, else beside a Chinese character
    (`soft_cut`), and only a single word longer than the window is cut inside. A piece cut inside code gets
    its fence reopened or closed, and the window leaves room for that. 800/200 are the spec's numbers (seed 001).
    """
    if len(text) <= max_chars:
        return [text]
    starts, outside, spans = _layout(text)
    opens_at = [open_at for open_at, _ in spans]  # sorted, and the spans do not overlap

    def in_code(position: int) -> bool:
        n = bisect_left(opens_at, position) - 1  # the last span opened before position
        return n >= 0 and position < spans[n][1]

    def last(sorted_cuts: list[int], low: int, high: int) -> int | None:
        """The greatest cut c with low < c <= high (bisection: a long section stays linear, not quadratic)."""
        n = bisect_right(sorted_cuts, high) - 1
        return sorted_cuts[n] if n >= 0 and sorted_cuts[n] > low else None

    fence = len("```\n")
    cuts = sorted(set(starts) | outside)
    outside_cuts = sorted(outside)
    pieces: list[str] = []
    start = 0
    while start < len(text):
        opens = in_code(start)
        limit = start + max_chars - (fence if opens else 0)
        if limit >= len(text):
            pieces.append(_balanced(text[start:], opens_in_code=opens, closes_in_code=False))
            break
        floor = start + max_chars // 3
        end = last(outside_cuts, floor, limit)
        if end is None:
            inner = last(cuts, floor, min(limit, limit - fence))
            end = inner if inner is not None else (soft_cut(text, floor, limit - fence) or limit - fence)
        pieces.append(_balanced(text[start:end], opens_in_code=opens, closes_in_code=in_code(end)))
        target = end - overlap
        back = last(cuts, start, target)
        back_outside = last(outside_cuts, start, target)
        if back_outside is not None and target - back_outside < overlap:
            start = back_outside
        elif back is not None:
            start = back
        else:
            start = max(soft_cut(text, start, target) or target, start + 1)
    return [p.strip("\n") for p in pieces if p.strip()]


def _balanced(piece: str, *, opens_in_code: bool, closes_in_code: bool) -> str:
    """Reopen or close a code fence that a cut went through, so each piece renders on its own."""
    if opens_in_code:
        piece = "```\n" + piece
    if closes_in_code:
        piece = piece.rstrip("\n") + "\n```"
    return piece


def _has_body(text: str) -> bool:
    return any(line.strip() and not line.startswith("#") for line in text.splitlines())


def _boilerplate_key(line: str) -> str:
    """A line with its paths, names and numbers blanked, so `src/math/Box3.js` and `src/core/Clock.js`, or
    "see the base Camera class" and "see the base Texture class", compare equal; ordinary words stay."""
    line = PATH_RE.sub("P", line.strip())
    line = re.sub(r"[A-Za-z_$][A-Za-z0-9_$]*", lambda m: "X" if re.search(r"[A-Z0-9_$]", m.group(0)) else m.group(0), line)
    return re.sub(r"\s+", " ", re.sub(r"[0-9]+", "0", line))


def _prose_lines(text: str):
    """Yield the lines of a text that are neither headings nor inside fenced code."""
    in_code = False
    for line in text.splitlines():
        if FENCE_RE.match(line):
            in_code = not in_code
        elif not in_code and line.strip() and not line.startswith("#"):
            yield line


def _is_content_key(key: str) -> bool:
    """A line shape with at least a few real characters besides blanked names and punctuation."""
    return len(re.sub(r"[X0\s.,;:/·—–\-()（）。，]", "", key)) >= 4


def find_boilerplate(documents: list[SourceDocument], *, min_pages: int = 10, min_share: float = 0.03) -> frozenset[str]:
    """Return the line shapes repeated on many pages: footers, "see the base class" notes, source paths.

    A section made only of such lines carries no answer; a page-specific line never qualifies.
    """
    if not documents:
        return frozenset()
    threshold = max(min_pages, int(min_share * len(documents)))
    counts: dict[str, int] = {}
    for document in documents:
        for key in {_boilerplate_key(line) for line in _prose_lines(document.text)}:
            counts[key] = counts.get(key, 0) + 1
    return frozenset(key for key, count in counts.items() if count >= threshold)


@dataclass
class Chunker:
    """Turn a page into chunks: the text before the first `###`, then one chunk per member piece."""

    max_chars: int = 800
    overlap: int = 200
    boilerplate: frozenset[str] = frozenset()  # from find_boilerplate() over the whole corpus
    min_note_chars: int = 40  # a headed section without a member shorter than this is a pointer, not an answer

    def _is_boilerplate(self, text: str, *, notes: bool = True) -> bool:
        """A section with no code that only points elsewhere: every prose line repeats across the corpus
        (footers, source paths), or, with `notes`, the whole note is shorter than `min_note_chars` ("see the
        base class": between the members of an API page; a guide's short section is still prose)."""
        if any(FENCE_RE.match(line) for line in text.splitlines()):
            return False
        lines = list(_prose_lines(text))
        if notes and sum(len(line.strip()) for line in lines) < self.min_note_chars:
            return True
        return bool(lines) and all(_boilerplate_key(line) in self.boilerplate for line in lines)

    def _strip_footer(self, text: str) -> str:
        """Drop repeated prose lines (a copyright footer, say) from the end of a page's last section,
        unless that would leave the section with no body of its own (a templated member description)."""
        lines = text.splitlines()
        while lines and (not lines[-1].strip() or (
                not lines[-1].startswith(("#", "```", "~~~")) and _is_content_key(_boilerplate_key(lines[-1]))
                and _boilerplate_key(lines[-1]) in self.boilerplate)):
            lines.pop()
        stripped = "\n".join(lines)
        return stripped if _has_body(stripped) else text

    def run(self, document: SourceDocument) -> list[Chunk]:
        page = document_page(document)
        if page.skipped:
            return []
        title = page.title or document.title
        sections = list(page.sections)
        if page.kind == PAGE_GUIDE and page.generator == "markdown" and len(document.text.strip()) <= self.max_chars:
            sections = [Section(markdown=document.text.strip())]  # a page shorter than one chunk stays one
        summaries = _summaries(page)
        changelog = is_changelog(page)
        chunks: list[Chunk] = []
        if sections and self.boilerplate and len(sections) > 1:
            sections[-1] = replace(sections[-1], markdown=self._strip_footer(sections[-1].markdown))
        for section in sections:
            if not (_has_body(section.markdown) or section.signature and section.kind != "topic") or (
                    section.kind == "topic" and not section.member and section.headings
                    and self._is_boilerplate(section.markdown, notes=page.kind == PAGE_API)):
                continue
            owner = section.owner or page.symbol
            kind = "file" if page.kind == PAGE_FILE and not section.member and owner == page.symbol else section.kind
            if changelog:
                kind = CHANGELOG
            path = (title, *section.headings)
            for part, piece in enumerate(split_text(section.markdown, max_chars=self.max_chars, overlap=self.overlap)):
                index = len(chunks)
                chunks.append(
                    Chunk(
                        chunk_id=sha1(f"{document.path}\n{index}\n{piece}")[:16],
                        source=document.path,
                        title=title,
                        class_name=owner,
                        class_alias=page.alias if owner == page.symbol else "",
                        member=section.member,
                        heading_path=path,
                        chunk_index=index,
                        part=part,
                        text=piece,
                        summary=summaries.get(owner, ""),
                        anchor=section.anchor,
                        kind=kind,
                    )
                )
        return chunks


CHANGELOG = "changelog"  # the kind of a release-notes page's sections (is_changelog)
VERSION_HEADING_RE = re.compile(r"^\s*(?:v(?:ersion)?\s*)?\d+(?:\.\d+)+", re.IGNORECASE)


def is_changelog(page: DocPage) -> bool:
    """A release-notes page: at least 3 of its headings, and half of them, start with a version number
    ("1.10.0 (October 24, 2026)", "Version 2.2.2", "v5.1"). It names every API it ever changed, so it answers
    what changed, not how an API works."""
    headings = list(dict.fromkeys(s.headings[-1] for s in page.sections if s.headings))
    versions = sum(1 for heading in headings if VERSION_HEADING_RE.match(heading))
    return versions >= 3 and versions * 2 >= len(headings)


def document_page(document: SourceDocument) -> DocPage:
    """The document model of a page: as read from its source, or read now from its Markdown text."""
    if document.page is not None:
        return document.page
    return MarkdownReader().run(RawPage(document.path, document.text, ".md"), fallback_title=document.title)


def _summaries(page: DocPage) -> dict[str, str]:
    """The first descriptive sentence of each symbol's overview (a section of its own without a member and
    without headings of its own for the page's symbol), indexed with every member of that symbol."""
    summaries: dict[str, str] = {}
    for n, section in enumerate(page.sections):
        owner = section.owner or page.symbol
        if section.member or owner in summaries:
            continue
        if owner == page.symbol and (n or section.headings) and page.generator == "markdown":
            summaries[owner] = ""  # the reference shape: only the text before the first heading
            continue
        summaries[owner] = page_summary(section.markdown)
    return summaries


def chunk_documents(documents: list[SourceDocument], *, max_chars: int = 800, overlap: int = 200) -> list[Chunk]:
    """Chunk a whole corpus: find its boilerplate first, then cut every page."""
    chunker = Chunker(max_chars=max_chars, overlap=overlap, boilerplate=find_boilerplate(documents))
    return [chunk for document in documents for chunk in chunker.run(document)]
