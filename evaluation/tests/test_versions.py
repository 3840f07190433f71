"""Issue 32 in evaluation: a golden set written for an SDK is run against one of its versions (`sdk_version`), each
run names the version it asked and the index version it read, and a run of the same set on another version scores
that version's docs."""

from __future__ import annotations

import json

import pytest

from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_create, eval_run_execute
from infra.errors import ServiceError
from rag.models import RequestRecord
from rag.tests.sdk_fixture import build_sdk

pytestmark = pytest.mark.django_db

# Timer's page exists only from 2.1 on: its question passes on 2.1 and misses on 1.4.
ITEMS = [
    {"id": "v-1", "question": "How do I get the seconds between two frames with Timer getDelta?", "layer": "member",
     "answerable": True, "expected_classes": ["Timer"], "expected_members": ["getDelta"], "kb": "fx",
     "source": "Timer.md"},
    {"id": "v-2", "question": "How do I render the scene once with Viewer?", "layer": "plain", "answerable": True,
     "expected_classes": ["Viewer"], "expected_members": ["render"], "kb": "fx", "source": "Viewer.md"},
]


def test_a_golden_set_is_run_against_the_version_asked_and_says_which(tmp_path):
    rows = build_sdk(tmp_path)
    golden_set = golden_import(name="fx-retrieval", kind="retrieval",
                               text="\n".join(json.dumps(item) for item in ITEMS) + "\n")

    latest = eval_run_execute(eval_run_create(golden_set=golden_set).pk)
    older = eval_run_execute(eval_run_create(golden_set=golden_set, sdk_version="1.4").pk)

    assert (latest.sdk_version, latest.index_versions) == ("", {"fx": rows["2.1"].active_version.name})
    assert (older.sdk_version, older.index_versions) == ("1.4", {"fx": rows["1.4"].active_version.name})
    passed = {run.sdk_version: {r.item.item_id: r.passed for r in run.results.select_related("item")}
              for run in (latest, older)}
    assert passed[""]["v-1"] is True and passed["1.4"]["v-1"] is False and passed["1.4"]["v-2"] is True
    assert set(RequestRecord.objects.filter(channel="eval").values_list("kb", flat=True)) == {"fx@2.1", "fx@1.4"}
    with pytest.raises(ServiceError) as raised:
        eval_run_create(golden_set=golden_set, sdk_version="0.9")
    assert raised.value.code == "sdk_version_not_found"


def test_a_versions_gate_asks_its_sdks_golden_questions_about_that_version(tmp_path):
    from evaluation.services.reindex import gate_scope, index_build_gated

    rows = build_sdk(tmp_path)
    golden_import(name="fx-retrieval", kind="retrieval", text="\n".join(json.dumps(item) for item in ITEMS) + "\n")

    assert gate_scope(rows["1.4"]) == ("fx", "1.4")
    newest, oldest = index_build_gated(rows["2.1"]), index_build_gated(rows["1.4"])

    assert newest.activated and not oldest.activated  # Timer's question misses on 1.4, whose page it lacks
    runs = {run["id"]: run for run in oldest.runs}
    from evaluation.models import EvalRun
    candidate = EvalRun.objects.get(pk=next(iter(runs)))
    assert (candidate.sdk_version, candidate.index_versions, candidate.candidate) == (
        "1.4", {"fx": oldest.version.name}, True)
