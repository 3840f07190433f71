"""Bad input on the web API (issue 16): never a 500, a stable code, nothing stored."""

from __future__ import annotations

import pytest

from rag.models import RequestRecord

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/api/search", "/api/chat"])
def test_deeply_nested_json_is_a_400_invalid_request_not_a_500(client, path):
    response = client.post(path, data="[" * 5000 + "]" * 5000, content_type="application/json")
    malformed = client.post(path, data="{not json", content_type="application/json")

    assert response.status_code == 400 and response.json()["code"] == malformed.json()["code"] == "parse_error"
    assert not RequestRecord.objects.exists()


@pytest.mark.parametrize("question", ["\u200b", "\ufeff\u2060", " \u200b\t", "\x01\x02", "\u202e\u200d"])
def test_a_question_of_only_zero_width_or_control_characters_is_invalid(client, question):
    response = client.post("/api/search", {"question": question}, content_type="application/json")

    assert response.status_code == 400 and response.json()["code"] in ("invalid_question", "invalid_request")
