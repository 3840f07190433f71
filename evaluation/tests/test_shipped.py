"""The golden sets shipped about the bundled docs (issue 12, V1): valid, imported by migrate on a fresh install,
never duplicated or overwritten, listed by the eval center; and `eval baseline` naming a missing folder."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from evaluation.models import GoldenSet
from evaluation.services.golden import (golden_import, golden_import_shipped, golden_new_version,
                                        shipped_golden_sets)

pytestmark = pytest.mark.django_db


def shipped_rows(name: str) -> list[dict]:
    path = dict((n, p) for n, _, p in shipped_golden_sets())[name]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_project_ships_a_retrieval_and_a_generation_set_about_the_docs():
    shipped = {(name, kind) for name, kind, _ in shipped_golden_sets()}

    retrieval, generation = shipped_rows("docs-retrieval"), shipped_rows("docs-generation")

    assert {("docs-retrieval", "retrieval"), ("docs-generation", "generation")} <= shipped
    assert 30 <= len(retrieval) <= 40 and 15 <= len(generation) <= 20
    assert {row["kb"] for row in retrieval + generation} == {"docs"}
    negatives = Counter(row.get("negative_kind") for row in retrieval if not row["answerable"])
    assert negatives["chitchat"] >= 3 and negatives["out_of_catalog"] >= 1
    assert any(not row["answerable"] for row in generation)
    languages = {"zh" if any("\u4e00" <= ch <= "\u9fff" for ch in row["question"]) else "en" for row in retrieval}
    assert languages == {"zh", "en"}


def test_every_shipped_answer_source_is_a_page_of_the_docs(settings):
    docs = settings.BASE_DIR / "docs"

    sources = {row["source"] for name in ("docs-retrieval", "docs-generation") for row in shipped_rows(name)}

    assert all((docs / source).is_file() for source in sources - {""})


def test_migrate_imported_the_shipped_sets_into_a_fresh_database():
    names = set(GoldenSet.objects.values_list("name", flat=True))

    assert {"docs-retrieval", "docs-generation"} <= names
    assert GoldenSet.objects.get(name="docs-retrieval").items.count() == len(shipped_rows("docs-retrieval"))


def test_importing_the_shipped_sets_again_changes_nothing():
    before = list(GoldenSet.objects.order_by("pk").values_list("name", "version"))

    again = golden_import_shipped()
    call_command("migrate", verbosity=0)

    assert again == []
    assert list(GoldenSet.objects.order_by("pk").values_list("name", "version")) == before


def test_a_missing_shipped_set_is_imported_and_an_edited_one_is_left_alone():
    GoldenSet.objects.filter(name="docs-generation").delete()
    edited = golden_new_version(GoldenSet.objects.get(name="docs-retrieval"), note="my edits")
    edited.items.filter(item_id="dr-001").update(question="edited question")

    imported = golden_import_shipped()

    assert [str(s) for s in imported] == [str(GoldenSet.objects.get(name="docs-generation"))]
    latest = GoldenSet.objects.filter(name="docs-retrieval").order_by("-version").first()
    assert (latest.pk, latest.items.get(item_id="dr-001").question) == (edited.pk, "edited question")


def test_a_set_of_the_same_name_made_by_hand_is_never_replaced():
    GoldenSet.objects.filter(name="docs-retrieval").delete()
    mine = golden_import(name="docs-retrieval", kind="retrieval", text=json.dumps(shipped_rows("docs-retrieval")[0]))

    golden_import_shipped()

    assert list(GoldenSet.objects.filter(name="docs-retrieval")) == [mine]


def test_the_eval_center_lists_the_shipped_sets(client):
    user = get_user_model().objects.create_user("tester", password="pw")
    user.groups.add(Group.objects.get_or_create(name="qa")[0])
    client.force_login(user)

    page = client.get("/ops/eval/").content.decode()

    assert "docs-retrieval" in page and "docs-generation" in page


def test_baseline_says_when_the_golden_folder_is_missing(tmp_path):
    with pytest.raises(CommandError) as error:
        call_command("eval", "baseline", "--golden", str(tmp_path / "shared" / "golden"), "--corpus", str(tmp_path))

    assert "does not exist" in str(error.value) and "evaluation/golden/docs" in str(error.value)
