"""SDK versions (issue 32): their order, each version's API catalog, what changed between two of them, and what a
question about one version should be told about the others.

Plain Python: the service keeps which knowledge base holds which version; this module only compares catalogs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .chunk import document_page
from .text import DOTTED_RE, HAN_RE, sha1
from .types import Chunk, SourceDocument, first_sentence

# A version as SDKs write it: `1.20`, `2.0.0-beta.3`, `r160`, `v5`, `2024.1`; kept exactly as given.
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
LATEST = "latest"  # the alias every versioned knowledge base has: its newest release, unless an admin gives it away

# An identifier as a question writes an API name (`setAnimationLoop`, `WebGLRenderer.render`, `cairo_set_source()`).
NAME_RE = re.compile(rf"{DOTTED_RE.pattern}(?:\s*\(\s*\))?")


# -- order ----------------------------------------------------------------------------------------------------


def release_of(name: str):
    """The version as `packaging` reads it, or None when it does not (`r160`, a codename)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(name)
    except InvalidVersion:
        return None


def ordered(names: list[str], admin_order: dict[str, int] | None = None) -> list[str]:
    """Oldest first. When every name parses as a release (`1.4`, `2.0.0-beta.3`, `v5`) their release order; else the
    admin's order (then the names as given: a version is never renamed or guessed at)."""
    releases = {name: release_of(name) for name in names}
    if names and all(release is not None for release in releases.values()):
        return sorted(names, key=lambda name: releases[name])
    order = admin_order or {}
    return sorted(names, key=lambda name: (order.get(name, 0), names.index(name)))


def newest_release(names_oldest_first: list[str]) -> str | None:
    """What `latest` means: the newest version that is not a pre-release (a preview line is asked for by name);
    the newest of all when every one is a pre-release."""
    for name in reversed(names_oldest_first):
        release = release_of(name)
        if release is None or not release.is_prerelease:
            return name
    return names_oldest_first[-1] if names_oldest_first else None


# -- each version's API ----------------------------------------------------------------------------------------


def api_catalog(documents: list[SourceDocument]) -> dict:
    """The classes and members a version documents, read from each page's document model (so a member documented
    by its signature alone counts too), with what a diff compares: each class's page, and each member's signature
    (the generator's, else its heading as written) and the hash of its description's first sentence.

    {"classes": {class: {"source": page, "members": {member: [signature, description hash]}}}}"""
    classes: dict[str, dict] = {}
    for document in documents:
        page = document_page(document)
        if page.skipped:
            continue
        if page.symbol:
            classes.setdefault(page.symbol, {"source": document.path, "members": {}})
        for section in page.sections:
            owner = section.owner or page.symbol
            if not owner:
                continue
            entry = classes.setdefault(owner, {"source": document.path, "members": {}})
            if not section.member or section.member in entry["members"]:
                continue
            heading = section.signature or (section.headings[-1] if section.headings else section.member)
            description = first_sentence(section.markdown)
            entry["members"][section.member] = [_signature(heading),
                                                sha1(_plain(description))[:12] if description else ""]
    return {"classes": classes}


def _signature(heading: str) -> str:
    return re.sub(r"\s+", " ", heading.replace("`", "")).strip()


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


@dataclass(frozen=True, slots=True)
class CatalogDiff:
    """What changed from one version's API to the next. Members are written `Class.member`."""

    older: str
    newer: str
    classes_added: tuple[str, ...] = ()
    classes_removed: tuple[str, ...] = ()
    classes_renamed: tuple[tuple[str, str], ...] = ()  # (old, new): the same page under a new class name
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()  # (old, new): the same page, the same description, a new name
    signature_changed: tuple[tuple[str, str, str], ...] = ()  # (member, old signature, new signature)

    def as_dict(self) -> dict:
        return {"older": self.older, "newer": self.newer,
                "classes_added": list(self.classes_added), "classes_removed": list(self.classes_removed),
                "classes_renamed": [list(pair) for pair in self.classes_renamed],
                "added": list(self.added), "removed": list(self.removed),
                "renamed": [list(pair) for pair in self.renamed],
                "signature_changed": [{"member": m, "before": a, "after": b} for m, a, b in self.signature_changed]}

    def counts(self) -> dict[str, int]:
        return {"classes_added": len(self.classes_added), "classes_removed": len(self.classes_removed),
                "classes_renamed": len(self.classes_renamed), "added": len(self.added), "removed": len(self.removed),
                "renamed": len(self.renamed), "signature_changed": len(self.signature_changed)}

    def replacement(self, qualified: str) -> str | None:
        """What a member removed here was renamed to, when the diff found it."""
        return next((new for old, new in self.renamed if old == qualified), None)


