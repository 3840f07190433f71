"""Golden sets: import and export as JSON Lines (the SCHEMA.md shapes), versions, and drafts made from
thumbs-down answers. A version some run used stays as that run saw it; edits go to a new version."""

from __future__ import annotations

import json
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import Max

from evaluation.models import GoldenDraft, GoldenItem, GoldenSet
from infra.errors import ServiceError
from rag.models import Channel, RequestRecord

LAYERS = ("plain", "colloquial", "member", "typo", "multi", "negative")
NEGATIVE_KINDS = ("chitchat", "out_of_catalog", "no_answer")
FIELDS = {
    "retrieval": ("id", "question", "layer", "answerable", "expected_classes", "expected_members", "negative_kind",
                  "kb", "source"),
    "generation": ("id", "question", "answerable", "expected_classes", "expected_members", "must_mention",
                   "forbidden", "reference", "needs_code", "kb", "source"),
}


def _check_item(data, kind: str, line: int) -> dict:
    """One JSON Lines object in the SCHEMA.md shape, or a message naming the line and the field."""
    if not isinstance(data, dict):
        raise ValueError(f"line {line}: not a JSON object")

    def text(name, required=True):
        value = data.get(name, "")
        if not isinstance(value, str) or (required and not value.strip()):
            raise ValueError(f"line {line}: {name} must be a non-empty string")
        return value

    def words(name):
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"line {line}: {name} must be a list of strings")
        return value

    answerable = data.get("answerable")
    if not isinstance(answerable, bool):
        raise ValueError(f"line {line}: answerable must be true or false")
    item = {"item_id": text("id"), "question": text("question"), "answerable": answerable,
            "expected_classes": words("expected_classes"), "expected_members": words("expected_members"),
            "kb": text("kb"), "source": text("source", required=False)}
    if len(item["item_id"]) > 64 or len(item["kb"]) > 64:
        raise ValueError(f"line {line}: id and kb are at most 64 characters")
    if answerable and not item["expected_classes"] and kind == "retrieval":
        raise ValueError(f"line {line}: an answerable question needs expected_classes")
    if kind == "retrieval":
        layer = text("layer")
        if layer not in LAYERS:
            raise ValueError(f"line {line}: layer must be one of {', '.join(LAYERS)}")
        negative_kind = data.get("negative_kind", "") or ""
        if not answerable and negative_kind not in NEGATIVE_KINDS:
            raise ValueError(f"line {line}: a negative needs negative_kind ({', '.join(NEGATIVE_KINDS)})")
        item.update(layer=layer, negative_kind=negative_kind)
    else:
        needs_code = data.get("needs_code", False)
        if not isinstance(needs_code, bool):
            raise ValueError(f"line {line}: needs_code must be true or false")
        item.update(layer="" if answerable else "negative", must_mention=words("must_mention"),
                    forbidden=words("forbidden"), reference=text("reference", required=False), needs_code=needs_code)
    return item


def golden_import(*, name: str, kind: str, text: str, user=None, note: str = "") -> GoldenSet:
    """Store JSON Lines as the next version of the set `name`; any bad line refuses the whole file."""
    if kind not in FIELDS:
        raise ServiceError("invalid_kind", "kind must be retrieval or generation.")
    if not name or len(name) > 100:
        raise ServiceError("invalid_name", "Give the golden set a name of at most 100 characters.")
    items, seen = [], set()
    try:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                raise ValueError(f"line {number}: not valid JSON") from None
            item = _check_item(data, kind, number)
            if item["item_id"] in seen:
                raise ValueError(f"line {number}: id {item['item_id']} appears twice")
            seen.add(item["item_id"])
            items.append(item)
    except ValueError as exc:
        raise ServiceError("invalid_golden_set", str(exc)) from None
    if not items:
        raise ServiceError("golden_set_empty", "The file holds no questions.")
    existing = GoldenSet.objects.filter(name=name).order_by("-version").first()
    if existing and existing.kind != kind:
        raise ServiceError("golden_kind_mismatch", f"{name} is a {existing.kind} set.")
    with transaction.atomic():
        golden_set = GoldenSet.objects.create(name=name, kind=kind, version=(existing.version + 1) if existing else 1,
                                              created_by=user, note=note[:300])
        GoldenItem.objects.bulk_create([GoldenItem(golden_set=golden_set, position=n, **item)
                                        for n, item in enumerate(items)])
    return golden_set


