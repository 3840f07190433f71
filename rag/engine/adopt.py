"""Adoption (E6): which fused chunks become evidence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Adopter:
    """Single-class (or class-less) questions adopt the top `single`; multi-class ones take at most
    `per_class` per class, round-robin in the order the classes were named (seed 001: 5 and 3)."""

    single: int = 5
    per_class: int = 3
    spread: int = 5  # a question naming no class: its first picks, up to this many, come from different classes
    kept: int = 3  # ... after its first this-many fused chunks, which keep their places (see _spread)
    class_evidence: int = 5  # a class's strength is the summed fused score of its best this-many chunks

    def run(self, fused: list[int], classes: list[str], class_of, excluded: set[int] = frozenset(),
            scores: dict | None = None, follows: frozenset[int] | set[int] = frozenset(),
            overviews: frozenset[int] | set[int] = frozenset()) -> list[int]:
        """`follows`: chunks that never lead a question naming no class (release notes: they name every API they
        changed); they keep their fused order after the leads. `overviews`: the chunks that introduce a page
        rather than document one of its members (see _spread)."""
        candidates = [i for i in fused if i not in excluded]
        if not classes and scores is not None and self.spread > 1:
            leading = [i for i in candidates if i not in follows]
            lead = self._spread(leading, class_of, scores, overviews)[: self.spread]
            return (lead + [i for i in candidates if i not in lead])[: self.single]
        if len(classes) == 1:
            # The named class leads with its best `per_class` chunks; the places after them go to other pages
            # first, since a class named in passing ("with GLTFLoader, my model is darker") may not be where
            # the answer is documented. Only when no other page was found does the class fill them.
            own = [i for i in candidates if class_of(i) == classes[0]]
            others = [i for i in candidates if class_of(i) != classes[0]]
            return (own[: self.per_class] + others + own[self.per_class:])[: self.single]
        if not classes:
            return candidates[: self.single]
        queues = {name: [i for i in candidates if class_of(i) == name][: self.per_class] for name in classes}
        adopted: list[int] = []
        for round_no in range(self.per_class):
            for name in classes:
                if round_no < len(queues[name]):
                    adopted.append(queues[name][round_no])
        return adopted

    def _spread(self, candidates: list[int], class_of, scores: dict, overviews=frozenset()) -> list[int]:
        """Keep the best `kept` chunks first, in fused order (a page's member before its introduction), then lead
        with the best chunk of each strongest class not among them, up to `spread` chunks.

        With no class named, the evidence usually sits in one class; a class's strength is the summed
        fused score of its best `class_evidence` chunks, so a class that several routes agree on rises,
        and one family of near-duplicate pages cannot fill the window. The first places keep the fused order:
        the member asked about is often the second or third section of the leading page (issue 34: spreading
        from the second place on lost real users' members a plain hybrid retriever had in its first 3).
        """
        if not candidates:
            return []
        by_class: dict[str, list[int]] = {}
        for i in candidates:
            by_class.setdefault(class_of(i), []).append(i)
        ranked = sorted(by_class, key=lambda c: -sum(scores[i] for i in by_class[c][: self.class_evidence]))
        first = candidates[0]
        if first in overviews and len(candidates) > 1 and candidates[1] not in overviews \
                and class_of(candidates[1]) == class_of(first):
            # The page's introduction and then one of its members: the member is what was asked about, and
            # the page still leads.
            first = candidates[1]
        head = [first] + [i for i in candidates if i != first][: self.kept - 1]
        heads = {class_of(i) for i in head}
        lead = head + [by_class[c][0] for c in ranked if c not in heads][: self.spread - len(head)]
        return lead + [i for i in candidates if i not in lead]
