"""Evidence completion (E6, issue 29): sections an answer needs that the ranking left out, found by the
documents' own structure rather than by the question's wording.

After adoption, `Completer.run(reader, plan, hits, tokens)` appends (at most `max_added`, after the adopted
hits, marked `source="structure"`):
- the note of a leading member's group: the text under `## Properties` before its first member, when it
  requires something of the reader ("after changing these properties you have to call …");
- the first code example of the leading class when the question asks for an example or how to do something and
  the evidence has none of that class;
- the setter of a leading getter or property (`getPixelRatio`, `pixelRatio` → `setPixelRatio`) when the
  question wants to change something, and the getters of a leading setter (`setFromCenterAndSize` → `getCenter`,
  `getSize`: compose.getters_of) when it wants to read something;
- the section of a typed property's class that the question's words point at: `.shadow : DirectionalLightShadow`
  leads, the question names the property (`shadow`) or the planner hinted its class, and the question's words
  are best matched, by BM25, within DirectionalLightShadow and its ancestors (`LightShadow.mapSize`); when that
  section was adopted already, it is marked `structure` in place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .compose import Intent, getters_of, group_requires, refers_to, setter_of
from .text import IDENTIFIER_RE
from .types import Hit, Plan

STRUCTURE = "structure"  # Hit.source of an appended section


@dataclass
class Completer:
    window: int = 3  # the leading hits whose structure is followed
    max_added: int = 3

    def run(self, reader, plan: Plan, hits: tuple[Hit, ...], tokens: list[str], intent: Intent,
            cosines: np.ndarray | None = None) -> tuple[Hit, ...]:
        """`cosines`: the question's cosine to every chunk (the dense route's), to rank a typed property's
        candidates by meaning; None ranks them by BM25."""
        if not hits:
            return hits
        present = {h.chunk.chunk_id for h in hits}
        added: list[int] = []

        def add(position: int | None) -> None:
            if position is None or len(added) >= self.max_added:
                return
            chunk = reader.chunks[position]
            if chunk.chunk_id not in present:
                present.add(chunk.chunk_id)
                added.append(position)

        window = [h.chunk for h in hits[:self.window]]
        words = {w.lower().rstrip("s") for w in IDENTIFIER_RE.findall(plan.question)}
        for chunk in window:
            if chunk.member and len(chunk.heading_path) >= 3:
                group = reader.group_position(chunk.source, chunk.heading_path[:2])
                if group is not None and group_requires(reader.chunks[group], chunk):
                    add(group)
        lead = window[0]
        if lead.member and lead.member != lead.class_name:
            # A setting that acts only with the leading member, which its section names (`.dampingFactor`: "used
            # if .enableDamping is set to true"): the answer gives both.
            add(self.dependent_of(reader, lead))
        if intent.code or intent.howto:
            # An example asked for, or how to do something: the first code example of the leading class, when the
            # evidence has none of it.
            lead = window[0].class_name
            if not any("```" in h.chunk.text for h in hits if h.chunk.class_name == lead):
                add(next((int(p) for p in np.flatnonzero(reader.class_mask(lead)) if "```" in reader.chunks[p].text),
                         None))
        if intent.accessor == "setter":
            for chunk in window:
                if chunk.member and not chunk.member.startswith("set"):
                    add(reader.section_position(chunk.class_name, setter_of(chunk.member)))
        elif intent.accessor == "getter":
            for chunk in window:
                for getter in getters_of(chunk.member):
                    add(reader.section_position(chunk.class_name, getter))
        followed: set[str] = set()  # a typed property's target already among the hits: marked, not added
        for chunk in window:
            kind = reader.catalog.member_types(chunk.class_name).get(chunk.member) if chunk.member else None
            if not kind or kind in plan.classes or not tokens:
                continue
            classes = (kind, *reader.catalog.ancestors(kind))
            if not (set(classes) & set(plan.hinted_classes) or chunk.member.lower().rstrip("s") in words):
                continue  # the question does not point at this property: its class is not what it asks about
            named = {t for name in plan.classes for t in reader.class_tokens(name)}
            target = self.best_in(reader, classes, [t for t in tokens if t not in named], cosines)
            if target is not None and reader.chunks[target].chunk_id in present:
                followed.add(reader.chunks[target].chunk_id)
            add(target)
        if not added and not followed:
            return hits
        last = hits[-1]
        marked = tuple(replace(h, source=STRUCTURE) if h.chunk.chunk_id in followed and h.source != "rerank" else h
                       for h in hits)
        return (*marked, *(Hit(chunk=reader.chunks[p], score=0.0, source=STRUCTURE, rank=last.rank + n, raw_score=0.0)
                           for n, p in enumerate(added, start=1)))

    @staticmethod
    def dependent_of(reader, chunk) -> int | None:
        """The first member section of `chunk`'s class, in the page's order, that names `chunk`'s member as
        `.member` (compose.refers_to); None if none does."""
        for position in np.flatnonzero(reader.class_mask(chunk.class_name) & reader.member_chunks):
            if refers_to(reader.chunks[position], chunk):
                return int(position)
        return None

    @staticmethod
    def best_in(reader, classes: tuple[str, ...], tokens: list[str], cosines: np.ndarray | None = None) -> int | None:
        """The member section (not a constructor) of these classes nearest the question (by cosine when given,
        else by BM25) among those sharing a word with it; None if none shares a word."""
        mask = np.zeros(reader.count, dtype=bool)
        for name in classes:
            mask |= reader.class_mask(name)
        if not mask.any():
            return None
        sections = mask & reader.member_chunks
        for position in np.flatnonzero(sections):
            if reader.chunks[position].member == reader.chunks[position].class_name:
                sections[position] = False  # a constructor documents the class, not a setting of it
        bm25 = reader.bm25_scores(tokens)
        shared = np.where(sections, bm25, 0.0) > 0
        if not shared.any():
            return None
        scores = np.where(shared, cosines if cosines is not None else bm25, -np.inf)
        return int(np.argmax(scores))
