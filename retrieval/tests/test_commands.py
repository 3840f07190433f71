"""The integrator's setup from the shell: `manage.py retrievalapp create`, then `manage.py apikey create --app`,
then a retrieval with that key."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from rag.models import RetrievalApp


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_an_app_and_a_bound_key_from_the_shell_answer_an_open_call(client, two_kbs):
    app_id, note = run("retrievalapp", "create", "--name", "platform", "--kb", "alpha", "--setting", '{"top_n": 2}')
    app = RetrievalApp.objects.get(pk=int(app_id))
    assert app.published and [kb.slug for kb in app.knowledge_bases.all()] == ["alpha"]
    assert f"--app {app.pk}" in note
    key, _ = run("apikey", "create", "--owner", "integrator", "--name", "platform", "--app", app_id)

    response = client.post("/api/v1/retrieval", json.dumps({
        "dialog_id": app.pk, "question": "add a mesh to the scene", "kb_ids": [two_kbs.alpha.pk], "rag_setting": {}}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    assert response.json()["code"] == 0
    assert len(response.json()["data"]["chunks"]) == 2  # the app's default top_n

    listed, _ = run("retrievalapp", "list")
    assert listed.splitlines()[-1].split("\t")[:4] == [app_id, "published", "platform", "alpha"]
    keys, _ = run("apikey", "list")
    assert f"app {app.pk}" in keys


@pytest.mark.parametrize("args, message", [
    (("--name", "x", "--kb", "nope"), "kb_not_found"),
    (("--name", "x", "--kb", "alpha", "--setting", '{"top_k": 0}'), "invalid_rag_setting"),
    (("--name", "x", "--kb", "alpha", "--setting", "[1]"), "JSON object"),
    (("--name", " ", "--kb", "alpha"), "invalid_app_name"),
])
def test_a_bad_app_is_refused_and_nothing_is_created(two_kbs, args, message):
    before = RetrievalApp.objects.count()
    with pytest.raises(CommandError, match=message):
        run("retrievalapp", "create", *args)
    assert RetrievalApp.objects.count() == before


def test_a_key_for_an_unknown_app_is_refused(two_kbs):
    with pytest.raises(CommandError, match="No retrieval app 999"):
        run("apikey", "create", "--owner", "integrator", "--name", "x", "--app", "999")
