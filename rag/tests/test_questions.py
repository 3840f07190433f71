"""The one question path: validation, versions, aliases, streaming, the token meter and the recording policy."""

from __future__ import annotations

import contextlib

import pytest

from infra.errors import ServiceError
from rag.models import Channel, ClassAlias, EverydayWord, RequestRecord
from rag.services.knowledge import index_build
from rag.services.questions import (
    LIMITS,
    Caller,
    FinalEvent,
    QuestionRequest,
    RetrievalEvent,
    TokenEvent,
    question_answer,
    question_refused,
    question_search,
)
from rag.tests.conftest import make_kb

pytestmark = pytest.mark.django_db

Outcome = RequestRecord.Outcome


def ask(**fields) -> QuestionRequest:
    return QuestionRequest(**{"channel": Channel.CLI, "kb": "sdk", "question": "Fog 的颜色", **fields})


# -- searching ---------------------------------------------------------------------------------------


def test_search_answers_from_the_active_version(built_kb):
    outcome = question_search(ask(question="PerspectiveCamera 的 fov 默认是多少"))

    assert outcome.version == outcome.result.version == built_kb.active_version.name
    assert outcome.built_at == built_kb.active_version.built_at.isoformat()
    assert outcome.result.hits[0].chunk.class_name == "PerspectiveCamera"


def test_search_can_name_a_ready_version(built_kb):
    old = built_kb.active_version
    index_build(built_kb)

    outcome = question_search(ask(version=old.name))

    assert outcome.version == old.name


def test_search_uses_the_editable_alias_table(built_kb):
    ClassAlias.objects.create(kb=built_kb, alias="相机", class_name="PerspectiveCamera")
    ClassAlias.objects.create(kb=None, alias="控制器", class_name="OrbitControls")

    outcome = question_search(ask(question="相机和控制器怎么配合"))

    assert set(outcome.result.plan.hinted_classes) == {"PerspectiveCamera", "OrbitControls"}


def test_a_knowledge_base_alias_overrides_a_global_one(built_kb):
    ClassAlias.objects.create(kb=None, alias="相机", class_name="OrbitControls")
    ClassAlias.objects.create(kb=built_kb, alias="相机", class_name="PerspectiveCamera")

    outcome = question_search(ask(question="相机怎么用"))

    assert outcome.result.plan.hinted_classes == ("PerspectiveCamera",)


def test_questions_share_one_searcher_per_version_until_its_aliases_change(built_kb, monkeypatch):
    import rag.pipeline

    built = []

    class CountedSearcher(rag.pipeline.Searcher):
        def __init__(self, **fields):
            super().__init__(**fields)
            built.append(self)

    monkeypatch.setattr(rag.pipeline, "Searcher", CountedSearcher)
    rag.pipeline.get_engine().searchers.clear()

    question_search(ask(question="PerspectiveCamera 的 fov"))
    question_search(ask(question="Fog 的颜色"))
    assert len(built) == 1  # the second question built no engine object

    ClassAlias.objects.create(kb=built_kb, alias="相机", class_name="PerspectiveCamera")
    outcome = question_search(ask(question="相机怎么用"))
    question_search(ask(question="相机的 fov"))

    assert len(built) == 2 and outcome.result.plan.hinted_classes == ("PerspectiveCamera",)
    assert list(rag.pipeline.get_engine().searchers.values()) == [built[1]]  # the old alias table's is gone


