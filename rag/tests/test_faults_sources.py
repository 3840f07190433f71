"""Issue 16, hardening: a knowledge base reads its pages only from inside the configured source roots
(RAG_SOURCE_ROOTS), whether its folder is set from the command line, in the admin, or was changed in the
database before a build or a page read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.errors import ServiceError
from rag.models import IndexVersion, KnowledgeBase
from rag.services.knowledge import index_build, index_build_queue, kb_ensure, read_source

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(tmp_path, settings, fixture_corpus):
    """One allowed root holding a corpus, and a folder outside it that holds pages too."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    shutil.copytree(fixture_corpus, allowed / "sdk")
    shutil.copytree(fixture_corpus, outside)
    settings.RAG_SOURCE_ROOTS = [str(allowed)]
    return allowed, outside


def test_source_roots_refuse_a_folder_outside_them_from_kb_ensure(roots):
    allowed, outside = roots
    kb = kb_ensure(slug="sdk", source_dir=str(allowed / "sdk"))

    with pytest.raises(ServiceError) as created:
        kb_ensure(slug="other", source_dir=str(outside))
    with pytest.raises(ServiceError) as moved:
        kb_ensure(slug="sdk", source_dir=str(allowed / "sdk" / ".." / ".." / "outside"))

    assert (created.value.code, created.value.status) == ("source_not_allowed", 403)
    assert moved.value.code == "source_not_allowed"
    kb.refresh_from_db()
    assert kb.source_dir == str((allowed / "sdk").resolve()) and not KnowledgeBase.objects.filter(slug="other")


def test_source_roots_refuse_a_symlink_that_leads_outside_them(roots):
    allowed, outside = roots
    (allowed / "link").symlink_to(outside, target_is_directory=True)

    with pytest.raises(ServiceError) as raised:
        kb_ensure(slug="sdk", source_dir=str(allowed / "link"))

    assert raised.value.code == "source_not_allowed"


def test_source_roots_are_enforced_in_the_admin_form(roots, admin_client):
    allowed, outside = roots
    kb = kb_ensure(slug="sdk", source_dir=str(allowed / "sdk"))
    form = {"slug": "sdk", "name": "sdk", "language": "mixed", "base_url": ""}

    refused = admin_client.post(f"/admin/rag/knowledgebase/{kb.pk}/change/", {**form, "source_dir": str(outside)})
    accepted = admin_client.post(f"/admin/rag/knowledgebase/{kb.pk}/change/",
                                 {**form, "source_dir": str(allowed / "sdk")})

    assert refused.status_code == 200 and "RAG_SOURCE_ROOTS" in refused.content.decode()
    assert accepted.status_code == 302
    kb.refresh_from_db()
    assert kb.source_dir == str((allowed / "sdk").resolve())


def test_source_roots_are_enforced_when_a_build_starts_and_when_a_page_is_read(roots,
                                                                              django_capture_on_commit_callbacks):
    allowed, outside = roots
    kb = kb_ensure(slug="sdk", source_dir=str(allowed / "sdk"))
    KnowledgeBase.objects.filter(pk=kb.pk).update(source_dir=str(outside))  # changed behind the service's back
    kb.refresh_from_db()

    with pytest.raises(ServiceError) as built:
        index_build(kb)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        version = index_build_queue(kb)
    with pytest.raises(ServiceError) as worked:
        queued[0]()  # the worker's task
    with pytest.raises(ServiceError) as read:
        read_source(kb="sdk", source="PerspectiveCamera.md")

    assert (built.value.code, worked.value.code, read.value.code) == ("source_not_allowed",) * 3
    version.refresh_from_db()
    assert version.status == IndexVersion.Status.FAILED and not kb.versions.filter(status="ready").exists()


def test_source_roots_default_to_the_docs_the_default_kb_and_the_data_folder(settings):
    from pathlib import Path

    from ragsite.settings import RAG_SOURCE_ROOTS

    assert {Path(r) for r in RAG_SOURCE_ROOTS} >= {Path(settings.BASE_DIR) / "docs",
                                                  Path(settings.RAG_DEFAULT_KB_SOURCE),
                                                  Path(settings.DATA_DIR) / "sources"}



def test_source_roots_set_in_the_environment_add_to_the_defaults_each_once(tmp_path, settings):
    """RAG_SOURCE_ROOTS extends the defaults (the bundled docs stay readable) and lists each folder once."""
    docs = str(Path(settings.BASE_DIR) / "docs")
    script = ("import json, django; django.setup(); from django.conf import settings; "
              "print(json.dumps(settings.RAG_SOURCE_ROOTS))")
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "ragsite.settings", "RAG_SOURCE_ROOTS": f"{tmp_path},{docs}"}

    done = subprocess.run([sys.executable, "-c", script], cwd=settings.BASE_DIR, env=environment,
                          capture_output=True, text=True, check=True)

    roots = json.loads(done.stdout.strip().splitlines()[-1])
    assert roots[0] == docs and str(tmp_path) in roots and roots.count(docs) == 1
