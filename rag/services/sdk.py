"""SDK versions side by side (issue 32).

An SDK's knowledge base (`three`) holds versions; each version is a knowledge base of its own, `three@2.0`, with
its own source (a folder, a git tag or branch, a site path), builds, gate, rollback and sync, so syncing one leaves
the others serving. Every face names a version as `kb@version` or with a separate version argument; without one a
question reads the SDK's `latest` (its newest release, or the version an admin gave that alias). A version that
is not indexed is refused with the versions that are (`sdk_version_not_found`), never substituted.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from infra.errors import ServiceError
from rag.engine.sdk import LATEST, VERSION_RE, CatalogDiff, CatalogDiffer, VersionNote, VersionNotes, newest_release
from rag.engine.sdk import ordered as ordered_names
from rag.models import KnowledgeBase

MAX_SLUG_CHARS = KnowledgeBase._meta.get_field("slug").max_length
MAX_NOTES_CACHED = 32  # SDKs whose versions' catalogs are kept compared in this process


@dataclass(frozen=True, slots=True)
class Served:
    """Which knowledge base a question reads: the SDK version's own (`three@2.0`), or a knowledge base without
    versions; `sdk_version` is "" for the latter."""

    kb: str
    sdk: str = ""
    sdk_version: str = ""


def split_kb(kb: str) -> tuple[str, str | None]:
    """`three@2.0` -> ("three", "2.0"); `three` -> ("three", None)."""
    slug, at, version = kb.partition("@")
    return slug, (version if at else None)


def checked_version(version) -> str:
    if not isinstance(version, str) or not VERSION_RE.match(version):
        raise ServiceError("invalid_sdk_version", "An SDK version is 1-32 letters, digits, dots, dashes or "
                                                  "underscores, starting with a letter or digit (1.4, 2.0.0-beta.3, "
                                                  "r160).")
    if len(version) > KnowledgeBase._meta.get_field("sdk_version").max_length:
        raise ServiceError("invalid_sdk_version", "An SDK version has at most 32 characters.")
    return version


def sdk_versions(sdk: KnowledgeBase) -> list[KnowledgeBase]:
    """The SDK's versions, oldest first (release order when every name is a release number, else the admin's)."""
    rows = list(sdk.sdk_versions.select_related("active_version").order_by("sdk_order", "created_at", "id"))
    names = ordered_names([row.sdk_version for row in rows], {row.sdk_version: row.sdk_order for row in rows})
    by_name = {row.sdk_version: row for row in rows}
    return [by_name[name] for name in names]


def aliases_of(versions: list[KnowledgeBase]) -> dict[str, KnowledgeBase]:
    """Every alias -> its version: the admin's, and `latest` (the newest release that serves, unless an admin
    claimed it: a version added and still building its first index does not take `latest` from the one before)."""
    aliases: dict[str, KnowledgeBase] = {}
    for row in versions:
        for alias in row.sdk_aliases or ():
            aliases.setdefault(alias, row)
    if LATEST not in aliases and versions:
        serving = [row for row in versions if row.active_version_id is not None] or versions
        newest = newest_release([row.sdk_version for row in serving])
        aliases[LATEST] = next(row for row in versions if row.sdk_version == newest)
    return aliases


def kb_serving(kb: str, sdk_version=None) -> Served:
    """The knowledge base a question names (`kb` may be `sdk@version`), with the version it asks or `latest`.
    Raise invalid_sdk_version, kb_not_found or sdk_version_not_found."""
    slug, written = split_kb(kb)
    if sdk_version is not None and written is not None and written != sdk_version:
        raise ServiceError("invalid_sdk_version", f"kb names version {written} and version names {sdk_version}.")
    asked = sdk_version if sdk_version is not None else written
    if asked is not None:
        checked_version(asked)
    row = KnowledgeBase.objects.filter(slug=slug).only("id", "slug").first()
    if row is None:
        raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404)
    versions = sdk_versions(row) if asked is not None or row.sdk_versions.exists() else []
    if not versions:
        if asked is not None:
            raise ServiceError("sdk_version_not_found", f"{slug} has no SDK versions; ask it without a version.",
                               status=404, details={"versions": []})
        return Served(kb=slug)
    chosen = next((v for v in versions if v.sdk_version == (asked or LATEST)), None)
    chosen = chosen or aliases_of(versions).get(asked or LATEST)
    if chosen is None:
        listed = ", ".join(v.sdk_version for v in versions)
        raise ServiceError("sdk_version_not_found", f"Version {asked} of {slug} is not indexed; indexed: {listed}.",
                           status=404, details={"versions": [v.sdk_version for v in versions],
                                                "aliases": {a: v.sdk_version for a, v in aliases_of(versions).items()}})
    return Served(kb=chosen.slug, sdk=slug, sdk_version=chosen.sdk_version)


@transaction.atomic
def sdk_version_ensure(*, sdk: str, version: str, source: str | None = None, language: str | None = None,
                       aliases: list[str] | None = None) -> KnowledgeBase:
    """Return the knowledge base of one SDK version, creating the SDK (without pages of its own) and the version as
    needed; `source` sets or changes the version's source (a folder, git+…@tag, a site)."""
    from rag.services.knowledge import kb_ensure

    version = checked_version(version)
    slug = f"{sdk}@{version}"
    if len(slug) > MAX_SLUG_CHARS:
        raise ServiceError("invalid_sdk_version", f"{slug} is longer than {MAX_SLUG_CHARS} characters.")
    parent = KnowledgeBase.objects.filter(slug=sdk).first()
    if parent is None:
        parent = kb_ensure(slug=sdk, source_dir=None, language=language, create_empty=True)
    elif parent.sdk_id is not None:
        raise ServiceError("invalid_sdk_version", f"{sdk} is itself a version of {parent.sdk.slug}.")
    existing = KnowledgeBase.objects.filter(slug=slug).first()
    if existing is None and not source:
        raise ServiceError("sdk_version_not_found", f"Version {version} of {sdk} does not exist; give --source to "
                                                    f"add it.", status=404)
    row = kb_ensure(slug=slug, source_dir=source, language=language or (parent.language if existing is None else None),
                    sdk=parent, sdk_version=version)
    if existing is None:  # the admin's order starts as the order versions were added in
        row.sdk_order = parent.sdk_versions.count()
        row.save(update_fields=["sdk_order"])
    if aliases is not None:
        row.sdk_aliases = [checked_version(alias) for alias in aliases]
        row.save(update_fields=["sdk_aliases", "updated_at"])
    return row