def test_an_everyday_words_entry_added_in_the_admin_plans_the_next_question(built_kb, admin_client):
    question = "手机上画面发糊，怎么办？"
    before = question_search(ask(question=question))
    form = {"phrase": " 发糊 ", "terms": "setPixelRatio", "source": "WebGLRenderer.md", "kb": built_kb.pk}

    added = admin_client.post("/admin/rag/everydayword/add/", form)
    again = admin_client.post("/admin/rag/everydayword/add/", {**form, "phrase": "发糊"})
    short = admin_client.post("/admin/rag/everydayword/add/", {**form, "phrase": "糊"})
    outcome = question_search(ask(question=question))

    assert added.status_code == 302 and EverydayWord.objects.get().phrase == "发糊"
    assert again.status_code == short.status_code == 200 and EverydayWord.objects.count() == 1
    assert "already in the table" in again.content.decode() and "at least 2" in short.content.decode()
    assert before.result.plan.expansions == () and outcome.result.plan.expansions == (("发糊", "setPixelRatio"),)
    assert (outcome.result.hits[0].chunk.class_name, outcome.result.hits[0].chunk.member) == (
        "WebGLRenderer", "setPixelRatio")
    record = RequestRecord.objects.get(request_id=outcome.request_id)
    assert record.plan["everyday_words"] == [{"phrase": "发糊", "terms": "setPixelRatio"}]


def test_a_knowledge_base_everyday_word_overrides_a_global_one(built_kb):
    EverydayWord.objects.create(kb=None, phrase="发糊", terms="setSize", source="WebGLRenderer.md")
    EverydayWord.objects.create(kb=built_kb, phrase="发糊", terms="setPixelRatio", source="WebGLRenderer.md")

    outcome = question_search(ask(question="画面发糊"))

    assert outcome.result.plan.expansions == (("发糊", "setPixelRatio"),)


def test_the_next_question_reads_a_version_activated_after_the_last_one(built_kb):
    before = question_search(ask())
    newer = index_build(built_kb)  # activates it, as `rag reindex` does while a batch runs

    after = question_search(ask())

    assert (before.version, after.version) == (built_kb.active_version.name, newer.name)


def test_the_next_question_reads_aliases_edited_after_the_last_one(built_kb):
    alias = ClassAlias.objects.create(kb=built_kb, alias="相机", class_name="PerspectiveCamera")
    first = question_search(ask(question="相机怎么用"))
    alias.class_name = "OrbitControls"
    alias.save()

    second = question_search(ask(question="相机怎么用"))
    alias.delete()
    third = question_search(ask(question="相机怎么用"))

    assert first.result.plan.hinted_classes == ("PerspectiveCamera",)
    assert second.result.plan.hinted_classes == ("OrbitControls",)
    assert third.result.plan.hinted_classes == ()



def test_the_next_question_reads_a_version_switched_without_touching_the_update_time(built_kb):
    from rag.models import KnowledgeBase

    old = built_kb.active_version
    newer = index_build(built_kb)
    before = question_search(ask())
    KnowledgeBase.objects.filter(pk=built_kb.pk).update(active_version=old)  # a bulk update: updated_at stays

    after = question_search(ask())

    assert (before.version, after.version) == (newer.name, old.name)


def test_the_next_question_after_the_knowledge_base_is_deleted_is_refused(built_kb):
    question_search(ask())
    built_kb.delete()

    with pytest.raises(ServiceError) as refused:
        question_search(ask())

    assert refused.value.code == "kb_not_found"

@pytest.mark.parametrize(
    "changes, code",
    [
        ({"question": ""}, "invalid_question"),
        ({"question": "   "}, "invalid_question"),
        ({"question": None}, "invalid_question"),
        ({"question": 42}, "invalid_question"),
        ({"question": "雾" * (LIMITS.question_chars + 1)}, "question_too_long"),
        ({"mode": "fuzzy"}, "invalid_mode"),
        ({"top_k": 0}, "invalid_top_k"),
        ({"top_k": 51}, "invalid_top_k"),
        ({"top_k": True}, "invalid_top_k"),
        ({"top_k": "5"}, "invalid_top_k"),
        ({"exclude": "abc"}, "invalid_exclude"),
        ({"exclude": [""]}, "invalid_exclude"),
        ({"exclude": ["x" * 65]}, "invalid_exclude"),
        ({"kb": ["a"]}, "invalid_kb"),
        ({"kb": "x" * 65}, "invalid_kb"),
        ({"kb": "nope"}, "kb_not_found"),
        ({"version": "nope"}, "version_not_found"),
    ],
)
def test_bad_values_have_stable_codes_and_leave_one_failure_record(built_kb, changes, code):
    with pytest.raises(ServiceError) as raised:
        question_search(ask(**changes))

    record = RequestRecord.objects.get()
    assert raised.value.code == code
    assert (record.error_code, record.outcome, record.kind, record.channel) == (code, Outcome.FAILED, "search", "cli")
    assert len(record.question) <= LIMITS.question_chars and len(record.kb) <= 64
    assert record.adopted == [] and record.index_version == ""


