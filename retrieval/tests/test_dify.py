"""Dify's external knowledge API, served at /dify/retrieval: a client that sends exactly what Dify sends
(api/services/external_knowledge_service.py) over real HTTP to the live server, for retrieval, metadata
conditions in Dify's spelling, the error contract and the connection check Dify runs when the API is registered."""

from __future__ import annotations

import json

import pytest
import requests

from retrieval.tests.conftest import usage_by_tool
from rag.models import Document, RequestRecord
from rag.tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)  # the live server answers from its own thread

QUESTION = "How do I add a mesh to a scene?"
ALPHA_PAGES = {"Mesh.md", "Scene.md", "Shader.md", "Timer.md"}


class DifyClient:
    """What Dify sends to an external knowledge API: `fetch_external_knowledge_retrieval` for a retrieval and
    `check_endpoint_and_api_key` when the API is registered."""

    def __init__(self, endpoint: str, api_key: str | None):
        self.endpoint = endpoint
        self.api_key = api_key

    def _authorization(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def retrieve(self, knowledge_id, query: str, *, top_k: int = 4, score_threshold: float = 0.0,
                 metadata_condition: dict | None = None) -> requests.Response:
        params = {"retrieval_setting": {"top_k": top_k, "score_threshold": score_threshold}, "query": query,
                  "knowledge_id": knowledge_id, "metadata_condition": metadata_condition}
        headers = {"Content-Type": "application/json", **self._authorization()}
        return requests.post(f"{self.endpoint}/retrieval", headers=headers, data=json.dumps(params),
                             allow_redirects=True, timeout=30)

    def check(self) -> requests.Response:
        """The registration probe: the key and no body at all."""
        return requests.post(f"{self.endpoint}/retrieval", headers=self._authorization(), timeout=30)


@pytest.fixture
def dify(live_server, two_kbs) -> DifyClient:
    return DifyClient(live_server.url + "/dify", two_kbs.secret)


def records_of(response: requests.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"records"}, body
    return body["records"]


def pages_of(records: list[dict]) -> set[str]:
    paths = dict(Document.objects.values_list("pk", "path"))
    return {paths[int(r["metadata"]["document_id"])] for r in records}


def assert_error(response: requests.Response, status: int, error_code: int) -> dict:
    body = response.json()
    assert (response.status_code, body.get("error_code")) == (status, error_code), (response.status_code, body)
    assert isinstance(body["error_msg"], str) and body["error_msg"]
    assert "records" not in body
    return body


# -- retrieval ------------------------------------------------------------------------------------------------


def test_records_have_content_score_title_and_metadata(dify, two_kbs):
    records = records_of(dify.retrieve("alpha", QUESTION, top_k=5, score_threshold=0.5))

    assert len(records) == 5
    ids = {str(d.pk): d for d in Document.objects.filter(kb=two_kbs.alpha)}
    for record in records:
        assert isinstance(record["content"], str) and record["content"]
        assert isinstance(record["score"], float) and 0.5 <= record["score"] <= 1.0
        assert isinstance(record["metadata"], dict)
        document = ids[record["metadata"]["document_id"]]
        assert record["title"] == document.title
        assert record["metadata"].get("author") == document.metadata.get("author")
    scores = [r["score"] for r in records]
    assert scores == sorted(scores, reverse=True)
    assert pages_of(records[:1]) <= {"Mesh.md", "Scene.md"}


def test_metadata_is_an_object_even_for_a_page_without_front_matter(dify):
    records = records_of(dify.retrieve("alpha", "elapsed time between frames getDelta", top_k=12))

    timer = [r for r in records if r["title"] == "Timer"]
    assert timer and all(isinstance(r["metadata"], dict) and r["metadata"]["document_id"] for r in timer)


def test_top_k_limits_the_records_and_threshold_0_returns_up_to_top_k(dify):
    counts = [len(records_of(dify.retrieve("alpha", QUESTION, top_k=top_k, score_threshold=0.0)))
              for top_k in (1, 3, 10, 50)]

    assert counts == [1, 3, 10, 12]  # alpha has 12 chunks


def test_score_threshold_drops_the_records_below_it(dify):
    everything = records_of(dify.retrieve("alpha", QUESTION, top_k=12, score_threshold=0.0))

    strict = records_of(dify.retrieve("alpha", QUESTION, top_k=12, score_threshold=0.6))

    assert strict and all(r["score"] >= 0.6 for r in strict)
    assert [r["content"] for r in strict] == [r["content"] for r in everything if r["score"] >= 0.6]
    assert len(strict) < len(everything)


def test_knowledge_id_may_be_the_slug_or_the_id(dify, two_kbs):
    by_slug = records_of(dify.retrieve("alpha", QUESTION))

    by_id = records_of(dify.retrieve(str(two_kbs.alpha.pk), QUESTION))

    assert by_slug and by_slug == by_id
    assert {r["metadata"]["knowledge_id"] for r in by_id} == {str(two_kbs.alpha.pk)}


def test_a_chinese_knowledge_base_answers_a_chinese_query(dify):
    records = records_of(dify.retrieve("beta", "灯光的颜色", top_k=2))

    assert pages_of(records) == {"Light.md"}


# -- metadata_condition in Dify's spelling --------------------------------------------------------------------


def condition(name, operator, value=None) -> dict:
    return {"name": name, "comparison_operator": operator, "value": value}


AUTHORED = condition("author", "not empty")  # keeps the negative operators off the page without front matter
VERSIONED = condition("version", "not empty")
DIFY_CASES = [
    ("and", [condition("author", "is", "alice")], {"Scene.md"}),
    ("and", [AUTHORED, condition("author", "is not", "alice")], {"Mesh.md", "Shader.md"}),
    ("and", [condition("author", "contains", "o")], {"Mesh.md", "Shader.md"}),
    ("and", [AUTHORED, condition("author", "not contains", "o")], {"Scene.md"}),
    ("and", [condition("author", "start with", "al")], {"Scene.md"}),
    ("and", [condition("author", "end with", "ol")], {"Shader.md"}),
    ("and", [condition("version", "empty")], {"Timer.md"}),
    ("and", [condition("version", "not empty")], {"Mesh.md", "Scene.md", "Shader.md"}),
    ("and", [condition("version", "=", 5)], {"Mesh.md"}),
    ("and", [VERSIONED, condition("version", "≠", 5)], {"Scene.md", "Shader.md"}),
    ("and", [condition("version", ">", 3)], {"Mesh.md", "Shader.md"}),
    ("and", [condition("version", "<", 5)], {"Scene.md"}),
    ("and", [condition("version", "≥", 5)], {"Mesh.md", "Shader.md"}),
    ("and", [condition("version", "≤", 5)], {"Scene.md", "Mesh.md"}),
    ("and", [condition("published", "before", "2024-06-01")], {"Scene.md"}),
    ("and", [condition("published", "after", "2024-06-01")], {"Mesh.md", "Shader.md"}),
    ("and", [condition("published", "after", "2024-06-15")], {"Shader.md"}),
    ("and", [condition("author", "in", ["alice", "bob"])], {"Scene.md", "Mesh.md"}),
    ("and", [AUTHORED, condition("author", "not in", ["alice", "bob"])], {"Shader.md"}),
    ("and", [condition(["author", "level"], "is", "advanced")], {"Shader.md"}),
    ("and", [condition(["author", "level"], "is", "bob")], {"Mesh.md"}),
    ("and", [condition("product", "is", "editor")], {"Scene.md"}),
    ("and", [condition("level", "is", "beginner"), condition("author", "is", "bob")], {"Mesh.md"}),
    ("or", [condition("author", "is", "alice"), condition("author", "is", "bob")], {"Scene.md", "Mesh.md"}),
    ("or", [condition("author", "is", "alice"), condition("version", ">", 6)], {"Scene.md", "Shader.md"}),
]


def test_metadata_condition_with_each_operator_dify_can_send(dify):
    wrong = {}
    for n, (logic, conditions, expected) in enumerate(DIFY_CASES):
        response = dify.retrieve("alpha", QUESTION, top_k=12, metadata_condition={
            "logical_operator": logic, "conditions": conditions})
        found = pages_of(records_of(response)) if response.status_code == 200 else response.text
        if found != expected:
            wrong[n] = (logic, conditions, expected, found)

    assert wrong == {}


@pytest.mark.parametrize("metadata_condition", [
    {"logical_operator": "and", "conditions": [condition("author", "is", "zed")]},
    {"logical_operator": "and", "conditions": [condition("author", "is", "alice"), condition("author", "is", "bob")]},
    {"logical_operator": "or", "conditions": [condition("level", "is", "expert"), condition("version", ">", 9)]},
], ids=["no-author", "and-disjoint", "or-neither"])
def test_a_condition_that_matches_nothing_gives_no_records(dify, metadata_condition):
    response = dify.retrieve("alpha", QUESTION, top_k=12, metadata_condition=metadata_condition)

    assert (response.status_code, response.json()) == (200, {"records": []})


def test_a_null_metadata_condition_filters_nothing(dify):
    records = records_of(dify.retrieve("alpha", QUESTION, top_k=12, metadata_condition=None))

    assert pages_of(records) == ALPHA_PAGES


def test_null_conditions_filter_nothing(dify):
    """Dify's `MetadataCondition.conditions` is optional: null means no condition was given."""
    records = records_of(dify.retrieve("alpha", QUESTION, top_k=12,
                                       metadata_condition={"logical_operator": "and", "conditions": None}))

    assert pages_of(records) == ALPHA_PAGES


def test_a_body_without_the_metadata_condition_key_filters_nothing(live_server, two_kbs):
    body = {"retrieval_setting": {"top_k": 12, "score_threshold": 0.0}, "query": QUESTION, "knowledge_id": "alpha"}

    response = requests.post(live_server.url + "/dify/retrieval", data=json.dumps(body), timeout=30,
                             headers={"Content-Type": "application/json", "Authorization": f"Bearer {two_kbs.secret}"})

    assert pages_of(records_of(response)) == ALPHA_PAGES


# -- errors: {error_code, error_msg} -------------------------------------------------------------------------


def test_no_authorization_header_is_403_1001(live_server, two_kbs):
    response = DifyClient(live_server.url + "/dify", None).retrieve("alpha", QUESTION)

    assert_error(response, 403, 1001)


def test_a_basic_authorization_header_is_403_1001(live_server, two_kbs):
    response = requests.post(live_server.url + "/dify/retrieval", timeout=30, data=json.dumps(
        {"knowledge_id": "alpha", "query": QUESTION, "retrieval_setting": {"top_k": 2, "score_threshold": 0.0}}),
        headers={"Content-Type": "application/json", "Authorization": "Basic x"})

    assert_error(response, 403, 1001)


def test_an_unknown_key_is_403_1002(live_server, two_kbs):
    response = DifyClient(live_server.url + "/dify", "rk_not-a-real-key").retrieve("alpha", QUESTION)

    assert_error(response, 403, 1002)


@pytest.mark.parametrize("knowledge_id", ["999999", "no-such-kb"])
def test_an_unknown_knowledge_id_is_404_2001(dify, knowledge_id):
    assert_error(dify.retrieve(knowledge_id, QUESTION), 404, 2001)


def test_a_knowledge_base_outside_the_keys_app_is_404_2001(dify, tmp_path):
    (tmp_path / "gamma").mkdir()
    gamma = make_kb(tmp_path / "gamma", slug="gamma")

    assert_error(dify.retrieve(str(gamma.pk), QUESTION), 404, 2001)
    assert_error(dify.retrieve("gamma", QUESTION), 404, 2001)


def test_the_registration_check_with_a_good_key_is_400(dify):
    response = dify.check()

    assert response.request.headers.get("Content-Length") == "0"
    assert "Content-Type" not in response.request.headers and response.request.body is None
    assert response.status_code == 400  # Dify refuses to register on 404, 502 and 403 only
    body = response.json()
    assert isinstance(body["error_code"], int) and body["error_msg"]


@pytest.mark.parametrize("secret", ["rk_not-a-real-key", "not even a key"])
def test_the_registration_check_with_a_bad_key_is_403(live_server, two_kbs, secret):
    response = DifyClient(live_server.url + "/dify", secret).check()

    assert response.status_code == 403
    assert response.json()["error_code"] == 1002


def test_get_is_405_with_an_error_body(live_server, two_kbs):
    response = requests.get(live_server.url + "/dify/retrieval", timeout=30,
                            headers={"Authorization": f"Bearer {two_kbs.secret}"})

    assert response.status_code == 405
    body = response.json()
    assert isinstance(body["error_code"], int) and body["error_msg"]


# -- one retrieval, one record --------------------------------------------------------------------------------


def test_one_retrieval_leaves_one_dify_record_and_one_counted_call(dify, two_kbs):
    records_of(dify.retrieve("alpha", QUESTION))

    rows = list(RequestRecord.objects.all())
    assert len(rows) == 1
    assert (rows[0].channel, rows[0].api_key_prefix, rows[0].question, rows[0].kb) == (
        "dify", two_kbs.key.prefix, QUESTION, "alpha")
    assert usage_by_tool(two_kbs.key) == {"dify": (1, 0)}
