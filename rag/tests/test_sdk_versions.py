"""Issue 32: SDK versions side by side. The engine's order, catalog diff and notes on the fixture SDK written in
rag/tests/sdk_fixture.py; then three versions built from the shell and asked through the question service and
the CLI (the web, MCP, CG_RAG and retrieval faces have their own tests beside them)."""

from __future__ import annotations

import pytest

from infra.errors import ServiceError
from rag.engine.ingest import read_folder
from rag.engine.sdk import CatalogDiffer, VersionNotes, api_catalog, newest_release, ordered
from rag.models import Channel, KnowledgeBase, RequestRecord
from rag.services.questions import QuestionRequest, question_answer, question_search
from rag.tests.sdk_fixture import CHANGES, VERSIONS, write_versions
from rag.tests.test_cli import run_json, run_json_failure


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory):
    folders = write_versions(tmp_path_factory.mktemp("sdk"))
    return {version: api_catalog(read_folder(folder)) for version, folder in folders.items()}


# -- order ------------------------------------------------------------------------------------------------


def test_release_numbers_are_ordered_as_releases_and_names_are_kept_as_written():
    assert ordered(["2.0", "1.10", "1.4", "v1.9"]) == ["1.4", "v1.9", "1.10", "2.0"]
    assert ordered(["2.0.0-beta.3", "2.0.0", "1.20"]) == ["1.20", "2.0.0-beta.3", "2.0.0"]


def test_names_that_are_not_releases_follow_the_admins_order():
    assert ordered(["r160", "r150", "r155"], {"r150": 0, "r155": 1, "r160": 2}) == ["r150", "r155", "r160"]


def test_latest_is_the_newest_release_not_a_preview():
    assert newest_release(["1.4", "2.0", "2.1.0rc1"]) == "2.0"
    assert newest_release(["3.0a1", "3.0b2"]) == "3.0b2"


# -- the diff ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("older, newer", [("1.4", "2.0"), ("2.0", "2.1")])
def test_the_diff_finds_every_change_the_fixture_made_and_nothing_else(catalogs, older, newer):
    diff = CatalogDiffer().run(older, catalogs[older], newer, catalogs[newer])
    expected = CHANGES[(older, newer)]
    assert set(diff.added) == expected["added"]
    assert set(diff.removed) == expected["removed"]
    assert set(diff.renamed) == expected["renamed"]
    assert {member for member, _, _ in diff.signature_changed} == expected["signature_changed"]
    assert set(diff.classes_added) == expected["classes_added"]
    assert set(diff.classes_removed) == expected["classes_removed"]


def test_a_class_whose_page_stayed_under_a_new_name_is_renamed_with_its_members(catalogs):
    renamed = {"classes": {"Stage" if name == "Viewer" else name: entry
                           for name, entry in catalogs["2.0"]["classes"].items()}}
    diff = CatalogDiffer().run("2.0", catalogs["2.0"], "2.0-renamed", renamed)
    assert diff.classes_renamed == (("Viewer", "Stage"),)
    assert not diff.added and not diff.removed and not diff.classes_added and not diff.classes_removed


# -- notes ------------------------------------------------------------------------------------------------


def notes_over(catalogs) -> VersionNotes:
    versions = list(VERSIONS)
    diffs = [CatalogDiffer().run(a, catalogs[a], b, catalogs[b]) for a, b in zip(versions, versions[1:])]
    return VersionNotes(catalogs=[(v, catalogs[v]) for v in versions], diffs=diffs)


def test_a_member_added_later_is_named_with_the_version_that_added_it(catalogs):
    (note,) = notes_over(catalogs).run("How do I use setAnimationLoop?", "1.4")
    assert (note.kind, note.since, note.documented_as) == ("added", "2.0", "Viewer.setAnimationLoop")
    assert note.text(chinese=False) == ("`setAnimationLoop` was added in 2.0; you asked about 1.4, which does not "
                                        "have it.")


def test_a_removed_member_points_at_its_replacement(catalogs):
    (note,) = notes_over(catalogs).run("how to use loop()", "2.1")
    assert (note.kind, note.since, note.replacement) == ("removed", "2.0", "Viewer.setAnimationLoop")
    (note,) = notes_over(catalogs).run("CameraRig.reset() 怎么用", "2.1")
    assert note.replacement == "CameraRig.restore"
    assert note.text(chinese=True).startswith("`CameraRig.reset` 在 2.1 版本中移除（最后见于 2.0），由 `CameraRig.restore` 取代")


def test_a_removed_member_without_a_replacement_and_a_removed_class(catalogs):
    (note,) = notes_over(catalogs).run("Viewer.dispose() frees what?", "2.1")
    assert (note.kind, note.since, note.replacement, note.versions) == ("removed", "2.1", "", ("1.4", "2.0"))
    (note,) = notes_over(catalogs).run("How does ImageLoader load an image?", "2.0")
    assert (note.kind, note.documented_as) == ("removed", "ImageLoader")