@pytest.mark.parametrize(
    "changes", [{"question": ""}, {"question": "雾" * (LIMITS.question_chars + 1)}, {"mode": "fuzzy"}, {"top_k": 0}]
)
def test_values_are_checked_before_the_database_is_read(django_assert_num_queries, changes):
    with django_assert_num_queries(0), pytest.raises(ServiceError):
        question_search(ask(record=False, **changes))


def test_a_knowledge_base_without_an_index_is_refused(corpus_copy):
    make_kb(corpus_copy)

    with pytest.raises(ServiceError) as raised:
        question_search(ask())

    assert (raised.value.code, raised.value.status) == ("no_active_version", 409)
    assert RequestRecord.objects.get().error_code == "no_active_version"


def test_the_default_knowledge_base_is_asked_when_none_is_named(built_kb, settings):
    settings.RAG_DEFAULT_KB = "sdk"

    outcome = question_search(ask(kb=None))

    assert outcome.kb == "sdk" and RequestRecord.objects.get().kb == "sdk"


# -- recording -----------------------------------------------------------------------------------------


def test_a_search_leaves_one_record_with_its_caller_plan_and_evidence(built_kb):
    caller = Caller(key_prefix="rkabc", tool="search_sdk_docs", arguments={"question": "Fog 的颜色", "top_k": 3},
                    session_id="s" * 80, transport="http", app="app-1")

    outcome = question_search(ask(top_k=3, caller=caller))

    record = RequestRecord.objects.get()
    assert record.request_id == outcome.request_id
    assert (record.channel, record.kind, record.outcome, record.error_code) == ("cli", "search", Outcome.OK, "")
    assert (record.api_key_prefix, record.tool, record.transport, record.app) == ("rkabc", "search_sdk_docs",
                                                                                 "http", "app-1")
    assert record.arguments == {"question": "Fog 的颜色", "top_k": 3} and record.session_id == "s" * 64
    assert [a["chunk_id"] for a in record.adopted] == [h.chunk.chunk_id for h in outcome.result.hits]
    assert record.hit_count == len(outcome.result.hits) and record.index_version == outcome.version
    assert {"plan", "embed", "dense", "bm25", "fuse", "adopt", "total"} <= set(record.timings)
    assert record.latency_ms > 0


def test_a_search_asked_not_to_record_leaves_none(built_kb):
    question_search(ask(record=False))

    assert not RequestRecord.objects.exists()


def test_chitchat_is_its_own_outcome_not_an_empty_result(built_kb):
    question_search(ask(question="你好"))
    question_answer(ask(question="今天天气真好，我们去公园散步吧"))

    assert list(RequestRecord.objects.values_list("outcome", flat=True)) == [Outcome.CHITCHAT, Outcome.CHITCHAT]


def test_an_unknown_class_is_an_empty_outcome(built_kb):
    question_answer(ask(question="NoSuchWidgetFactory 怎么用"))

    record = RequestRecord.objects.get()
    assert (record.outcome, record.reason, record.hit_count) == (Outcome.EMPTY, "class_not_in_catalog", 0)


def test_an_unexpected_failure_is_recorded_as_internal_and_raised(built_kb, monkeypatch):
    from rag.pipeline import get_engine

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(type(get_engine()), "searcher", explode)

    with pytest.raises(RuntimeError):
        question_search(ask())

    record = RequestRecord.objects.get()
    assert (record.error_code, record.outcome) == ("internal_error", Outcome.FAILED)