class CatalogDiffer:
    """Compare two versions' API catalogs (api_catalog)."""

    def run(self, older: str, old: dict, newer: str, new: dict) -> CatalogDiff:
        old_classes, new_classes = old.get("classes", {}), new.get("classes", {})
        gone = [name for name in old_classes if name not in new_classes]
        came = [name for name in new_classes if name not in old_classes]
        # A class whose page stayed and whose name changed was renamed: its members are compared under the new name.
        came_by_page = {}
        for name in came:
            came_by_page.setdefault(new_classes[name]["source"], []).append(name)
        class_renamed = {}
        for name in gone:
            candidates = came_by_page.get(old_classes[name]["source"], [])
            if len(candidates) == 1:
                class_renamed[name] = candidates[0]
        pairs = [(name, name) for name in old_classes if name in new_classes] + list(class_renamed.items())

        added, removed, changed = [], [], []
        for old_name, new_name in pairs:
            old_members, new_members = old_classes[old_name]["members"], new_classes[new_name]["members"]
            for member, (signature, _) in old_members.items():
                if member not in new_members:
                    removed.append((old_name, member))
                elif new_members[member][0] != signature:
                    changed.append((f"{new_name}.{member}", signature, new_members[member][0]))
            added += [(new_name, member) for member in new_members if member not in old_members]

        # A member gone and one come on the same page with the same description (or, with none, the same signature
        # but for the name): renamed, when the match is unique both ways.
        renamed = []
        by_description: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for owner, member in added:
            by_description.setdefault(_likeness(new_classes[owner], member), []).append((owner, member))
        gone_by_description: dict[tuple[str, str], int] = {}
        for owner, member in removed:
            key = _likeness(old_classes[owner], member)
            gone_by_description[key] = gone_by_description.get(key, 0) + 1
        for owner, member in list(removed):
            key = _likeness(old_classes[owner], member)
            matches = by_description.get(key, [])
            if key[1] and len(matches) == 1 and gone_by_description[key] == 1:
                renamed.append((f"{owner}.{member}", f"{matches[0][0]}.{matches[0][1]}"))
                removed.remove((owner, member))
                added.remove(matches[0])

        return CatalogDiff(
            older=older, newer=newer,
            classes_added=tuple(name for name in came if name not in class_renamed.values()),
            classes_removed=tuple(name for name in gone if name not in class_renamed),
            classes_renamed=tuple(class_renamed.items()),
            added=tuple(f"{owner}.{member}" for owner, member in added),
            removed=tuple(f"{owner}.{member}" for owner, member in removed),
            renamed=tuple(renamed), signature_changed=tuple(changed))


def _likeness(entry: dict, member: str) -> tuple[str, str]:
    """What a renamed member keeps: its page, and its description's hash, else its signature without its name."""
    signature, description = entry["members"][member]
    shape = signature.replace(member, "\x00", 1) if member in signature and signature != member else ""
    return entry["source"], description or (f"signature:{shape}" if shape else "")


# -- what a question about one version is told about the others ------------------------------------------------


@dataclass(frozen=True, slots=True)
class VersionNote:
    """An API name the question writes that the asked version does not document, and where it is documented."""

    name: str  # as the question writes it
    asked: str  # the version asked about
    kind: str  # "added" (in a later version), "removed" (only in earlier ones), "elsewhere" (earlier and later)
    versions: tuple[str, ...]  # the versions that document it, oldest first
    since: str = ""  # added: the first later version that documents it; removed: the first version without it
    replacement: str = ""  # removed: what the diff found it renamed to
    documented_as: str = ""  # `Class.member` (or the class) in the nearest version that documents it
    nearest: str = ""  # that version
    evidence: Chunk | None = None  # its section in that version, when the service could open it

    def text(self, chinese: bool) -> str:
        return self._said(chinese) + self._quoted(chinese)

    def _said(self, chinese: bool) -> str:
        name, asked = f"`{self.name}`", self.asked
        if self.kind == "added":
            return (f"{name} 在 {self.since} 版本中加入；你问的是 {asked}，该版本没有它。" if chinese else
                    f"{name} was added in {self.since}; you asked about {asked}, which does not have it.")
        if self.kind == "removed":
            replaced = (f"，由 `{self.replacement}` 取代" if chinese else
                        f"; it was replaced by `{self.replacement}`") if self.replacement else ""
            last = self.versions[-1]
            return (f"{name} 在 {self.since} 版本中移除（最后见于 {last}）{replaced}；你问的是 {asked}。" if chinese else
                    f"{name} was removed in {self.since} (last documented in {last}){replaced}; "
                    f"you asked about {asked}.")
        listed = "、".join(self.versions) if chinese else ", ".join(self.versions)
        return (f"{name} 不在 {asked} 版本的文档中；文档中有它的版本：{listed}。" if chinese else
                f"{name} is not documented in {asked}; it is in {listed}.")

    def _quoted(self, chinese: bool) -> str:
        """What the version that documents it says, labelled with that version (never mixed in unlabelled)."""
        said = first_sentence(self.evidence.text) if self.evidence is not None else ""
        if not said:
            return ""
        where = self.evidence.source + (f"#{self.evidence.anchor}" if self.evidence.anchor else "")
        return (f"\n\n> {self.nearest} 版本的文档（{where}）：{said}" if chinese else
                f"\n\n> In {self.nearest} ({where}): {said}")

    def as_dict(self) -> dict:
        evidence = None
        if self.evidence is not None:
            evidence = {"sdk_version": self.nearest, "chunk_id": self.evidence.chunk_id, "source": self.evidence.source,
                        "anchor": self.evidence.anchor, "heading_path": list(self.evidence.heading_path),
                        "text": self.evidence.text}
        return {"name": self.name, "asked": self.asked, "kind": self.kind, "versions": list(self.versions),
                "since": self.since, "replacement": self.replacement, "documented_as": self.documented_as,
                "evidence": evidence}