def test_names_the_asked_version_documents_and_plain_words_get_no_note(catalogs):
    notes = notes_over(catalogs)
    assert notes.run("How do I use setAnimationLoop?", "2.1") == ()
    assert notes.run("how do I loop and dispose the viewer", "2.1") == ()  # prose, not code
    assert notes.run("What is MadeUpThing?", "2.1") == ()  # documented nowhere: not a version's business


# -- three versions served side by side ---------------------------------------------------------------------


@pytest.fixture
def sdk(db, tmp_path):
    folders = write_versions(tmp_path / "sdk")
    reports = {version: run_json("reindex", "--kb", "fx", "--sdk-version", version, "--source", str(folders[version]))
               for version in ("2.0", "1.4", "2.1")}  # added out of order: the order is the releases'
    return reports


def test_reindex_builds_each_version_as_its_own_knowledge_base_with_its_changes(sdk):
    assert sdk["2.1"]["kb"] == "fx@2.1" and sdk["2.1"]["sdk_version"] == "2.1"
    assert sdk["2.1"]["sdk_changes"] == {"since": "2.0", "classes_added": 1, "classes_removed": 0,
                                         "classes_renamed": 0, "added": 1, "removed": 1, "renamed": 1,
                                         "signature_changed": 1}
    assert sdk["1.4"]["sdk_changes"] is None  # the oldest has nothing before it
    listed = run_json("versions", "--kb", "fx")
    assert listed["default"] == "2.1"
    assert [v["version"] for v in listed["versions"]] == ["1.4", "2.0", "2.1"]
    assert listed["versions"][2]["aliases"] == ["latest"]
    diff = run_json("versions", "--kb", "fx", "--diff", "1.4", "latest")["diff"]
    assert ["Viewer.loop", "Viewer.setAnimationLoop"] in diff["renamed"]
    assert KnowledgeBase.objects.get(slug="fx").sdk_versions.count() == 3


def ask(question: str, **fields):
    return question_search(QuestionRequest(question=question, kb="fx", channel=Channel.CLI, **fields))


def test_a_question_reads_latest_unless_it_names_a_version_and_says_which_it_read(sdk):
    assert (ask("setSize updateStyle").sdk_version, ask("setSize", sdk_version="2.0").sdk_version) == ("2.1", "2.0")
    outcome = question_search(QuestionRequest(question="setSize", kb="fx@1.4", channel=Channel.CLI))
    assert (outcome.kb, outcome.sdk, outcome.sdk_version) == ("fx@1.4", "fx", "1.4")
    assert all(hit.chunk.class_name != "Timer" for hit in outcome.result.hits)  # 1.4 has no Timer page
    records = list(RequestRecord.objects.order_by("id").values_list("kb", flat=True))
    assert records == ["fx@2.1", "fx@2.0", "fx@1.4"]  # traffic is counted per version


def test_a_version_that_is_not_indexed_is_refused_with_the_ones_that_are(sdk):
    with pytest.raises(ServiceError) as raised:
        ask("setSize", sdk_version="3.0")
    assert raised.value.code == "sdk_version_not_found" and raised.value.status == 404
    assert raised.value.details["versions"] == ["1.4", "2.0", "2.1"]
    assert "1.4, 2.0, 2.1" in raised.value.message
    with pytest.raises(ServiceError) as raised:
        ask("setSize", sdk_version="2.0; rm -rf")
    assert raised.value.code == "invalid_sdk_version"
    failed = RequestRecord.objects.order_by("id").values_list("error_code", flat=True)
    assert list(failed) == ["sdk_version_not_found", "invalid_sdk_version"]  # recorded like every failure


def test_an_answer_about_an_older_version_says_what_it_lacks_in_its_first_line(sdk):
    outcome = question_answer(QuestionRequest(question="How do I use captureFrame?", kb="fx", sdk_version="2.0",
                                              channel=Channel.CLI))
    assert outcome.sdk_version == "2.0"
    assert outcome.answer.text.startswith("`captureFrame` was added in 2.1; you asked about 2.0")
    assert [note.kind for note in outcome.version_notes] == ["added"]
    # the version that has it is quoted, labelled with its version; its chunk is never mixed into the evidence
    (note,) = outcome.version_notes
    assert (note.nearest, note.evidence.member) == ("2.1", "captureFrame")
    assert "\n\n> In 2.1 (Viewer.md#" in outcome.answer.text and "PNG data URL" in outcome.answer.text
    assert all(hit.chunk.member != "captureFrame" for hit in outcome.result.hits)


def test_the_cli_asks_a_version_and_an_alias_an_admin_gave(sdk, tmp_path):
    folders = write_versions(tmp_path / "again")
    run_json("reindex", "--kb", "fx", "--sdk-version", "2.0", "--sdk-alias", "stable", "--source", str(folders["2.0"]))
    search = run_json("search", "how do I resize the canvas", "--kb", "fx", "--sdk-version", "stable")
    assert (search["kb"], search["sdk_version"]) == ("fx@2.0", "2.0")
    failure = run_json_failure("ask", "what is Viewer", "--kb", "fx", "--sdk-version", "9")
    assert failure["code"] == "sdk_version_not_found"


