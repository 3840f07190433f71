"""The class catalog of a knowledge base, learned from its pages at index time (E4)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from .text import HAN_RE, IDENTIFIER_RE, camel_parts
from .types import Chunk


@dataclass
class Catalog:
    """Classes (structured name, Chinese title, members) and the Latin words the corpus uses."""

    classes: dict[str, dict] = field(default_factory=dict)  # name -> {"alias": str, "source": str, "members": [..]}
    vocabulary: dict[str, int] = field(default_factory=dict)  # lowercased Latin token -> document frequency

    @classmethod
    def from_chunks(cls, chunks: list[Chunk]) -> "Catalog":
        classes: dict[str, dict] = {}
        vocabulary: Counter = Counter()
        seen_sources: dict[str, set] = {}
        for chunk in chunks:
            entry = classes.setdefault(
                chunk.class_name, {"alias": chunk.class_alias, "source": chunk.source, "members": []}
            )
            if chunk.member and chunk.member not in entry["members"]:
                entry["members"].append(chunk.member)
            words = seen_sources.setdefault(chunk.source, set())
            words.update(t.lower() for t in IDENTIFIER_RE.findall(chunk.text))
        for words in seen_sources.values():
            vocabulary.update(words)
        return cls(classes=classes, vocabulary=dict(vocabulary))

    @classmethod
    def from_dict(cls, data: dict) -> "Catalog":
        return cls(classes=data["classes"], vocabulary=data["vocabulary"])

    def to_dict(self) -> dict:
        return {"classes": self.classes, "vocabulary": self.vocabulary}

    def aliases_to_teach(self) -> list[str]:
        """Chinese titles the segmenter should keep whole."""
        return [e["alias"] for e in self.classes.values() if e["alias"] and HAN_RE.search(e["alias"])]

    def phrase_aliases(self) -> dict[str, str]:
        """Lowercase spaced forms of multi-word class names: `perspective camera` -> PerspectiveCamera."""
        phrases = {}
        for name in self.classes:
            if re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
                parts = camel_parts(name)
                if len(parts) > 1:
                    phrases[" ".join(parts)] = name
        return phrases