def test_a_refused_request_is_recorded_with_the_refusal(built_kb):
    refusal = ServiceError("rate_limited", "slow down", status=429)

    question_refused(ask(caller=Caller(key_prefix="rkabc", tool="ask_sdk_docs")), kind="chat", error=refusal)

    record = RequestRecord.objects.get()
    assert (record.kind, record.error_code, record.api_key_prefix, record.outcome) == ("chat", "rate_limited",
                                                                                      "rkabc", Outcome.FAILED)


# -- answering -----------------------------------------------------------------------------------------


def test_a_whole_answer_and_a_streamed_one_agree_and_each_leave_one_record(built_kb):
    whole = question_answer(ask(question="PerspectiveCamera 的 far 默认值"))
    events = list(question_answer(ask(question="PerspectiveCamera 的 far 默认值"), stream=True))

    assert isinstance(events[0], RetrievalEvent) and isinstance(events[-1], FinalEvent)
    streamed = events[-1].outcome
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == streamed.answer.text == whole.answer.text
    assert [h.chunk.chunk_id for h in streamed.result.hits] == [h.chunk.chunk_id for h in whole.result.hits]
    records = list(RequestRecord.objects.order_by("id"))
    assert [r.request_id for r in records] == [whole.request_id, streamed.request_id]
    assert all(r.kind == "chat" and r.mode == "extractive" and "generate" in r.timings for r in records)


class CountingMeter:
    """A token budget that counts reservations and what was settled."""

    def __init__(self):
        self.reserved = 0
        self.settled: list[int] = []

    @contextlib.contextmanager
    def reserve(self):
        self.reserved += 1
        meter = self

        class Reservation:
            def settle(self, tokens: int, *, model_called: bool = True) -> None:
                meter.settled.append(tokens)

        yield Reservation()


def test_the_meter_is_charged_only_when_a_model_answers(built_kb, llm_server, engine_settings):
    meter = CountingMeter()
    question_answer(ask(question="PerspectiveCamera 的 far 默认值", meter=meter))  # extractive: no model
    assert meter.reserved == 0

    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake")
    question_answer(ask(question="PerspectiveCamera 的 far 默认值", meter=meter))
    question_answer(ask(question="你好", meter=meter))  # chitchat never reaches the model

    assert meter.reserved == 1 and meter.settled == [120 + len(llm_server.default_text) // 4]
    assert len(llm_server.calls) == 1 and llm_server.calls[0]["body"]["stream"] is False


def test_a_spent_meter_is_a_recorded_failure(built_kb, llm_server, engine_settings):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake")

    class Spent:
        def reserve(self):
            raise ServiceError("token_pool_exhausted", "spent", status=429)

    with pytest.raises(ServiceError):
        question_answer(ask(question="PerspectiveCamera 的 far 默认值", meter=Spent()))

    record = RequestRecord.objects.get()
    assert (record.error_code, record.outcome) == ("token_pool_exhausted", Outcome.FAILED)
    assert record.adopted  # the evidence was found before the budget refused


def test_a_reader_that_leaves_mid_stream_hangs_up_and_is_recorded_as_cancelled(built_kb, llm_server,
                                                                               engine_settings):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake")
    llm_server.replies.append(("ok", "one two three four five six seven eight nine ten [1]"))
    tokens = []

    events = question_answer(ask(question="PerspectiveCamera 的 far 默认值"), stream=True,
                             cancelled=lambda: len(tokens) >= 2)
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(event.text)

    record = RequestRecord.objects.get()
    assert len(tokens) == 2
    assert (record.error_code, record.outcome) == ("cancelled", Outcome.CANCELLED)


def test_a_stream_closed_by_its_consumer_is_recorded_as_cancelled(built_kb):
    events = question_answer(ask(question="PerspectiveCamera 的 far 默认值"), stream=True)
    assert isinstance(next(events), RetrievalEvent)

    events.close()

    assert RequestRecord.objects.get().outcome == Outcome.CANCELLED
