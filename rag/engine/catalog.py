"""The class catalog of a knowledge base, learned from its pages at index time (E4)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from .text import HAN_RE, IDENTIFIER, IDENTIFIER_RE, NAME_CHARS, camel_parts
from .types import Chunk

# A page's inheritance line, as reference pages write it under the title:
# `> Category: Lights · Inheritance: Object3D → Light`, `> 分类：相机 · 继承自 Camera`, "Extends: Material".
# Sphinx writes "Bases: `click.core.Command`"; qualified names are read by their last part (QUALIFIED_RE).
INHERITANCE_RE = re.compile(
    r"(?:Inheritance|Inherits(?:\s+from)?|Extends|Bases|Base\s+class(?:es)?|继承自?|父类|基类)\s*[:：]?\s*"
    rf"({IDENTIFIER}(?:\s*(?:→|->|>|<-|←|,)\s*{IDENTIFIER})*)", re.IGNORECASE)


@dataclass
class Catalog:
    """Classes (structured name, Chinese title, members) and the Latin words the corpus uses."""

    # name -> {"alias": str, "source": str, "members": [...], "ancestors": [parent, grandparent, ...],
    #          "types": {member: the documented class that is its type}, "kind": "file" for a header's
    #          reference page (its functions and macros, no class), else ""}
    classes: dict[str, dict] = field(default_factory=dict)
    vocabulary: dict[str, int] = field(default_factory=dict)  # lowercased Latin token -> document frequency

    @classmethod
    def from_chunks(cls, chunks: list[Chunk]) -> "Catalog":
        classes: dict[str, dict] = {}
        vocabulary: Counter = Counter()
        seen_sources: dict[str, set] = {}
        for chunk in chunks:
            entry = classes.setdefault(
                chunk.class_name, {"alias": chunk.class_alias, "source": chunk.source, "members": [], "ancestors": []}
            )
            if chunk.part == 0 and not chunk.member and not entry["ancestors"]:
                entry["ancestors"] = inheritance_of(chunk.text, chunk.class_name)
            if chunk.kind == "file":
                entry["kind"] = "file"
            if chunk.member and chunk.member not in entry["members"]:
                entry["members"].append(chunk.member)
                kind = member_type(chunk.heading_path[-1] if chunk.heading_path else "")
                if kind:
                    entry.setdefault("types", {})[chunk.member] = kind
            words = seen_sources.setdefault(chunk.source, set())
            words.update(t.lower() for t in IDENTIFIER_RE.findall(chunk.text))
        for words in seen_sources.values():
            vocabulary.update(words)
        for entry in classes.values():  # only ancestors and member types the corpus documents
            entry["ancestors"] = [name for name in entry["ancestors"] if name in classes]
            entry["types"] = {m: t for m, t in entry.get("types", {}).items() if t in classes}
        return cls(classes=classes, vocabulary=dict(vocabulary))

    @classmethod
    def from_dict(cls, data: dict) -> "Catalog":
        classes = data["classes"]
        for entry in classes.values():  # versions built before the class graph
            entry.setdefault("ancestors", [])
            entry.setdefault("types", {})
            entry.setdefault("kind", "")
        return cls(classes=classes, vocabulary=data["vocabulary"])

    def is_class(self, name: str) -> bool:
        """Whether a catalog entry is a class a question can name (a header's file reference page is not)."""
        return self.classes.get(name, {}).get("kind", "") != "file"

    def ancestors(self, name: str) -> list[str]:
        """Return a class's documented ancestors, nearest first (its parent, then the parent's, …)."""
        entry = self.classes.get(name)
        return list(entry["ancestors"]) if entry else []

    def member_types(self, name: str) -> dict[str, str]:
        """Return the members of a class (its own and inherited) whose type is a documented class:
        `.shadow : DirectionalLightShadow` on DirectionalLight gives {"shadow": "DirectionalLightShadow"}."""
        types: dict[str, str] = {}
        for candidate in reversed((name, *self.ancestors(name))):
            types.update(self.classes.get(candidate, {}).get("types", {}))
        return types

    def owner_of(self, member: str, name: str) -> str | None:
        """Return the page that documents `member` for class `name`: the class itself or its nearest
        ancestor that has it; None when neither does."""
        for candidate in (name, *self.ancestors(name)):
            entry = self.classes.get(candidate)
            if entry and member in entry["members"]:
                return candidate
        return None

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


def inheritance_of(text: str, class_name: str) -> list[str]:
    """Read a page's inheritance line into its ancestors, nearest first: `Object3D → Light` on the page of
    DirectionalLight gives [Light, Object3D]. Only the lines before the first heading below the section's own
    heading count."""
    lines = text.splitlines()[:12]
    if lines and lines[0].startswith("#"):
        lines = lines[1:]
    for line in lines:
        if line.startswith("##"):
            break
        line = QUALIFIED_RE.sub(lambda m: re.split(r"\.|::", m.group(0))[-1], line.replace("`", ""))
        match = INHERITANCE_RE.search(line)
        # A note under the title (`> …`), or a line that states it with a colon ("Extends: Material").
        if match and (line.lstrip().startswith(">") or re.search(r"[:：]", line[match.start():match.start(1)])):
            chain = [name for name in re.split(r"\s*(?:→|->|>|<-|←|,)\s*", match.group(1)) if name]
            if "<-" in match.group(1) or "←" in match.group(1):
                chain.reverse()  # written child first
            return [name for name in reversed(chain) if name != class_name]
    return []


QUALIFIED_RE = re.compile(rf"{IDENTIFIER}(?:(?:\.|::){IDENTIFIER})+")
MEMBER_TYPE_RE = re.compile(rf"^\.?{IDENTIFIER}\s*:\s*([A-Z][{NAME_CHARS}]*)\s*$")


def member_type(heading: str) -> str:
    """Return the type of a property heading: `.shadow : DirectionalLightShadow` -> DirectionalLightShadow."""
    match = MEMBER_TYPE_RE.match(heading.strip())
    return match.group(1) if match else ""
