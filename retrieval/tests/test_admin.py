"""The retrieval model in Django's admin: apps with checked default settings, labels with their values, a
document's label values, and a key bound to an app."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from apikeys.models import ApiKey
from rag.models import DocumentLabel, Label, LabelValue, RetrievalApp


@pytest.fixture
def admin_client(client, db):
    client.force_login(get_user_model().objects.create_superuser("admin", password="pw"))
    return client


def test_an_app_with_a_bad_default_setting_is_refused_and_a_good_one_saved(admin_client, two_kbs):
    form = {"name": "platform", "published": "on", "knowledge_bases": [two_kbs.alpha.pk]}

    refused = admin_client.post("/admin/rag/retrievalapp/add/", {**form, "rag_setting": json.dumps({"top_k": 0})})
    saved = admin_client.post("/admin/rag/retrievalapp/add/", {**form, "rag_setting": json.dumps({"top_n": 3})})

    assert refused.status_code == 200 and "rag_setting.top_k must be an integer" in refused.content.decode()
    assert saved.status_code == 302
    app = RetrievalApp.objects.get(name="platform")
    assert app.rag_setting == {"top_n": 3} and list(app.knowledge_bases.all()) == [two_kbs.alpha]


def test_a_label_value_given_in_the_admin_stays_across_an_ingest(admin_client, two_kbs):
    from rag.services.knowledge import index_build

    timer = two_kbs.alpha.documents.get(path="Timer.md")  # no front matter
    label = Label.objects.create(name="topic")
    LabelValue.objects.create(label=label, value="animation")
    value = LabelValue.objects.get(label=label, value="animation")
    page = admin_client.get(f"/admin/rag/document/{timer.pk}/change/")
    assert page.status_code == 200 and "document_labels" in page.content.decode()
    response = admin_client.post(f"/admin/rag/document/{timer.pk}/change/", {
        "document_labels-TOTAL_FORMS": "1", "document_labels-INITIAL_FORMS": "0",
        "document_labels-0-value": value.pk, "document_labels-0-document": timer.pk})
    assert response.status_code == 302, response.content.decode()[:2000]

    index_build(two_kbs.alpha)

    row = DocumentLabel.objects.get(document=timer)
    assert (row.value, row.from_source) == (value, False)
    scene = two_kbs.alpha.documents.get(path="Scene.md")
    assert {(r.value.label.name, r.value.value, r.from_source) for r in scene.document_labels.all()} == {
        ("level", "beginner", True), ("product", "engine", True), ("product", "editor", True)}


def test_a_key_is_bound_to_an_app_in_the_admin(admin_client, two_kbs):
    key = ApiKey.objects.get(pk=two_kbs.key.pk)
    other = RetrievalApp.objects.create(name="other", published=True)
    form = {"name": key.name, "owner": key.owner_id, "app": other.pk,
            "usage-TOTAL_FORMS": "0", "usage-INITIAL_FORMS": "0"}

    response = admin_client.post(f"/admin/apikeys/apikey/{key.pk}/change/", form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    key.refresh_from_db()
    assert key.app == other
