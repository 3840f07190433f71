"""Document filters of the retrieval APIs (R5): parsing a face's conditions, which documents a filter keeps
(doc ids, label values, metadata conditions with and/or), a document's url, and each operator's meaning."""

from __future__ import annotations

import datetime

import pytest

from infra.errors import ServiceError
from rag.models import Document, DocumentLabel, KnowledgeBase, Label, LabelValue
from rag.services.filters import (
    MAX_CONDITIONS,
    MAX_DOC_IDS,
    OPERATORS,
    Condition,
    _holds,
    condition_of,
    document_url,
    documents_allowed,
    filter_of,
)

UTC = datetime.timezone.utc
CREATED = datetime.datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
CHANGED = datetime.datetime(2024, 9, 1, 9, 0, tzinfo=UTC)


def make_kb(slug: str, base_url: str = "") -> KnowledgeBase:
    return KnowledgeBase.objects.create(slug=slug, name=slug, source_dir=f"/nowhere/{slug}", base_url=base_url)


def label_value(name: str, value: str) -> LabelValue:
    label, _ = Label.objects.get_or_create(name=name)
    return LabelValue.objects.get_or_create(label=label, value=value)[0]


def make_document(kb, path: str, *, title: str = "", url: str = "", metadata: dict | None = None,
                  labels: tuple[tuple[str, str], ...] = (), from_source: bool = True) -> Document:
    document = Document.objects.create(kb=kb, path=path, title=title or path, url=url, metadata=metadata or {},
                                       content_hash="0" * 40, changed_at=CHANGED)
    Document.objects.filter(pk=document.pk).update(first_seen_at=CREATED)  # fixed, not the wall clock
    for name, value in labels:
        DocumentLabel.objects.create(document=document, value=label_value(name, value), from_source=from_source)
    document.refresh_from_db()
    return document


@pytest.fixture
def library(db):
    """Two knowledge bases: `engine` (three labelled pages with front matter) and `viewer` (one page)."""
    engine = make_kb("engine", base_url="https://docs.example.com/engine/")
    viewer = make_kb("viewer")
    documents = {
        "mesh": make_document(engine, "Mesh.md", title="Mesh", labels=(("level", "beginner"), ("product", "engine")),
                              metadata={"author": "Bob", "published": "2024-06-15", "version": 5,
                                        "tags": ["geometry", "Drawing"]}),
        "scene": make_document(engine, "Scene.md", title="Scene", url="https://elsewhere.example.org/scene",
                               labels=(("level", "beginner"), ("product", "engine"), ("product", "editor")),
                               metadata={"author": "alice", "published": "2024-05-01", "version": 10}),
        "shader": make_document(engine, "guide/Shader.md", title="Shader Guide",
                                labels=(("level", "advanced"), ("product", "engine")),
                                metadata={"author": "carol", "published": "2025-01-20T08:30:00Z", "version": 7,
                                          "draft": ""}),
        "camera": make_document(viewer, "Camera.md", title="相机", labels=(("level", "advanced"), ("product", "viewer")),
                                metadata={"author": "erin"}),
    }
    return engine, viewer, documents


def allowed(kbs, **parts) -> dict | None:
    return documents_allowed(kbs, filter_of(**parts))


def paths(kbs, *conditions, logic="and") -> set[str]:
    """The paths the metadata conditions keep across the knowledge bases."""
    found = allowed(kbs, conditions=[condition_of(*c) for c in conditions], logic=logic)
    return set().union(*found.values()) if found else set()


# -- condition_of --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling, canonical", sorted(OPERATORS.items()))
def test_every_operator_spelling_maps_to_its_canonical_operator(spelling, canonical):
    value = ["a"] if canonical in ("in", "not in") else "a"

    assert condition_of("author", spelling, value).operator == canonical


@pytest.mark.parametrize("spelling, canonical", [
    ("is", "="), ("=", "="), ("is not", "≠"), ("not is", "≠"), ("!=", "≠"), ("≠", "≠"), (" IS NOT ", "≠"),
    ("Contains", "contains"), ("not contains", "not contains"), ("starts with", "start with"),
    ("ENDS WITH", "end with"), ("empty", "empty"), ("not empty", "not empty"), (">=", "≥"), ("≤", "≤"),
    ("before", "<"), ("after", ">"),
])
def test_ragflow_and_dify_spellings_are_accepted_in_any_case(spelling, canonical):
    assert condition_of("published", spelling, "x").operator == canonical