# -- what changed between versions, and what a question is told about it --------------------------------------

_diffs: dict[tuple, CatalogDiff] = {}  # (older index version id, newer id) -> diff: catalogs never change
_notes: dict[tuple, VersionNotes] = {}  # (sdk id, active index version ids) -> notes over those catalogs


def _catalog(row: KnowledgeBase) -> dict:
    return row.active_version.api_catalog if row.active_version is not None else {}


def sdk_diff(older: KnowledgeBase, newer: KnowledgeBase) -> CatalogDiff:
    """What changed between two versions' active builds (cached per pair of builds)."""
    key = (older.active_version_id, newer.active_version_id)
    diff = _diffs.get(key)
    if diff is None:
        diff = CatalogDiffer().run(older.sdk_version, _catalog(older), newer.sdk_version, _catalog(newer))
        if None not in key:  # a version without a build yet is compared with nothing: not worth keeping
            _diffs[key] = diff
    return diff


def sdk_diffs(versions: list[KnowledgeBase]) -> list[CatalogDiff]:
    """Each version against the next one (oldest first)."""
    return [sdk_diff(a, b) for a, b in zip(versions, versions[1:])]


def version_notes(served: Served, question: str) -> tuple[VersionNote, ...]:
    """The API names of the question that the served version does not document and another version does."""
    if not served.sdk_version:
        return ()
    sdk = KnowledgeBase.objects.only("id").get(slug=served.sdk)
    versions = [row for row in sdk_versions(sdk) if row.active_version_id is not None]
    key = (sdk.id, tuple(row.active_version_id for row in versions))
    notes = _notes.get(key)
    if notes is None:
        notes = VersionNotes(catalogs=[(row.sdk_version, _catalog(row)) for row in versions],
                             diffs=sdk_diffs(versions))
        if len(_notes) >= MAX_NOTES_CACHED:  # builds replaced since: their entries are never asked again
            _notes.clear()
        _notes[key] = notes
    return tuple(_with_evidence(note, served.sdk) for note in notes.run(question, served.sdk_version))


def _with_evidence(note: VersionNote, sdk: str) -> VersionNote:
    """The note with the section that documents the name in the nearest version that has it (its overview for a
    class), when that version opens; the note alone otherwise."""
    from dataclasses import replace

    from rag.engine.index import IndexError_
    from rag.pipeline import get_engine

    row = KnowledgeBase.objects.select_related("active_version").filter(slug=f"{sdk}@{note.nearest}").first()
    if row is None or row.active_version is None:
        return note
    try:
        reader = get_engine().reader(row.slug, row.active_version.name)
    except IndexError_:
        return note
    owner, _, member = note.documented_as.rpartition(".")
    position = reader.section_position(owner, member) if owner else next(
        (i for i, chunk in enumerate(reader.chunks) if chunk.class_name == member and not chunk.member), None)
    return replace(note, evidence=reader.chunks[position]) if position is not None else note


def sdk_versions_as_dict(sdk: KnowledgeBase) -> dict:
    """An SDK's versions as every face lists them: name, aliases, its build, and what changed from the one before."""
    versions = sdk_versions(sdk)
    aliases = aliases_of(versions)
    diffs = sdk_diffs(versions)
    listed = []
    for position, row in enumerate(versions):
        active = row.active_version
        listed.append({
            "version": row.sdk_version, "kb": row.slug,
            "aliases": sorted(alias for alias, holder in aliases.items() if holder.pk == row.pk),
            "index_version": active.name if active else None,
            "built_at": active.built_at.isoformat() if active and active.built_at else None,
            "source_revision": row.source_revision,
            "changes": diffs[position - 1].counts() if position else None,
        })
    default = aliases.get(LATEST)
    return {"kb": sdk.slug, "default": default.sdk_version if default else None, "versions": listed}


def sdk_versions_listed(kb: str) -> dict:
    """The versions of the knowledge base `kb` (or of the SDK of `kb@version`); none for one without versions."""
    slug = split_kb(kb)[0]
    sdk = KnowledgeBase.objects.filter(slug=slug).first()
    if sdk is None:
        raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404)
    return sdk_versions_as_dict(sdk)


def sdk_versions_diff(kb: str, older: str, newer: str) -> CatalogDiff:
    """What changed between two versions (or aliases) of the SDK `kb`."""
    sdk = split_kb(kb)[0]
    rows = [KnowledgeBase.objects.select_related("active_version").get(slug=kb_serving(sdk, name).kb)
            for name in (older, newer)]
    return sdk_diff(*rows)


def sdk_changes(row: KnowledgeBase) -> dict | None:
    """For a version's build report: what changed in its API since the version before it (None for the first
    version, or a knowledge base without versions)."""
    if row.sdk_id is None:
        return None
    versions = sdk_versions(row.sdk)
    position = next(i for i, version in enumerate(versions) if version.pk == row.pk)
    if not position:
        return None
    diff = sdk_diff(versions[position - 1], versions[position])
    return {"since": diff.older, **diff.counts()}
