"""Document filters of the retrieval APIs (R5), one implementation for the open API, RAGFlow's and Dify's faces.

A `DocumentFilter` keeps the documents that pass all of: `doc_ids` (any of them), `label_value_ids` (any of a
label's given values, for every label named), and the metadata conditions joined by `logic` ("and": all of them,
"or": any). A condition reads a field of the document, in this order: the built-in fields (`doc_id` or
`document_id`, `title`, `path` (also `source`, `document_name`, `docnm_kwd`), `url`, `create_time`, `update_time`,
`kb`), then a label of that name (its values), then a front-matter field of that name. A field the document does
not have is empty. A filter that matches no document leaves nothing to search: never everything.

Operators (RAGFlow's and Dify's spellings): `is` / `=`, `is not` / `not is` / `≠` / `!=`, `contains`, `not
contains`, `start with`, `end with`, `empty`, `not empty`, `in`, `not in`, `>`, `<`, `≥` / `>=`, `≤` / `<=`, and
for dates `before` and `after`. Text compares case-insensitively; `>`, `<`, `≥`, `≤` compare numbers, or ISO dates
when both sides are dates. A field with several values (labels, lists) matches when any value does, and the
negative operators when none does.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from infra.errors import ServiceError
from rag.models import Document, KnowledgeBase, LabelValue

MAX_ID = 2**63 - 1  # a database id; a larger integer names nothing

MAX_CONDITIONS = 50
MAX_DOC_IDS = 1000
OPERATORS = {
    "is": "=", "=": "=", "==": "=",
    "is not": "≠", "not is": "≠", "≠": "≠", "!=": "≠",
    "contains": "contains", "not contains": "not contains",
    "start with": "start with", "starts with": "start with", "end with": "end with", "ends with": "end with",
    "empty": "empty", "not empty": "not empty", "in": "in", "not in": "not in",
    ">": ">", "<": "<", "≥": "≥", ">=": "≥", "≤": "≤", "<=": "≤",
    "before": "<", "after": ">",
}
FIELD_NAMES = {"doc_id": "doc_id", "document_id": "doc_id", "title": "title", "path": "path", "source": "path",
               "document_name": "path", "docnm_kwd": "path", "url": "url", "create_time": "create_time",
               "update_time": "update_time", "kb": "kb"}


@dataclass(frozen=True, slots=True)
class Condition:
    names: tuple[str, ...]  # the condition holds when it holds for any of them (Dify may name several)
    operator: str  # canonical: one of OPERATORS' values
    value: object = None


@dataclass(frozen=True, slots=True)
class DocumentFilter:
    doc_ids: tuple = ()
    label_value_ids: tuple[int, ...] = ()
    conditions: tuple[Condition, ...] | None = None  # None: no metadata filter; (): one that matches nothing
    logic: str = "and"

    @property
    def unfiltered(self) -> bool:
        return not self.doc_ids and not self.label_value_ids and self.conditions is None


def is_id(value) -> bool:
    """A database id as the retrieval APIs take it: a positive integer, or a short string."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 1 <= value <= MAX_ID
    return isinstance(value, str) and 0 < len(value) <= 64 and (not value.isdigit() or 1 <= int(value) <= MAX_ID)


def condition_of(name, operator, value=None) -> Condition:
    """One condition as a face received it; raise `invalid_metadata_condition` when it is malformed."""
    names = tuple(name) if isinstance(name, list) else (name,)
    if not names or not all(isinstance(n, str) and 0 < len(n) <= 100 for n in names):
        raise ServiceError("invalid_metadata_condition", "A condition's name must be a field name (or a list of them).")
    canonical = OPERATORS.get(operator.strip().lower()) if isinstance(operator, str) else None
    if canonical is None:
        raise ServiceError("invalid_metadata_condition", f"Unknown comparison operator {operator!r}; use one of: "
                           + ", ".join(sorted(set(OPERATORS))) + ".")
    if canonical in ("in", "not in") and not isinstance(value, list | str):
        raise ServiceError("invalid_metadata_condition", f"{operator!r} needs a list of values.")
    if not (value is None or isinstance(value, str | int | float | bool)
            or (isinstance(value, list) and all(isinstance(v, str | int | float) for v in value))):
        raise ServiceError("invalid_metadata_condition", "A condition's value must be text, a number or a list of them.")
    return Condition(names=names, operator=canonical, value=value)


def filter_of(*, doc_ids=(), label_value_ids=(), conditions=None, logic="and") -> DocumentFilter:
    """Check a face's filter parts: `conditions` is a list of Conditions, or None for no metadata filter."""
    doc_ids = tuple(doc_ids or ())
    if len(doc_ids) > MAX_DOC_IDS or not all(is_id(d) and str(d).isdigit() for d in doc_ids):
        raise ServiceError("invalid_doc_ids", f"doc_ids must be a list of at most {MAX_DOC_IDS} document ids.")
    if logic not in ("and", "or"):
        raise ServiceError("invalid_metadata_condition", "logic must be \"and\" or \"or\".")
    if conditions is not None and len(conditions) > MAX_CONDITIONS:
        raise ServiceError("invalid_metadata_condition", f"At most {MAX_CONDITIONS} conditions.")
    return DocumentFilter(doc_ids=tuple(int(d) for d in doc_ids), label_value_ids=tuple(label_value_ids or ()),
                          conditions=tuple(conditions) if conditions is not None else None, logic=logic)