def test_a_condition_keeps_its_names_and_value():
    assert condition_of(["author", "owner"], "in", ["alice", 3]) == Condition(
        names=("author", "owner"), operator="in", value=["alice", 3])
    assert condition_of("version", ">", 4) == Condition(names=("version",), operator=">", value=4)
    assert condition_of("draft", "empty") == Condition(names=("draft",), operator="empty", value=None)


@pytest.mark.parametrize("name, operator, value", [
    ("author", "like", "a"),  # no such operator
    ("author", "", "a"),
    ("author", None, "a"),
    ("author", 5, "a"),
    ("author", ["is"], "a"),  # an operator a JSON body sent as a list
    ("author", {"op": "is"}, "a"),
    ("", "is", "a"),
    ("x" * 101, "is", "a"),
    ([], "is", "a"),
    (["author", ""], "is", "a"),
    (5, "is", "a"),
    (None, "is", "a"),
    ("author", "in", 5),  # in needs a list
    ("author", "not in", None),
    ("author", "is", {"a": 1}),
    ("author", "is", ["a", {"b": 1}]),
    ("author", "in", [["nested"]]),
])
def test_a_malformed_condition_is_refused(name, operator, value):
    with pytest.raises(ServiceError) as raised:
        condition_of(name, operator, value)

    assert raised.value.code == "invalid_metadata_condition"


def test_a_name_of_a_hundred_characters_is_accepted():
    assert condition_of("x" * 100, "is", "a").names == ("x" * 100,)


# -- filter_of -----------------------------------------------------------------------------------------------


def test_doc_ids_may_be_numbers_or_digit_strings():
    document_filter = filter_of(doc_ids=[3, "17", 4])

    assert document_filter.doc_ids == (3, 17, 4)
    assert not document_filter.unfiltered


@pytest.mark.parametrize("doc_ids", [["abc"], [True], [1.5], ["-1"], [None], ["12a"], list(range(1, MAX_DOC_IDS + 2))])
def test_malformed_doc_ids_are_refused(doc_ids):
    with pytest.raises(ServiceError) as raised:
        filter_of(doc_ids=doc_ids)

    assert raised.value.code == "invalid_doc_ids"


def test_a_thousand_doc_ids_are_accepted():
    assert len(filter_of(doc_ids=list(range(1, MAX_DOC_IDS + 1))).doc_ids) == MAX_DOC_IDS


@pytest.mark.parametrize("logic", ["AND", "xor", "", None])
def test_logic_is_and_or_or(logic):
    with pytest.raises(ServiceError) as raised:
        filter_of(conditions=[condition_of("author", "is", "a")], logic=logic)

    assert raised.value.code == "invalid_metadata_condition"


def test_at_most_fifty_conditions():
    condition = condition_of("author", "is", "a")

    assert len(filter_of(conditions=[condition] * MAX_CONDITIONS).conditions) == MAX_CONDITIONS
    with pytest.raises(ServiceError) as raised:
        filter_of(conditions=[condition] * (MAX_CONDITIONS + 1))
    assert raised.value.code == "invalid_metadata_condition"


def test_no_parts_filter_nothing_but_an_empty_condition_list_is_a_filter():
    assert filter_of().unfiltered
    assert filter_of(conditions=None, doc_ids=None, label_value_ids=None).unfiltered
    assert filter_of(conditions=[]).conditions == ()
    assert not filter_of(conditions=[]).unfiltered


# -- documents_allowed ---------------------------------------------------------------------------------------


def test_no_filter_allows_everything(library):
    engine, viewer, _ = library

    assert allowed([engine, viewer]) is None


def test_doc_ids_keep_those_documents_of_the_searched_bases(library):
    engine, viewer, documents = library
    ids = [documents["mesh"].pk, str(documents["shader"].pk), documents["camera"].pk]

    result = allowed([engine], doc_ids=ids)

    assert result == {engine.pk: {"Mesh.md", "guide/Shader.md"}}


def test_doc_ids_of_no_document_leave_nothing(library):
    engine, viewer, _ = library

    assert allowed([engine, viewer], doc_ids=[999999]) == {}


def test_label_values_of_one_label_match_any_of_them(library):
    engine, viewer, _ = library
    ids = [label_value("product", "editor").pk, label_value("product", "viewer").pk]

    result = allowed([engine, viewer], label_value_ids=ids)

    assert result == {engine.pk: {"Scene.md"}, viewer.pk: {"Camera.md"}}


