"""Front matter: splitting YAML from a Markdown page, its labels, what ingest keeps of it, and how the
documents' url, metadata and front-matter labels are recorded (admin-given labels stay)."""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rag.engine.ingest import MAX_LABELS, front_matter_labels, read_folder, split_front_matter
from rag.models import Document, DocumentLabel, Label, LabelValue
from rag.services.knowledge import kb_sync_documents
from rag.tests.conftest import make_kb

BODY = "# Lamp\n\nA Lamp lights a room.\n"


def page(front_matter: str, body: str = BODY) -> str:
    return f"---\n{front_matter}\n---\n{body}"


# -- split_front_matter --------------------------------------------------------------------------------------


def test_front_matter_is_split_from_the_body():
    meta, body = split_front_matter(page("title: Lamp\nauthor: dana\nversion: 3\ndraft: false"))

    assert meta == {"title": "Lamp", "author": "dana", "version": 3, "draft": False}
    assert body == BODY


def test_a_page_without_front_matter_comes_back_whole():
    assert split_front_matter(BODY) == ({}, BODY)


@pytest.mark.parametrize("text", [
    "\n" + page("title: Lamp"),  # not at the very top
    " " + page("title: Lamp"),
    "# Lamp\n\n---\ntitle: Lamp\n---\nmore\n",  # a rule later in the page
    "---\ntitle: Lamp\n",  # never closed
    "----\ntitle: Lamp\n----\n" + BODY,
])
def test_only_a_block_at_the_very_top_between_dashes_is_front_matter(text):
    assert split_front_matter(text) == ({}, text)


@pytest.mark.parametrize("front_matter", [
    "- one\n- two",  # a list
    "just a sentence",  # a scalar
    "42",
    "title: [unclosed",  # invalid YAML
    "title: Lamp\n  bad: indentation: here",
    "key: value\n\tkey2: tab",
])
def test_front_matter_that_is_not_a_yaml_mapping_leaves_the_page_whole(front_matter):
    text = page(front_matter)

    assert split_front_matter(text) == ({}, text)


def test_the_block_may_end_with_dots_and_use_windows_line_endings():
    dots = "---\ntitle: Lamp\n...\n" + BODY
    windows = "---\r\ntitle: Lamp\r\n---\r\n# Lamp\r\n"

    assert split_front_matter(dots) == ({"title": "Lamp"}, BODY)
    assert split_front_matter(windows) == ({"title": "Lamp"}, "# Lamp\r\n")


def test_a_page_that_is_only_front_matter_has_an_empty_body():
    assert split_front_matter("---\ntitle: Lamp\n---") == ({"title": "Lamp"}, "")


def test_dates_become_iso_strings_everywhere_in_the_front_matter():
    meta, _ = split_front_matter(page(
        "published: 2024-06-15\nreviewed: 2024-06-15 10:30:00\nhistory: [2023-01-02, 2023-05-06]\n"
        "release: {date: 2022-12-31, name: winter}\n7: seven"))

    assert meta == {"published": "2024-06-15", "reviewed": "2024-06-15T10:30:00",
                    "history": ["2023-01-02", "2023-05-06"], "release": {"date": "2022-12-31", "name": "winter"},
                    "7": "seven"}
    assert json.loads(json.dumps(meta)) == meta


def test_a_quoted_date_stays_as_written():
    meta, _ = split_front_matter(page('published: "15 June 2024"\nwhen: "2024-06-15"'))

    assert meta == {"published": "15 June 2024", "when": "2024-06-15"}
    assert isinstance(meta["when"], str)


def test_front_matter_values_are_json_safe():
    meta, _ = split_front_matter(page("tags: !!set {a, b}\nempty:\nratio: 0.5"))

    json.dumps(meta)
    assert (meta["empty"], meta["ratio"]) == (None, 0.5)
    assert isinstance(meta["tags"], str)


# -- front_matter_labels -------------------------------------------------------------------------------------


def test_labels_written_as_a_mapping():
    meta = {"labels": {"level": ["beginner", "advanced"], "product": "engine"}}

    assert front_matter_labels(meta) == [("level", "beginner"), ("level", "advanced"), ("product", "engine")]


def test_labels_written_as_a_list_of_texts_and_mappings():
    meta = {"labels": ["level: beginner", {"product": "engine"}, " audience :  artists ", {"level": ["advanced"]}]}

    assert front_matter_labels(meta) == [("level", "beginner"), ("product", "engine"), ("audience", "artists"),
                                         ("level", "advanced")]


