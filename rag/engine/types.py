"""Dataclasses passed between engine components."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from .docmodel import DocPage


SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*")
FIELD_SENTENCE_CHARS = 240  # a first sentence longer than this is cut: the field says what a member is, briefly


def first_sentence(text: str) -> str:
    """The first sentence of a section's prose: headings, quotes and code blocks skipped."""
    prose, fenced, size = [], False, 0
    for line in (line.strip() for line in text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif line and not fenced and not line.startswith(("#", ">")):
            prose.append(line)
            size += len(line)
            if size > 300:
                break
    return SENTENCE_END.split(" ".join(prose), maxsplit=1)[0][:FIELD_SENTENCE_CHARS] if prose else ""


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """One ingested page: Markdown text plus where it came from."""

    path: str  # relative to the knowledge base's source folder, with "/" separators
    title: str
    text: str  # without its front matter
    content_hash: str  # of the file as read, front matter included
    meta: dict = field(default_factory=dict)  # the Markdown page's YAML front matter (labels, url, …); {} when none
    page: DocPage | None = None  # what its reader made of it; None: read from `text` as Markdown when chunked


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrievable piece of a page: a section of its document model (a member, an overview, prose) or part of one."""

    chunk_id: str
    source: str
    title: str  # the page's `#` title as written
    class_name: str  # the structured (Latin) class name of the page
    class_alias: str  # the page title without its Latin name, e.g. 透视相机; "" when none
    member: str  # identifier of the `###` heading; "" for page text and non-identifier headings
    heading_path: tuple[str, ...]  # h1, h2, h3 as written
    chunk_index: int  # position within its page
    part: int  # 0 for the first (or only) piece of a section
    text: str  # the section text shown to users (heading line included)
    summary: str = ""  # the page's first descriptive sentence, indexed with every member of the page
    anchor: str = ""  # the generator's id of the section: a citation links to `source#anchor`; "" for the page top
    kind: str = ""  # the section's kind (method, property, class, topic, file, …); "" in versions built before

    @property
    def section_key(self) -> tuple:
        """What the parts of one section share (a long section is cut into several chunks)."""
        return self.source, self.heading_path, self.member, self.anchor

    @property
    def text_hash(self) -> str:
        from .text import sha1

        return sha1(self.embedding_text)

    @property
    def embedding_text(self) -> str:
        """Return the text embedded for this chunk: names and heading path in front of the body."""
        names = " ".join(n for n in (self.class_alias, self.class_name) if n)
        path = " > ".join(self.heading_path[1:])
        head = f"{names} | {path}" if path else names
        if self.summary and self.heading_path[1:]:
            head = f"{head}\n{self.summary}"
        return f"{head}\n{self.text}"

    @property
    def field_text(self) -> str:
        """Return the section's field, embedded apart from its body (the field vector, issue 34): its names, member
        and heading, then the first sentence of its description, so a member is found by what it is *for*
        rather than by everything its section mentions. A page's text gives its heading path and summary."""
        names = " ".join(n for n in (self.class_alias, self.class_name) if n)
        heading = self.heading_path[-1] if self.heading_path else self.title
        first = first_sentence(self.text)
        if self.member:
            return f"{names} {self.class_name}.{self.member} | {heading}\n{first}"
        return f"{names} | {' > '.join(self.heading_path[1:])}\n{self.summary or first}"

    @property
    def field_hash(self) -> str:
        from .text import sha1

        return sha1(self.field_text)


@dataclass(frozen=True, slots=True)
class Plan:
    """What the planner understood of a question."""

    question: str
    corrected_question: str
    kind: str  # "doc", "chitchat" or "out_of_catalog"
    classes: tuple[str, ...] = ()  # named in Latin, or corrected to a catalog name
    hinted_classes: tuple[str, ...] = ()  # suggested by a Chinese title or alias
    members: tuple[str, ...] = ()
    corrections: tuple[tuple[str, str], ...] = ()  # (as written, corrected to)
    unknown_identifiers: tuple[str, ...] = ()
    inherited: tuple[tuple[str, str], ...] = ()  # (member, the ancestor class whose page documents it)
    reason: str = ""
    pasted_error: bool = False  # the question pastes an error or traceback line (rag.engine.plan.ERROR_RE)
    # Everyday words of the editable table found in the question, with the docs' terms searched for them:
    # ((phrase, terms), ...); the terms are part of corrected_question.
    expansions: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict:
        return {
            "question": self.question,
            "corrected_question": self.corrected_question,
            "kind": self.kind,
            "classes": list(self.classes),
            "hinted_classes": list(self.hinted_classes),
            "members": list(self.members),
            "corrections": [{"from": a, "to": b} for a, b in self.corrections],
            "unknown_identifiers": list(self.unknown_identifiers),
            "inherited": [{"member": m, "documented_on": c} for m, c in self.inherited],
            "reason": self.reason,
            "pasted_error": self.pasted_error,
            "everyday_words": [{"phrase": p, "terms": t} for p, t in self.expansions],
        }


@dataclass(frozen=True, slots=True)
class Hit:
    """A chunk at a position in one ranking."""

    chunk: Chunk
    score: float
    source: str  # "bm25", "dense" or "rrf"
    rank: int = 0
    raw_score: float = 0.0


class RouteKind(Enum):
    """A retrieval route; a ranking's name is its kind's value, then the class or member it reads within."""

    DENSE = "dense"  # one vector search over every chunk
    DENSE_CLASS = "dense:class"  # the same search read within one named class
    DENSE_FIELD = "dense:field"  # the question's vector against the field vectors (Chunk.field_text) of a named class
    BM25_QUESTION = "bm25:question"  # the whole question
    BM25_CLASS = "bm25:class"  # the question without the class's own names, within the class
    BM25_HEAD = "bm25:head"  # the member-name field of a named class
    BM25_MEMBER = "bm25:member"  # a named member's chunks
    DENSE_REWRITE = "dense:rewrite"  # the model's keyword rewrite of the question, searched as a vector (rewrite.py)
    BM25_REWRITE = "bm25:rewrite"  # the same keywords by BM25

    @property
    def source(self) -> str:
        """Return the retriever family, "dense" or "bm25", as `Hit.source` names it."""
        return self.value.partition(":")[0]


@dataclass(frozen=True, slots=True)
class Ranking:
    """One retrieval route's ordered result."""

    name: str  # e.g. "dense", "bm25:question", "bm25:class:Scene"; request records store routes by it
    hits: tuple[Hit, ...]
    kind: RouteKind
    weight: float = 1.0  # its weight in reciprocal rank fusion, set by the retriever from its kind


SEARCH_MODES = ("hybrid", "vector", "bm25")


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """How one search runs, as validated by the question service: hashable, so it is part of the retrieval
    cache's key."""

    mode: str = "hybrid"  # one of SEARCH_MODES: both sides, the vector side only, the keyword side only
    top_k: int | None = None  # adopted chunks of a single-class question; None: the adopter's default (5)
    exclude: tuple[str, ...] = ()  # chunk ids never adopted (E6)
    rerank: bool | None = None  # None: the configured reranker, if any; False: none; True: the configured one
    rewrite: bool | None = None  # the same, for the model's keyword rewrite
    fused_depth: int | None = None  # keep more fused candidates than the search's depth (a face listing 200)
    complete: bool = False  # append the sections an answer needs by the documents' structure (answers only)

    def __post_init__(self) -> None:
        object.__setattr__(self, "exclude", tuple(self.exclude))
        if self.mode not in SEARCH_MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {', '.join(SEARCH_MODES)}")


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The outcome of one search: the plan, the adopted chunks and how they were found."""

    plan: Plan
    hits: tuple[Hit, ...]  # adopted, in order
    rankings: tuple[Ranking, ...] = ()
    fused: tuple[Hit, ...] = ()
    excluded: tuple[str, ...] = ()
    timings_ms: dict = field(default_factory=dict)
    mode: str = "hybrid"
    version: str = ""
    weak_evidence: bool = False  # nothing found is closer to the question than small talk is to the corpus
    rerank: str = "none"  # the backend that ordered the fused candidates (E11): "api", "llm" or "none"
    rerank_error: str = ""  # why a rerank that was asked for fell back to the fused order
    reranked: tuple[Hit, ...] = ()  # the candidates in the reranker's order, with its scores; () when none ran
    rewrite: str = ""  # the model's keywords searched beside the question; "" when none were
    rewrite_error: str = ""  # why a rewrite that was asked for gave nothing


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call cost, as the provider reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


@dataclass(frozen=True, slots=True)
class Citation:
    number: int  # the evidence number the answer used, from 1
    chunk_id: str
    source: str
    heading_path: tuple[str, ...]
    anchor: str = ""  # the cited section's id in its page (the generator's), "" for the page top


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    citations: tuple[Citation, ...]
    confidence: str  # "high", "medium", "low" or "none"
    mode: str  # "llm", "extractive", "chitchat" or "empty"
    degraded: bool = False
    reason: str = ""  # why the answer is empty, insufficient or degraded
    usage: Usage = field(default_factory=Usage)
    invalid_citations: tuple[int, ...] = ()
    model_called: bool = False


@dataclass(frozen=True, slots=True)
class Token:
    """A piece of an answer as it is written."""

    text: str


@dataclass(frozen=True, slots=True)
class Reset:
    """The model's stream broke after text was written and is asked again from the start: drop the text so far."""

    reason: str