def test_label_values_of_several_labels_must_all_match(library):
    engine, viewer, _ = library
    ids = [label_value("level", "beginner").pk, label_value("product", "editor").pk,
           label_value("product", "engine").pk]

    result = allowed([engine, viewer], label_value_ids=ids)

    # level: beginner (Mesh, Scene) and product: editor or engine (Mesh, Scene, Shader)
    assert result == {engine.pk: {"Mesh.md", "Scene.md"}}


def test_label_values_no_document_carries_together_leave_nothing(library):
    engine, viewer, _ = library
    ids = [label_value("level", "advanced").pk, label_value("product", "editor").pk]

    assert allowed([engine, viewer], label_value_ids=ids) == {}


def test_an_unknown_label_value_is_not_found(library):
    engine, _, _ = library
    known = label_value("level", "beginner").pk

    with pytest.raises(ServiceError) as raised:
        allowed([engine], label_value_ids=[known, 987654])

    assert (raised.value.code, raised.value.status) == ("label_value_not_found", 404)
    assert "987654" in raised.value.message


def test_admin_given_labels_filter_like_front_matter_ones(library):
    engine, _, documents = library
    DocumentLabel.objects.create(document=documents["shader"], value=label_value("audience", "artists"),
                                 from_source=False)

    result = allowed([engine], label_value_ids=[label_value("audience", "artists").pk])

    assert result == {engine.pk: {"guide/Shader.md"}}


def test_conditions_joined_by_and_must_all_hold(library):
    engine, viewer, _ = library

    found = paths([engine, viewer], ("level", "is", "beginner"), ("author", "is", "alice"))

    assert found == {"Scene.md"}


def test_conditions_joined_by_or_need_one_to_hold(library):
    engine, viewer, _ = library

    found = paths([engine, viewer], ("author", "is", "alice"), ("level", "is", "advanced"), logic="or")

    assert found == {"Scene.md", "guide/Shader.md", "Camera.md"}


def test_a_metadata_filter_without_conditions_matches_nothing(library):
    engine, viewer, documents = library

    assert allowed([engine, viewer], conditions=[]) == {}
    assert allowed([engine, viewer], conditions=[], logic="or") == {}
    assert allowed([engine, viewer], conditions=[], doc_ids=[documents["mesh"].pk]) == {}


def test_doc_ids_labels_and_conditions_combine(library):
    engine, viewer, documents = library
    ids = [d.pk for d in documents.values()]

    result = allowed([engine, viewer], doc_ids=ids, label_value_ids=[label_value("product", "engine").pk],
                     conditions=[condition_of("version", ">", 6)])

    assert result == {engine.pk: {"Scene.md", "guide/Shader.md"}}


def test_a_condition_with_several_names_holds_when_any_name_does(library):
    engine, viewer, _ = library

    found = paths([engine, viewer], (["owner", "author"], "is", "erin"))

    assert found == {"Camera.md"}


def test_built_in_fields_come_before_labels_and_front_matter(library):
    engine, _, documents = library
    make_document(engine, "Odd.md", title="Real title", metadata={"title": "Front matter title", "author": "zed"},
                  labels=(("author", "yan"),))

    assert paths([engine], ("title", "is", "real title")) == {"Odd.md"}
    assert paths([engine], ("title", "is", "front matter title")) == set()
    assert paths([engine], ("author", "is", "yan")) == {"Odd.md"}  # the label, not the front matter
    assert paths([engine], ("author", "is", "zed")) == set()


@pytest.mark.parametrize("name", ["path", "source", "document_name", "docnm_kwd", "PATH"])
def test_the_path_has_several_names(library, name):
    engine, _, _ = library

    assert paths([engine], (name, "start with", "guide/")) == {"guide/Shader.md"}


def test_doc_id_and_document_id_name_the_document(library):
    engine, _, documents = library

    assert paths([engine], ("doc_id", "is", documents["mesh"].pk)) == {"Mesh.md"}
    assert paths([engine], ("document_id", "in", [str(documents["scene"].pk)])) == {"Scene.md"}


def test_kb_is_matched_by_slug_or_id(library):
    engine, viewer, _ = library

    assert paths([engine, viewer], ("kb", "is", "viewer")) == {"Camera.md"}
    assert paths([engine, viewer], ("kb", "is", viewer.pk)) == {"Camera.md"}