@dataclass
class VersionNotes:
    """Notes for the API names of a question that the asked version lacks and its neighbours document.

    `catalogs` are every version's API catalog, oldest first; `diffs[i]` compares version i with version i + 1."""

    catalogs: list[tuple[str, dict]]
    diffs: list[CatalogDiff]

    def __post_init__(self) -> None:
        self._names = [_names_of(catalog) for _, catalog in self.catalogs]

    def run(self, question: str, asked: str) -> tuple[VersionNote, ...]:
        versions = [name for name, _ in self.catalogs]
        if asked not in versions or len(versions) < 2:
            return ()
        here = versions.index(asked)
        notes: dict[str, VersionNote] = {}
        for written in _api_names(question):
            parts = written.split(".")
            for position in range(len(parts)):
                name = ".".join(parts[position:]) if position else written
                qualified = name if "." in name else None
                key = qualified or name
                if key in notes or self._documented(here, name):
                    continue
                having = [i for i in range(len(versions)) if self._documented(i, name)]
                if not having:
                    continue
                notes[key] = self._note(name, here, having)
                break
        return tuple(notes.values())

    def _documented(self, index: int, name: str) -> bool:
        qualified, members, classes = self._names[index]
        return name in qualified if "." in name else name in members or name in classes

    def _note(self, name: str, here: int, having: list[int]) -> VersionNote:
        versions = [self.catalogs[i][0] for i in having]
        later, earlier = [i for i in having if i > here], [i for i in having if i < here]
        nearest = min(having, key=lambda i: (abs(i - here), -i))
        found = {"documented_as": self._where(nearest, name), "nearest": self.catalogs[nearest][0]}
        asked = self.catalogs[here][0]
        if later and not earlier:
            return VersionNote(name=name, asked=asked, kind="added", versions=tuple(versions),
                               since=self.catalogs[later[0]][0], **found)
        if earlier and not later:
            last = earlier[-1]
            replacement = self.diffs[last].replacement(found["documented_as"]) if last < len(self.diffs) else None
            return VersionNote(name=name, asked=asked, kind="removed", versions=tuple(versions),
                               since=self.catalogs[last + 1][0], replacement=replacement or "", **found)
        return VersionNote(name=name, asked=asked, kind="elsewhere", versions=tuple(versions), **found)

    def _where(self, index: int, name: str) -> str:
        classes = self.catalogs[index][1].get("classes", {})
        if "." in name or name in classes and not any(name in e["members"] for e in classes.values()):
            return name
        return next((f"{owner}.{name}" for owner, entry in classes.items() if name in entry["members"]), name)


def _names_of(catalog: dict) -> tuple[set[str], set[str], set[str]]:
    classes = catalog.get("classes", {})
    qualified = {f"{owner}.{member}" for owner, entry in classes.items() for member in entry["members"]}
    members = {member for entry in classes.values() for member in entry["members"]}
    return qualified, members, set(classes)


def _api_names(question: str) -> list[str]:
    """The names a question writes as code: camelCase, PascalCase, snake_case, dotted or called; a plain word
    (`load`, `render`) could be prose, so it is never compared with another version's API."""
    names = []
    for raw in NAME_RE.findall(question):
        called = raw.rstrip().endswith(")")
        name = re.sub(r"\s*\(\s*\)$", "", raw)
        if len(name) < 3 or HAN_RE.search(name):
            continue
        if called or "." in name or "_" in name.strip("_") or re.search(r"[a-z0-9][A-Z]", name) \
                or re.match(r"[A-Z][a-z0-9]+[A-Z]", name):
            names.append(name)
        elif re.match(r"[A-Z][a-z0-9]{2,}$", name) and not question.startswith(name):
            names.append(name)  # a capitalised word inside a sentence may be a class (`Texture`)
    return names


def is_chinese(text: str) -> bool:
    return HAN_RE.search(text) is not None