def golden_matches(golden_set: GoldenSet, text: str) -> bool:
    """Whether a JSON Lines file holds exactly the set's questions (so importing it again would change nothing)."""
    try:
        parsed = [_check_item(json.loads(line), golden_set.kind, n)
                  for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    except ValueError:
        return False
    stored = [{name: getattr(item, name) for name in parsed[0]} for item in golden_set.items.all()] if parsed else []
    return parsed == stored


def golden_export(golden_set: GoldenSet) -> str:
    """The set's items as JSON Lines in the SCHEMA.md shape of its kind."""
    lines = []
    for item in golden_set.items.all():
        row = {"id": item.item_id}
        for name in FIELDS[golden_set.kind][1:]:
            row[name] = getattr(item, name)
        if golden_set.kind == "retrieval" and item.answerable:
            row.pop("negative_kind")
        lines.append(json.dumps(row, ensure_ascii=False))
    return "\n".join(lines) + "\n"


@transaction.atomic
def golden_new_version(golden_set: GoldenSet, *, user=None, note: str = "") -> GoldenSet:
    """Copy a set's items into its next version, which may be edited (the old one stays as runs saw it)."""
    latest = GoldenSet.objects.filter(name=golden_set.name).aggregate(v=Max("version"))["v"]
    copy = GoldenSet.objects.create(name=golden_set.name, kind=golden_set.kind, version=latest + 1, created_by=user,
                                    note=note or f"edited copy of v{golden_set.version}")
    items = list(golden_set.items.all())
    for item in items:
        item.pk = None
        item.golden_set = copy
    GoldenItem.objects.bulk_create(items)
    return copy


def golden_set_latest(name: str) -> GoldenSet:
    """Return the latest version of the set `name`, or raise `golden_set_not_found`."""
    golden_set = GoldenSet.objects.filter(name=name).order_by("-version").first()
    if golden_set is None:
        raise ServiceError("golden_set_not_found", f"No golden set named {name}.", status=404)
    return golden_set


def draft_from_request(*, request_id: str, reason: str = "") -> GoldenDraft:
    """Turn a thumbs-down answer (web or MCP) into a draft golden item with its question and evidence."""
    record = RequestRecord.objects.filter(request_id=request_id).exclude(channel=Channel.EVAL).first()
    if record is None:
        raise ServiceError("request_not_found", "No user request with this id.", status=404)
    existing = GoldenDraft.objects.filter(request_id=request_id).first()
    if existing:
        return existing
    evidence = [{"chunk_id": a.get("chunk_id"), "class_name": a.get("class_name"), "member": a.get("member"),
                 "source": a.get("source")} for a in record.adopted]
    classes = list(dict.fromkeys(a["class_name"] for a in evidence if a.get("class_name")))
    try:
        return GoldenDraft.objects.create(
            request_id=request_id, channel=record.channel, kb=record.kb, question=record.question,
            answer=record.answer, evidence=evidence, feedback_reason=reason[:2000],
            expected_classes=classes[:1], layer="plain")
    except IntegrityError:
        return GoldenDraft.objects.get(request_id=request_id)


@transaction.atomic
def draft_add(draft: GoldenDraft, *, user=None) -> GoldenItem:
    """Add a completed draft to a new version of its target set."""
    if draft.status != GoldenDraft.Status.OPEN:
        raise ServiceError("draft_closed", "This draft was already added or dismissed.")
    if draft.target_set is None:
        raise ServiceError("draft_incomplete", "Choose the golden set this question goes to.")
    if draft.answerable and not draft.expected_classes:
        raise ServiceError("draft_incomplete", "An answerable question needs its expected classes.")
    latest = golden_set_latest(draft.target_set.name)
    target = golden_new_version(latest, user=user, note=f"added {draft.request_id}")
    item_id = f"fb-{draft.pk}"
    item = GoldenItem.objects.create(
        golden_set=target, item_id=item_id, position=target.items.count(), question=draft.question,
        layer=draft.layer if target.kind == "retrieval" else ("" if draft.answerable else "negative"),
        answerable=draft.answerable, expected_classes=draft.expected_classes, expected_members=draft.expected_members,
        negative_kind=draft.negative_kind, kb=draft.kb, must_mention=draft.must_mention, forbidden=draft.forbidden,
        reference=draft.reference, needs_code=draft.needs_code)
    draft.status = GoldenDraft.Status.ADDED
    draft.added_item = item
    draft.save(update_fields=["status", "added_item"])
    return item


SHIPPED_FOLDER = "golden"  # evaluation/golden/<kb>/{retrieval,generation}.jsonl, written about the bundled docs
SHIPPED_FILES = {"retrieval": "retrieval.jsonl", "generation": "generation.jsonl"}


def shipped_golden_sets() -> list[tuple[str, str, Path]]:
    """Return (name, kind, path) of every golden file shipped with the project: `<kb>-<kind>` per folder."""
    root = Path(__file__).resolve().parent.parent / SHIPPED_FOLDER
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        for kind, filename in SHIPPED_FILES.items():
            if (folder / filename).is_file():
                found.append((f"{folder.name}-{kind}", kind, folder / filename))
    return found


def golden_import_shipped() -> list[GoldenSet]:
    """Import each shipped golden set whose name the database does not hold yet; return the sets imported.

    Idempotent: a set of that name, in any version, is never imported again, duplicated or overwritten, so
    an edited or deleted-and-replaced set stays as its owners left it."""
    imported = []
    for name, kind, path in shipped_golden_sets():
        if GoldenSet.objects.filter(name=name).exists():
            continue
        try:
            with transaction.atomic():
                imported.append(golden_import(name=name, kind=kind, text=path.read_text(encoding="utf-8"),
                                              note="shipped with the project (evaluation/golden)"))
        except IntegrityError:  # another process imported it at the same moment
            continue
    return imported