def test_labels_from_yaml_in_both_forms():
    mapping, _ = split_front_matter(page("labels:\n  level: beginner\n  product: [engine, editor]"))
    listed, _ = split_front_matter(page('labels: ["level: beginner", {product: engine}, "product: editor"]'))

    assert front_matter_labels(mapping) == [("level", "beginner"), ("product", "engine"), ("product", "editor")]
    assert front_matter_labels(listed) == [("level", "beginner"), ("product", "engine"), ("product", "editor")]


def test_a_label_value_keeps_text_after_its_first_colon():
    assert front_matter_labels({"labels": ["see: http://example.com"]}) == [("see", "http://example.com")]


def test_numbers_become_text():
    assert front_matter_labels({"labels": {"version": [5, 2.5]}}) == [("version", "5"), ("version", "2.5")]


def test_each_label_value_counts_once_in_order():
    meta = {"labels": ["level: beginner", {"level": "beginner"}, "level:beginner", "product: engine",
                       {"level": ["advanced", "beginner"]}]}

    assert front_matter_labels(meta) == [("level", "beginner"), ("product", "engine"), ("level", "advanced")]


def test_at_most_max_labels_are_kept():
    meta = {"labels": {"tag": [f"t{i}" for i in range(MAX_LABELS + 10)]}}

    labels = front_matter_labels(meta)

    assert len(labels) == MAX_LABELS
    assert labels == [("tag", f"t{i}") for i in range(MAX_LABELS)]


def test_duplicates_do_not_use_up_the_limit():
    meta = {"labels": ["tag: same"] * 60 + [f"tag: t{i}" for i in range(MAX_LABELS - 1)]}

    labels = front_matter_labels(meta)

    assert len(labels) == MAX_LABELS
    assert labels[0] == ("tag", "same") and labels[-1] == ("tag", f"t{MAX_LABELS - 2}")


@pytest.mark.parametrize("labels", [None, "level: beginner", 5, ["no colon here"], [["level", "beginner"]],
                                    {"level": None}, {"level": {"nested": "x"}}, {"level": ""}, {"": "x"},
                                    ["level: ", ": beginner"], {"level": [None, {"a": 1}, ["x"]]}])
def test_anything_else_in_labels_is_ignored(labels):
    assert front_matter_labels({"labels": labels}) == []


def test_a_page_without_labels_has_none():
    assert front_matter_labels({}) == []
    assert front_matter_labels({"title": "Lamp"}) == []


def test_long_names_and_values_are_cut_to_the_column_sizes():
    assert front_matter_labels({"labels": {"n" * 80: "v" * 250}}) == [("n" * 64, "v" * 200)]


# -- read_folder ---------------------------------------------------------------------------------------------


def write(folder, path: str, text: str):
    target = folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(text.encode("utf-8"))
    return target


def test_ingest_strips_front_matter_from_the_text_and_keeps_it_as_meta(tmp_path):
    raw = page("title: Not this one\nurl: https://docs.example.com/lamp\nlabels: {level: beginner}")
    write(tmp_path, "Lamp.md", raw)

    [document] = read_folder(tmp_path)

    assert document.text == BODY
    assert document.meta == {"title": "Not this one", "url": "https://docs.example.com/lamp",
                             "labels": {"level": "beginner"}}
    assert document.title == "Lamp"  # the heading wins over the front matter
    assert document.content_hash == hashlib.sha1(raw.encode("utf-8")).hexdigest()


def test_the_title_falls_back_to_front_matter_then_the_file_name(tmp_path):
    write(tmp_path, "a/Lamp.md", page("title: '  Lamp Guide  '", body="Lights a room.\n"))
    write(tmp_path, "b/Clock.md", page("author: dana", body="Tracks time.\n"))
    write(tmp_path, "c/Bell.md", page("title: 5", body="Rings.\n"))
    write(tmp_path, "d/Fan.md", page("title: '   '", body="Blows.\n"))

    titles = {d.path: d.title for d in read_folder(tmp_path)}

    assert titles == {"a/Lamp.md": "Lamp Guide", "b/Clock.md": "Clock", "c/Bell.md": "Bell", "d/Fan.md": "Fan"}