def test_an_sdk_without_pages_of_its_own_cannot_be_built_without_a_version(sdk):
    failure = run_json_failure("reindex", "--kb", "fx")
    assert failure["code"] == "source_not_found" and "--sdk-version" in failure["error"]


def test_the_admin_adds_a_version_whose_slug_follows_from_its_sdk_and_version(sdk, tmp_path):
    from rag.admin import KnowledgeBaseForm

    folder = write_versions(tmp_path / "admin")["2.1"]
    parent = KnowledgeBase.objects.get(slug="fx")
    form = KnowledgeBaseForm(data={"slug": "", "name": "fx 3.0 preview", "language": "en", "source_dir": str(folder),
                                   "sdk": parent.pk, "sdk_version": "3.0.0-beta.1", "sdk_aliases": '["next"]',
                                   "sdk_order": 3})
    assert form.is_valid(), form.errors
    row = form.save()
    assert (row.slug, row.sdk_version, row.sdk_aliases) == ("fx@3.0.0-beta.1", "3.0.0-beta.1", ["next"])
    bad = KnowledgeBaseForm(data={"slug": "", "language": "en", "source_dir": str(folder), "sdk": parent.pk,
                                  "sdk_version": "3.0 beta", "sdk_aliases": "[]", "sdk_order": 0})
    assert not bad.is_valid()


def test_each_version_is_synced_from_its_own_git_tag_and_syncing_one_leaves_the_others_serving(db, tmp_path,
                                                                                                settings):
    from rag.tests.sdk_fixture import write_version
    from rag.tests.test_sources_git import git

    settings.DATA_DIR = tmp_path / "data"
    settings.RAG_SOURCE_ROOTS = [str(tmp_path / "data" / "sources"), f"git+file://{tmp_path / 'repos'}/"]
    bare, work = tmp_path / "repos" / "fx.git", tmp_path / "work"
    bare.mkdir(parents=True)
    git(bare, "init", "-q", "--bare", "-b", "main")
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    for version in VERSIONS:  # one release after the other, each tagged
        for page in (work / "docs").glob("*.md"):
            page.unlink()
        write_version(work / "docs", version)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"release {version}")
        git(work, "tag", f"v{version}")
    git(work, "push", "-q", str(bare), "HEAD:main", "--tags")
    for version in VERSIONS:
        report = run_json("reindex", "--kb", "fx", "--sdk-version", version,
                          "--source", f"git+file://{bare}@v{version}#path=docs")
        assert report["source"]["revision"] == git(work, "rev-parse", f"v{version}^{{commit}}")
    before = {row.slug: row.active_version_id for row in KnowledgeBase.objects.filter(sdk__slug="fx")}

    again = run_json("reindex", "--kb", "fx", "--sdk-version", "2.0")

    after = {row.slug: row.active_version_id for row in KnowledgeBase.objects.filter(sdk__slug="fx")}
    assert again["chunks_embedded"] == 0  # the same tag: every chunk's vector is in the cache
    assert after["fx@2.0"] != before["fx@2.0"]
    assert {slug: after[slug] for slug in ("fx@1.4", "fx@2.1")} == {s: before[s] for s in ("fx@1.4", "fx@2.1")}
    assert ask("Viewer captureFrame", sdk_version="1.4").version_notes[0].kind == "added"


def test_members_documented_by_their_signature_alone_are_compared_too(tmp_path):
    pages = {"1": "# Quat\n\nA rotation.\n\n## Properties\n\n### .x : Float\n\n### .getters : Array\n\n"
                  "### .y : Float\n",
             "2": "# Quat\n\nA rotation.\n\n## Properties\n\n### .x : Double\n\n### .getterTable : Array\n\n"
                  "### .y : Float\n"}
    catalogs = {}
    for version, text in pages.items():
        (tmp_path / version).mkdir()
        (tmp_path / version / "Quat.md").write_text(text, encoding="utf-8")
        catalogs[version] = api_catalog(read_folder(tmp_path / version))
    diff = CatalogDiffer().run("1", catalogs["1"], "2", catalogs["2"])
    assert [member for member, _, _ in diff.signature_changed] == ["Quat.x"]
    assert diff.renamed == (("Quat.getters", "Quat.getterTable"),) and not diff.added and not diff.removed


def test_a_version_still_building_its_first_index_does_not_take_latest(sdk, tmp_path):
    folder = write_versions(tmp_path / "next")["2.1"]
    from rag.services.sdk import sdk_version_ensure

    sdk_version_ensure(sdk="fx", version="3.0", source=str(folder))  # added, not built yet
    assert ask("Viewer setSize").sdk_version == "2.1"
    with pytest.raises(ServiceError) as raised:
        ask("Viewer setSize", sdk_version="3.0")
    assert raised.value.code == "no_active_version"