def test_create_and_update_time_are_dates(library):
    engine, _, _ = library
    every = {"Mesh.md", "Scene.md", "guide/Shader.md"}

    assert paths([engine], ("create_time", "after", "2024-02-01")) == every
    assert paths([engine], ("create_time", "before", "2024-02-01")) == set()
    assert paths([engine], ("update_time", ">", "2024-08-31T23:00:00Z")) == every
    assert paths([engine], ("update_time", "<", "2024-08-31T23:00:00Z")) == set()


def test_url_is_front_matter_or_base_url_plus_path(library):
    engine, viewer, _ = library

    assert paths([engine], ("url", "is", "https://elsewhere.example.org/scene")) == {"Scene.md"}
    assert paths([engine], ("url", "is", "https://docs.example.com/engine/guide/Shader.md")) == {"guide/Shader.md"}
    assert paths([viewer], ("url", "empty")) == {"Camera.md"}


def test_a_front_matter_list_matches_any_item(library):
    engine, _, _ = library

    assert paths([engine], ("tags", "is", "drawing")) == {"Mesh.md"}
    assert paths([engine], ("tags", "not contains", "geo")) == {"Scene.md", "guide/Shader.md"}


def test_a_field_a_document_lacks_is_empty(library):
    engine, viewer, _ = library

    assert paths([engine, viewer], ("draft", "empty")) == {"Mesh.md", "Scene.md", "guide/Shader.md", "Camera.md"}
    assert paths([engine, viewer], ("nonexistent", "not empty")) == set()
    assert paths([engine, viewer], ("nonexistent", "is not", "x")) == {"Mesh.md", "Scene.md", "guide/Shader.md",
                                                                       "Camera.md"}


def test_numbers_compare_as_numbers_not_text(library):
    engine, viewer, _ = library

    assert paths([engine, viewer], ("version", ">", 6)) == {"Scene.md", "guide/Shader.md"}
    assert paths([engine, viewer], ("version", "≤", "7")) == {"Mesh.md", "guide/Shader.md"}
    assert paths([engine, viewer], ("version", "=", "10.0")) == {"Scene.md"}


def test_front_matter_dates_compare_as_dates(library):
    engine, viewer, _ = library

    assert paths([engine, viewer], ("published", "after", "2024-06-01")) == {"Mesh.md", "guide/Shader.md"}
    assert paths([engine, viewer], ("published", "before", "2024-06-01")) == {"Scene.md"}
    assert paths([engine, viewer], ("published", "<", "2025-01-20T09:00:00")) == {"Mesh.md", "Scene.md",
                                                                                "guide/Shader.md"}


# -- document_url --------------------------------------------------------------------------------------------


def test_document_url_prefers_the_front_matter(library):
    _, _, documents = library

    assert document_url(documents["scene"]) == "https://elsewhere.example.org/scene"


def test_document_url_joins_the_base_url_and_the_path(library):
    engine, _, documents = library
    engine.base_url = "https://docs.example.com/engine"  # no trailing slash
    engine.save(update_fields=["base_url"])
    shader = Document.objects.select_related("kb").get(pk=documents["shader"].pk)

    assert document_url(documents["mesh"]) == "https://docs.example.com/engine/Mesh.md"
    assert document_url(shader) == "https://docs.example.com/engine/guide/Shader.md"


def test_document_url_is_empty_without_either(library):
    _, _, documents = library

    assert document_url(documents["camera"]) == ""