def test_a_heading_inside_the_front_matter_is_not_the_title(tmp_path):
    write(tmp_path, "Lamp.md", page("note: |\n  # Not a heading", body="No heading here.\n"))

    [document] = read_folder(tmp_path)

    assert document.title == "Lamp"
    assert document.text == "No heading here.\n"


def test_the_content_hash_covers_the_front_matter_too(tmp_path):
    write(tmp_path, "Lamp.md", page("author: dana"))
    before = read_folder(tmp_path)[0]

    write(tmp_path, "Lamp.md", page("author: erin"))
    after = read_folder(tmp_path)[0]

    assert before.text == after.text
    assert before.content_hash != after.content_hash


def test_a_page_with_broken_front_matter_is_read_whole(tmp_path):
    raw = page("title: [unclosed")
    write(tmp_path, "Lamp.md", raw)

    [document] = read_folder(tmp_path)

    assert (document.text, document.meta) == (raw, {})


def test_html_pages_have_no_front_matter(tmp_path):
    write(tmp_path, "Lamp.html", "<html><body><h1>Lamp</h1><p>---</p><p>title: x</p></body></html>")

    [document] = read_folder(tmp_path)

    assert document.meta == {}
    assert document.title == "Lamp"


# -- recording documents: url, metadata, labels --------------------------------------------------------------


def document_labels(document) -> set[tuple[str, str, bool]]:
    return {(row.value.label.name, row.value.value, row.from_source)
            for row in DocumentLabel.objects.filter(document=document).select_related("value__label")}


def sync(kb, folder) -> int:
    return kb_sync_documents(kb, read_folder(folder))


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "pages"
    write(folder, "Lamp.md", page("url: https://docs.example.com/lamp\npublished: 2024-06-15\n"
                                  "labels: {level: beginner, product: [engine, editor]}"))
    write(folder, "Clock.md", "# Clock\n\nTracks time.\n")
    return folder


def test_a_new_page_records_its_url_metadata_and_labels(db, source):
    kb = make_kb(source, slug="lights")

    changed = sync(kb, source)

    lamp, clock = kb.documents.get(path="Lamp.md"), kb.documents.get(path="Clock.md")
    assert changed == 2
    assert lamp.url == "https://docs.example.com/lamp"
    assert lamp.metadata == {"url": "https://docs.example.com/lamp", "published": "2024-06-15",
                             "labels": {"level": "beginner", "product": ["engine", "editor"]}}
    assert document_labels(lamp) == {("level", "beginner", True), ("product", "engine", True),
                                     ("product", "editor", True)}
    assert (clock.url, clock.metadata, document_labels(clock)) == ("", {}, set())


def test_labels_and_values_are_created_once_and_shared(db, source):
    write(source, "Clock.md", page("labels: [\"level: beginner\", \"product: engine\"]", body="# Clock\n"))
    kb = make_kb(source, slug="lights")

    sync(kb, source)
    sync(kb, source)

    assert sorted(Label.objects.values_list("name", flat=True)) == ["level", "product"]
    assert sorted(LabelValue.objects.values_list("label__name", "value")) == [
        ("level", "beginner"), ("product", "editor"), ("product", "engine")]
    assert DocumentLabel.objects.count() == 5


def test_existing_labels_are_reused(db, source):
    level = Label.objects.create(name="level", description="How hard a page is")
    beginner = LabelValue.objects.create(label=level, value="beginner")
    kb = make_kb(source, slug="lights")

    sync(kb, source)

    lamp = kb.documents.get(path="Lamp.md")
    assert Label.objects.filter(name="level").count() == 1
    assert DocumentLabel.objects.filter(document=lamp, value=beginner, from_source=True).exists()
    assert Label.objects.get(name="level").description == "How hard a page is"


def test_reingest_replaces_front_matter_labels_but_keeps_admin_labels(db, source):
    kb = make_kb(source, slug="lights")
    sync(kb, source)
    lamp = kb.documents.get(path="Lamp.md")
    audience = LabelValue.objects.create(label=Label.objects.create(name="audience"), value="artists")
    DocumentLabel.objects.create(document=lamp, value=audience, from_source=False)
    write(source, "Lamp.md", page("url: https://docs.example.com/lamp-v2\nlabels: {level: advanced, product: engine}"))

    changed = sync(kb, source)

    lamp.refresh_from_db()
    assert changed == 1
    assert lamp.pk == kb.documents.get(path="Lamp.md").pk  # updated in place
    assert lamp.url == "https://docs.example.com/lamp-v2"
    assert lamp.metadata == {"url": "https://docs.example.com/lamp-v2",
                             "labels": {"level": "advanced", "product": "engine"}}
    assert document_labels(lamp) == {("level", "advanced", True), ("product", "engine", True),
                                     ("audience", "artists", False)}