def documents_allowed(kbs: list[KnowledgeBase], document_filter: DocumentFilter) -> dict[int, set[str]] | None:
    """The paths each knowledge base may return under the filter (kb id -> paths), or None when it filters
    nothing. Unknown label values raise `label_value_not_found`."""
    if document_filter.unfiltered:
        return None
    documents = Document.objects.filter(kb__in=kbs).select_related("kb")
    if document_filter.doc_ids:
        documents = documents.filter(pk__in=document_filter.doc_ids)
    if document_filter.label_value_ids:
        values = list(LabelValue.objects.filter(pk__in=document_filter.label_value_ids))
        missing = set(document_filter.label_value_ids) - {v.pk for v in values}
        if missing:
            raise ServiceError("label_value_not_found", f"Label value {', '.join(map(str, sorted(missing)))} does not exist.",
                               status=404)
        by_label: dict[int, list[int]] = {}
        for value in values:
            by_label.setdefault(value.label_id, []).append(value.pk)
        for ids in by_label.values():  # any value of a label, every label
            documents = documents.filter(pk__in=Document.labels.through.objects.filter(value_id__in=ids)
                                         .values("document_id"))
    allowed: dict[int, set[str]] = {}
    if document_filter.conditions is not None:
        documents = [d for d in documents.prefetch_related("document_labels__value__label")
                     if _passes(d, document_filter.conditions, document_filter.logic)]
    for document in documents:
        allowed.setdefault(document.kb_id, set()).add(document.path)
    return allowed


def _passes(document: Document, conditions: tuple[Condition, ...], logic: str) -> bool:
    if not conditions:
        return False  # a metadata filter without conditions matches nothing, as RAGFlow's does
    results = (any(_holds(_values(document, name), c.operator, c.value) for name in c.names) for c in conditions)
    return all(results) if logic == "and" else any(results)


def _values(document: Document, name: str) -> list:
    field = FIELD_NAMES.get(name.lower())
    if field == "doc_id":
        return [str(document.pk)]
    if field == "create_time":
        return [document.first_seen_at.isoformat()]
    if field == "update_time":
        return [document.changed_at.isoformat()]
    if field == "kb":
        return [document.kb.slug, str(document.kb_id)]
    if field == "url":
        return [url] if (url := document_url(document)) else []
    if field is not None:
        return [getattr(document, field)]
    labelled = [row.value.value for row in document.document_labels.all() if row.value.label.name == name]
    if labelled:
        return labelled
    value = document.metadata.get(name) if isinstance(document.metadata, dict) else None
    if value is None or value == "":
        return []
    return [v for v in value if v is not None] if isinstance(value, list) else [value]


def document_url(document: Document) -> str:
    """The page's url: from its front matter, else its knowledge base's base URL plus its path."""
    if document.url:
        return document.url
    base = document.kb.base_url
    return f"{base.rstrip('/')}/{document.path}" if base else ""


def _text(value) -> str:
    return str(value).strip().lower()


def _when(value) -> datetime.datetime | None:
    try:
        when = datetime.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is not None:  # a moment: compared in UTC; a time without offset is taken as written
        when = when.astimezone(datetime.timezone.utc)
    return when.replace(tzinfo=None)


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _compare(field_value, operator: str, wanted) -> bool:
    left, right = _number(field_value), _number(wanted)
    if left is None or right is None:
        left, right = _when(field_value), _when(wanted)
        if left is None or right is None:
            return False
    return {">": left > right, "<": left < right, "≥": left >= right, "≤": left <= right}[operator]


def _holds(values: list, operator: str, wanted) -> bool:
    if operator == "empty":
        return not any(_text(v) for v in values)
    if operator == "not empty":
        return any(_text(v) for v in values)
    if operator in ("in", "not in"):
        options = {_text(w) for w in (wanted if isinstance(wanted, list) else str(wanted).split(","))}
        found = any(_text(v) in options for v in values)
        return found if operator == "in" else not found
    if operator in (">", "<", "≥", "≤"):
        return any(_compare(v, operator, wanted) for v in values)
    target = _text(wanted if wanted is not None else "")
    if operator == "=":
        return any(_text(v) == target or (_number(v) is not None and _number(v) == _number(wanted)) for v in values)
    if operator == "≠":
        return not any(_text(v) == target or (_number(v) is not None and _number(v) == _number(wanted)) for v in values)
    if operator == "contains":
        return any(target in _text(v) for v in values)
    if operator == "not contains":
        return not any(target in _text(v) for v in values)
    if operator == "start with":
        return any(_text(v).startswith(target) for v in values)
    if operator == "end with":
        return any(_text(v).endswith(target) for v in values)
    return False