# -- each operator (_holds) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("values, operator, wanted, expected", [
    # is / is not: case-insensitive text, or equal numbers; several values: any / none
    (["Alice"], "=", "alice", True),
    ([" alice "], "=", "ALICE", True),
    (["alice"], "=", "alic", False),
    (["5"], "=", 5, True),
    ([5], "=", "5.0", True),
    ([5.5], "=", 5, False),
    (["bob", "alice"], "=", "alice", True),
    ([], "=", "alice", False),
    (["Alice"], "≠", "alice", False),
    (["bob"], "≠", "alice", True),
    (["bob", "alice"], "≠", "alice", False),
    (["7"], "≠", 7.0, False),
    ([], "≠", "alice", True),
    # contains / not contains / start with / end with: case-insensitive
    (["Shadow Map"], "contains", "ow m", True),
    (["Shadow Map"], "contains", "xyz", False),
    (["one", "Two"], "contains", "tw", True),
    (["Shadow Map"], "not contains", "MAP", False),
    (["Shadow Map"], "not contains", "light", True),
    (["one", "two"], "not contains", "tw", False),
    ([], "not contains", "x", True),
    (["Shadow Map"], "start with", "shad", True),
    (["Shadow Map"], "start with", "map", False),
    (["Shadow Map"], "end with", " MAP", True),
    (["Shadow Map"], "end with", "shadow", False),
    (["x", "version-7"], "end with", 7, True),
    # empty / not empty: blank text counts as empty
    ([], "empty", None, True),
    (["", "  "], "empty", None, True),
    (["x"], "empty", None, False),
    ([0], "empty", None, False),
    ([], "not empty", None, False),
    ([" "], "not empty", None, False),
    (["", "x"], "not empty", None, True),
    # in / not in: a list, or a comma-separated text
    (["Beginner"], "in", ["beginner", "advanced"], True),
    (["expert"], "in", ["beginner", "advanced"], False),
    (["expert", "advanced"], "in", ["beginner", "advanced"], True),
    (["advanced"], "in", "beginner, Advanced", True),
    ([3], "in", [1, 2, 3], True),
    ([], "in", ["a"], False),
    (["expert"], "not in", ["beginner", "advanced"], True),
    (["Advanced"], "not in", ["beginner", "advanced"], False),
    (["expert", "advanced"], "not in", "advanced", False),
    ([], "not in", ["a"], True),
    # > < ≥ ≤: numbers, not text order
    (["10"], ">", 9, True),
    (["10"], "<", "9", False),
    ([9.5], "<", "10", True),
    (["3"], "≥", 3, True),
    (["3"], "≤", 3.0, True),
    (["3"], ">", 3, False),
    (["3"], "<", 3, False),
    (["1", "20"], ">", 10, True),
    (["abc"], ">", 1, False),
    ([True], ">", 0, False),
    ([], ">", 0, False),
    # before / after (< / >) and ≥ ≤: ISO dates when both sides are dates
    (["2024-06-15"], ">", "2024-06-01", True),
    (["2024-06-15"], "<", "2024-06-01", False),
    (["2024-06-15"], "<", "2024-12-01", True),
    (["2024-06-15"], "≥", "2024-06-15", True),
    (["2024-06-15"], "≤", "2024-06-14", False),
    (["2024-06-15T10:00:00Z"], ">", "2024-06-15", True),
    (["2024-06-15T10:00:00"], "<", "2024-06-15T10:00:01", True),
    (["2023-12-31"], "<", "2024-01-01", True),
    (["2024-06-15"], ">", "not a date", False),
    (["2024-06-15"], ">", 5, False),
    (["soon"], "<", "2024-06-01", False),
])
def test_an_operator_means_what_the_filter_docs_say(values, operator, wanted, expected):
    assert _holds(values, operator, wanted) is expected


def test_dates_with_offsets_compare_as_moments():
    # 10:00 at +02:00 is 08:00 UTC: an hour before 09:00 UTC.
    assert _holds(["2024-06-15T10:00:00+02:00"], "<", "2024-06-15T09:00:00Z") is True
    assert _holds(["2024-06-15T10:00:00+02:00"], ">", "2024-06-15T09:00:00Z") is False


@pytest.mark.parametrize("values", [["alpha"], ["Beta", "gamma"], [], ["", "x"], ["7"], [3.0]])
@pytest.mark.parametrize("positive, negative, wanted", [
    ("=", "≠", "beta"), ("=", "≠", 7), ("contains", "not contains", "a"), ("in", "not in", ["alpha", "3"]),
    ("empty", "not empty", None),
])
def test_each_negative_operator_is_the_opposite_of_its_positive(values, positive, negative, wanted):
    assert _holds(values, negative, wanted) is (not _holds(values, positive, wanted))


@pytest.mark.parametrize("left, right", [(1, 2), (2, 2), (3, 2), ("2024-01-01", "2024-01-02"),
                                         ("2024-01-02", "2024-01-02"), ("2025-05-05", "2024-01-02")])
def test_the_comparisons_agree_with_each_other(left, right):
    less, greater = _holds([left], "<", right), _holds([left], ">", right)
    at_most, at_least = _holds([left], "≤", right), _holds([left], "≥", right)

    assert at_most == (less or not greater) and at_least == (greater or not less)
    assert not (less and greater)