def test_an_admin_label_that_front_matter_also_names_stays_the_admins(db, source):
    kb = make_kb(source, slug="lights")
    sync(kb, source)
    lamp = kb.documents.get(path="Lamp.md")
    artists = LabelValue.objects.create(label=Label.objects.create(name="audience"), value="artists")
    DocumentLabel.objects.create(document=lamp, value=artists, from_source=False)
    write(source, "Lamp.md", page("labels: {audience: artists}"))
    sync(kb, source)

    write(source, "Lamp.md", page("author: dana"))
    sync(kb, source)

    assert document_labels(lamp) == {("audience", "artists", False)}


def test_removing_the_front_matter_clears_its_labels_and_url(db, source):
    kb = make_kb(source, slug="lights")
    sync(kb, source)

    write(source, "Lamp.md", BODY)
    sync(kb, source)

    lamp = kb.documents.get(path="Lamp.md")
    assert (lamp.url, lamp.metadata, document_labels(lamp)) == ("", {}, set())


def test_an_unchanged_page_keeps_its_labels_and_counts_as_unchanged(db, source):
    kb = make_kb(source, slug="lights")
    sync(kb, source)
    before = document_labels(kb.documents.get(path="Lamp.md"))
    rows = set(DocumentLabel.objects.values_list("pk", flat=True))

    changed = sync(kb, source)

    assert changed == 0
    assert document_labels(kb.documents.get(path="Lamp.md")) == before
    assert set(DocumentLabel.objects.values_list("pk", flat=True)) == rows


def test_a_page_recorded_before_front_matter_was_read_gets_its_metadata(db, source):
    kb = make_kb(source, slug="lights")
    [clock, lamp] = read_folder(source)
    Document.objects.create(kb=kb, path="Lamp.md", title=lamp.title, content_hash=lamp.content_hash,
                            size=len(lamp.text), changed_at=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc))

    changed = sync(kb, source)

    row = kb.documents.get(path="Lamp.md")
    assert changed == 1  # only Clock.md is new; Lamp.md's content is as recorded
    assert row.changed_at == datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    assert (row.url, row.metadata) == ("https://docs.example.com/lamp", lamp.meta)
    assert {name for name, _, _ in document_labels(row)} == {"level", "product"}


def test_a_url_that_is_not_text_is_ignored(db, tmp_path):
    write(tmp_path, "Lamp.md", page("url: 5"))
    write(tmp_path, "Clock.md", page("url: [a, b]"))
    kb = make_kb(tmp_path, slug="lights")

    sync(kb, tmp_path)

    assert set(kb.documents.values_list("url", flat=True)) == {""}
    assert kb.documents.get(path="Lamp.md").metadata == {"url": 5}


def test_a_removed_page_loses_its_document_and_labels(db, source):
    kb = make_kb(source, slug="lights")
    sync(kb, source)

    (source / "Lamp.md").unlink()
    changed = sync(kb, source)

    assert changed == 1
    assert list(kb.documents.values_list("path", flat=True)) == ["Clock.md"]
    assert DocumentLabel.objects.count() == 0
    assert LabelValue.objects.filter(label__name="level", value="beginner").exists()  # values outlive documents


def test_the_labelled_fixture_pages_are_recorded_with_their_front_matter(db, tmp_path):
    folder = tmp_path / "alpha"
    shutil.copytree(Path(__file__).resolve().parents[2] / "retrieval" / "tests" / "fixtures" / "alpha", folder)
    kb = make_kb(folder, slug="alpha")

    sync(kb, folder)

    scene, mesh, timer = (kb.documents.get(path=p) for p in ("Scene.md", "Mesh.md", "Timer.md"))
    assert scene.url == "https://docs.example.com/engine/Scene"
    assert document_labels(scene) == {("level", "beginner", True), ("product", "engine", True),
                                      ("product", "editor", True)}
    assert document_labels(mesh) == {("level", "beginner", True), ("product", "engine", True)}
    assert mesh.metadata["published"] == "2024-06-15"
    assert (timer.metadata, document_labels(timer)) == ({}, set())
