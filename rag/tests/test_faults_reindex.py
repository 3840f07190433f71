"""Issue 16, hardening (slow, real processes): a `manage.py rag reindex` killed with SIGKILL mid-embedding leaves
the active version serving, the next reindex succeeds at once and nothing of the killed build is left; two
reindexes at once never make two builds or two active versions. (A worker killed mid-eval:
evaluation/tests/test_worker.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import pytest

from rag.engine.index import _table_exists, table_name
from rag.models import Channel, IndexVersion
from rag.services.questions import QuestionRequest, question_search
from rag.tests.conftest import make_built_kb
from rag.tests.live import ROOT, manage, project_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
QUESTION = "PerspectiveCamera 的 fov 默认值"


def add_pages(corpus, count: int) -> None:
    """Pages no build has embedded yet (the embedding cache knows none), so a build embeds for a while."""
    run = uuid.uuid4().hex
    for n in range(count):
        (corpus / f"extra-{n:04d}.md").write_text(
            f"# Extra{n}\n\nExtra page {n} of run {run}: notes on widget {n * 7919 % 1000} and gadget {n}.\n",
            encoding="utf-8")


def reindex() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", "rag", "reindex", "--kb", "sdk", "--json"], cwd=ROOT,
                            env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def served_version() -> str:
    return question_search(QuestionRequest(question=QUESTION, kb="sdk", channel=Channel.CLI)).version


def test_a_reindex_killed_with_sigkill_mid_embedding_keeps_serving_and_the_next_reindex_succeeds(corpus_copy,
                                                                                                engine):
    kb = make_built_kb(corpus_copy)
    before = kb.active_version.name
    add_pages(corpus_copy, 300)
    build = reindex()
    killed = wait_for(lambda: IndexVersion.objects.filter(kb=kb, status="building", progress_done__gt=0).first(),
                      timeout=120, what="the build to start embedding")

    build.send_signal(signal.SIGKILL)  # no cleanup: as the OOM killer or a lost machine would
    build.communicate(timeout=10)

    killed.refresh_from_db()
    assert killed.progress_done < killed.progress_total  # it died mid-embedding
    kb.refresh_from_db()
    assert kb.active_version.name == before and served_version() == before

    again = manage("rag", "reindex", "--kb", "sdk", "--json")

    assert again.returncode == 0, again.stdout + again.stderr
    built = json.loads(again.stdout)
    kb.refresh_from_db()
    assert kb.active_version.name == built["version"] != before and served_version() == built["version"]
    killed.refresh_from_db()
    assert killed.status == "failed" and "abandoned" in killed.error
    assert not engine.store.version_dir("sdk", killed.name).exists()
    assert not _table_exists(engine.store.connect(), table_name("sdk", killed.name))  # no orphan table


def test_two_reindexes_at_once_make_one_build_and_never_two_active_versions(corpus_copy):
    kb = make_built_kb(corpus_copy)
    before = kb.active_version.name
    add_pages(corpus_copy, 150)

    builds = [reindex(), reindex()]
    outcomes = [json.loads(build.communicate(timeout=300)[0] or "{}") for build in builds]

    assert sorted(bool(o.get("ok")) for o in outcomes) in ([False, True], [True, True]), outcomes
    refused = [o for o in outcomes if not o.get("ok")]
    assert all(o.get("code") == "index_build_running" for o in refused), outcomes  # not "database is locked"
    made = [o["version"] for o in outcomes if o.get("ok")]
    kb.refresh_from_db()
    assert kb.active_version.name == max(made) != before
    assert set(kb.versions.filter(status="ready").exclude(name=before).values_list("name", flat=True)) == set(made)
    assert not kb.versions.filter(status="building").exists()
