"""Coverage gaps: unanswered web and MCP questions grouped by meaning across languages, with trend, examples and
reasons; a group turns into draft golden cases in one action, and closes itself once a newer index answers it."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
from django.utils import timezone

from assistant.services import feedback_submit, web_chat, web_search
from evaluation.models import GoldenDraft
from infra.errors import ServiceError
from opsboard import gaps, grouping, selectors
from opsboard.models import GapGroup, GapQuestion
from opsboard.services import daily_report_build
from opsboard.tests.test_ops import ops_user
from rag.models import RequestRecord
from rag.services.knowledge import index_build
from rag.tests.conftest import make_built_kb

HELM = "How do I deploy this on Kubernetes with Helm?"
HELM_RETYPED = "how do I deploy this  on kubernetes with helm"
HELM_ZH = "怎么用 Helm 部署到 Kubernetes？"
PDF = "How do I print the rendered scene to a PDF file?"


# -- grouping (no database) ----------------------------------------------------------------------------------


def test_wordings_that_differ_in_case_spacing_or_end_punctuation_are_one_question():
    assert grouping.question_key(HELM) == grouping.question_key(HELM_RETYPED.replace("I", "i") + " ?") \
        == "how do i deploy this on kubernetes with helm"
    assert grouping.question_key("  怎么用 Helm 部署到 Kubernetes？") == grouping.question_key(HELM_ZH + "。")
    assert grouping.question_key("ＦＯＶ 默认值？") == "fov 默认值"  # full-width folded
    assert grouping.question_key(HELM) != grouping.question_key(PDF)


def test_a_chinese_and_an_english_question_about_one_thing_group_and_another_thing_does_not(real_embedder):
    questions = [HELM, "how to deploy it on kubernetes using a helm chart", HELM_ZH, PDF]
    vectors = np.stack([real_embedder.embed_query(q) for q in questions])

    labels = grouping.cluster(vectors)

    assert labels[0] == labels[1] == labels[2] != labels[3]
    assert labels[0] == 0  # the largest group is numbered first


def test_purity_and_groups_to_read_count_what_they_say():
    assert grouping.purity([0, 0, 1, 1], ["a", "a", "b", "c"]) == 0.75
    assert grouping.purity([0, 0, 1], ["a", "b", "b"], weights=[3, 1, 1]) == 0.8
    assert grouping.groups_to_cover([5, 1, 3, 1]) == 3  # 5 + 3 = 8 of 10 is not yet 90%
    assert grouping.groups_to_cover([]) == 0


def test_questions_beyond_the_clustered_ones_join_the_nearest_group_within_the_threshold():
    centroids = grouping.normalized_rows(np.array([[1.0, 0.0], [0.0, 1.0]]))
    near = grouping.nearest_groups(np.array([[0.99, 0.05], [0.7, 0.7], [0.02, 1.0]]), centroids)
    assert near == [0, None, 1]


# -- the job, the pages and the actions ------------------------------------------------------------------------



def _ask_and_thumb_down(question: str, reason: str = "not what I asked") -> str:
    answer = web_chat(question=question, kb="sdk")
    feedback_submit(request_id=answer["request_id"], reason=reason)
    return answer["request_id"]


@pytest.fixture
def unanswered_log(corpus_copy):
    """The fixture corpus built, then: the Helm question asked three ways (two wordings of one and its Chinese),
    each answered and thumbed down; the PDF question likewise; a question asked of an SDK version that is not
    indexed; and the same Helm question as eval traffic, which never counts."""
    kb = make_built_kb(corpus_copy)
    for question in (HELM, HELM_RETYPED, HELM_ZH, PDF):
        _ask_and_thumb_down(question)
    with pytest.raises(ServiceError):
        web_search(question="Raycaster 在 9.9 版里怎么用？", kb="sdk", sdk_version="9.9")
    from rag.services import QuestionRequest, question_search
    from rag.models import Channel

    question_search(QuestionRequest(question=HELM, kb="sdk", channel=Channel.EVAL))
    return kb


@pytest.mark.django_db
def test_the_job_groups_unanswered_questions_across_languages_with_reasons(unanswered_log):
    run = gaps.gaps_compute()

    helm = GapGroup.objects.get(members__key=grouping.question_key(HELM))
    keys = set(helm.members.values_list("key", flat=True))
    assert keys == {grouping.question_key(HELM), grouping.question_key(HELM_ZH)}  # two wordings, one question
    assert helm.size == 3 and helm.questions == 2 and helm.kb == "sdk"
    assert helm.examples[0]["times"] == 2 and helm.examples[0]["channel"] == "web"
    assert helm.reason == GapGroup.Reason.NO_PAGE
    adopted = list(dict.fromkeys(a["class_name"] for a in RequestRecord.objects.get(question=PDF).adopted))
    reached = GapGroup.objects.get(members__key=grouping.question_key(PDF)).classes
    assert [c for c, _ in reached] == adopted[:3] and all(n == 1 for _, n in reached)  # the first three, 1 request
    pdf = GapGroup.objects.get(members__key=grouping.question_key(PDF))
    assert pdf.pk != helm.pk and pdf.size == 1
    version = GapGroup.objects.get(reason=GapGroup.Reason.VERSION_NOT_INDEXED)
    assert version.title.startswith("Raycaster")
    assert run.questions == 4 and run.groups == 3 and run.embedded_left == 0
    assert not RequestRecord.objects.filter(channel="eval", feedback__isnull=False).exists()
    # Sizes count user requests only: the eval-channel Helm search is not among them.
    assert sum(GapGroup.objects.values_list("size", flat=True)) == 5


@pytest.mark.django_db
def test_a_page_that_exists_shows_as_missed_by_a_later_answer_or_a_golden_question(unanswered_log):
    from evaluation.models import GoldenItem, GoldenSet

    web_search(question=PDF, kb="sdk")  # asked again later and answered, with no thumbs-down
    golden = GoldenSet.objects.create(name="sdk-retrieval", kind="retrieval")
    GoldenItem.objects.create(golden_set=golden, item_id="r-007", question="How to deploy on Kubernetes with Helm?",
                              answerable=True, expected_classes=["WebGLRenderer"], kb="sdk")

    gaps.gaps_compute()

    pdf = GapGroup.objects.get(members__key=grouping.question_key(PDF))
    helm = GapGroup.objects.get(members__key=grouping.question_key(HELM))
    assert pdf.reason == helm.reason == GapGroup.Reason.MISSED
    assert pdf.reason_detail == "A later request with the same question was answered."
    assert helm.reason_detail.startswith("Golden set sdk-retrieval (r-007) expects WebGLRenderer")


@pytest.mark.django_db
def test_a_recompute_keeps_each_group_its_number_and_embeds_nothing_again(unanswered_log, monkeypatch):
    gaps.gaps_compute()
    before = dict(GapQuestion.objects.values_list("key", "group_id"))
    _ask_and_thumb_down(HELM)

    def no_embedding(*args, **kwargs):
        raise AssertionError("a kept vector was embedded again")

    monkeypatch.setattr(gaps, "question_vector", no_embedding)
    gaps.gaps_compute()

    assert dict(GapQuestion.objects.values_list("key", "group_id")) == before
    assert GapGroup.objects.get(members__key=grouping.question_key(HELM)).size == 4


@pytest.mark.django_db
def test_the_page_and_its_json_list_groups_with_size_trend_examples_and_reason(unanswered_log, client):
    gaps.gaps_compute()
    client.force_login(ops_user())

    page = client.get("/ops/gaps").content.decode()
    data = client.get("/ops/gaps.json?window=30d").json()

    helm = next(g for g in data["groups"] if grouping.question_key(g["title"]) == grouping.question_key(HELM))
    assert helm["size"] == 3 and helm["trend"] == "new" and helm["reason"] == "no_page"
    assert {e["question"] for e in helm["examples"]} >= {HELM_ZH}
    assert data["groups"][0]["id"] == helm["id"]  # the largest first
    assert data["window"] == "30d" and data["total"] == 5 and data["computed_at"]
    assert "Coverage gaps" in page and HELM_ZH in page or "Helm" in page
    detail = client.get(f"/ops/gaps/{helm['id']}").content.decode()
    assert HELM_ZH in detail and "Draft golden cases" in detail and "Mark as covered" in detail
    assert client.get("/ops/gaps/999999").status_code == 404


@pytest.mark.django_db
def test_the_pages_are_for_the_ops_group_and_the_actions_take_a_post(unanswered_log, client):
    gaps.gaps_compute()
    group = GapGroup.objects.first()
    client.force_login(ops_user(name="reader", group=""))
    assert client.get("/ops/gaps").status_code in (302, 403)
    assert client.post(f"/ops/gaps/{group.pk}/drafts").status_code in (302, 403)
    assert not GoldenDraft.objects.exists()
    client.force_login(ops_user())
    assert client.get(f"/ops/gaps/{group.pk}/drafts").status_code == 405


@pytest.mark.django_db
def test_a_group_becomes_draft_golden_cases_in_one_action(unanswered_log, client):
    gaps.gaps_compute()
    helm = GapGroup.objects.get(members__key=grouping.question_key(HELM))
    client.force_login(ops_user())

    response = client.post(f"/ops/gaps/{helm.pk}/drafts")
    again = client.post(f"/ops/gaps/{helm.pk}/drafts")

    drafts = GoldenDraft.objects.order_by("question")
    assert response.status_code == again.status_code == 302 and "2+draft" in response["Location"]
    assert sorted(d.question for d in drafts) == sorted([HELM_RETYPED, HELM_ZH]) or \
        sorted(d.question for d in drafts) == sorted([HELM, HELM_ZH])  # each question's latest request
    assert all(f"Coverage gap {helm.pk}" in d.feedback_reason for d in drafts)
    assert drafts.count() == 2  # drafting twice adds nothing


@pytest.mark.django_db
def test_a_group_marked_covered_closes_itself_once_a_new_index_answers_it(unanswered_log, corpus_copy, client):
    gaps.gaps_compute()
    helm = GapGroup.objects.get(members__key=grouping.question_key(HELM))
    client.force_login(ops_user())
    client.post(f"/ops/gaps/{helm.pk}/covered")
    helm.refresh_from_db()
    assert helm.status == "covered" and helm.covered_version == unanswered_log.active_version.name
    assert gaps.gaps_recheck() == (0, 0)  # no newer index yet: nothing asked

    (corpus_copy / "Deployment.md").write_text(
        "# 部署（Deployment）\n\n> 分类：运维\n\n## 用 Helm 部署到 Kubernetes\n\n"
        "How to deploy on Kubernetes with Helm: add the chart repository, then run `helm install docs ./chart`. "
        "用 Helm 部署到 Kubernetes：先添加 chart 仓库，再运行 helm install。\n", encoding="utf-8")
    index_build(unanswered_log)

    assert gaps.gaps_recheck() == (1, 1)
    helm.refresh_from_db()
    assert helm.status == "closed" and helm.check_result["answered"] == helm.check_result["asked"] == 2
    # Its earlier requests no longer count; the group stays closed on the next run.
    gaps.gaps_compute()
    helm.refresh_from_db()
    assert helm.status == "closed"
    assert not RequestRecord.objects.filter(channel="eval", question=HELM_ZH).exists()  # re-checks unrecorded


@pytest.mark.django_db
def test_a_covered_group_still_unanswered_on_the_new_index_reopens(unanswered_log):
    gaps.gaps_compute()
    pdf = GapGroup.objects.get(members__key=grouping.question_key(PDF))
    gaps.gap_mark_covered(pdf)
    index_build(unanswered_log)

    checked, closed = gaps.gaps_recheck()

    pdf.refresh_from_db()
    assert (checked, closed) == (1, 0) and pdf.status == "open"
    assert "still leaves 1 of 1 unanswered" in pdf.reason_detail


@pytest.mark.django_db
def test_the_daily_report_lists_the_largest_open_gaps(unanswered_log):
    gaps.gaps_compute()
    report = daily_report_build(timezone.localdate())
    assert report.summary["gaps"][0]["size"] == 3 and "Coverage gaps" in report.html


def test_the_trend_reads_the_window_halves():
    today = datetime.date(2026, 12, 5)
    first = today - datetime.timedelta(days=6)
    long_ago = timezone.make_aware(datetime.datetime(2026, 11, 1))

    def days(**counts):
        return {(today - datetime.timedelta(days=int(k[1:]))).isoformat(): v for k, v in counts.items()}

    assert selectors.gap_trend(days(d6=1, d5=1, d1=4, d0=2), first, 7, long_ago) == "growing"
    assert selectors.gap_trend(days(d6=5, d5=2, d0=1), first, 7, long_ago) == "shrinking"
    assert selectors.gap_trend(days(d6=2, d0=2), first, 7, long_ago) == "steady"
    recent = timezone.make_aware(datetime.datetime(2026, 12, 4, 12))
    assert selectors.gap_trend(days(d1=1), first, 7, recent) == "new"
