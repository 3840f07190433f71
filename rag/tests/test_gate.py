"""Chitchat as its own decision (E7): the lexicon, the exemplars and the corpus's vocabulary, on a docs-like corpus
that itself discusses chitchat and on the fixture corpus, with the real embedder."""

from __future__ import annotations

import textwrap

import pytest

from conftest import CountingEmbedder, make_store
from rag.engine.chunk import chunk_documents
from rag.engine.embed import QueryVectorCache
from rag.engine.gate import ChitchatGate, ExemplarVectors, weighted_coverage
from rag.engine.index import VersionReader
from rag.engine.ingest import read_folder
from rag.engine.plan import Planner
from rag.engine.search import Searcher
from rag.engine.steps import GateStep
from rag.engine.types import Plan

# A documentation set about a documentation assistant: it describes greetings, fixed replies and the model,
# so off-topic probes and greetings sit close to it, as they do to the bundled docs/.
ASSISTANT_DOCS = {
    "en/retrieval.md": """
        # Retrieval

        The assistant answers questions about the documentation from retrieved sections.

        ## Question planning

        ### chitchat

        Greetings, thanks and questions about the assistant itself ("hello", "who are you?", "which model
        are you?") get a fixed chitchat reply before anything is retrieved: the assistant says it answers
        questions about this documentation. Small talk about the weather or a joke gets the same reply.

        ### citations

        Every answer cites the sections it used as [1], [2]. Citations are checked against this request's
        evidence; a marker that names no evidence is dropped. Set `RAG_CITATIONS_MAX` to limit how many
        citations an answer shows.

        ## Feedback

        ### feedback

        A user can give an answer a thumbs-down with an optional reason. Feedback is stored with the
        request and shown on the ops site. Configure who may read feedback with `RAG_OPS_GROUP`.
        """,
    "en/configuration.md": """
        # Configuration

        Settings come from the environment.

        ## Generation

        ### RAG_GENERATION_MODEL

        The model name sent to the OpenAI-compatible chat API, for example deepseek-chat.

        ### RAG_KEEP_VERSIONS

        Default: 5. How many index versions are kept per knowledge base; older ones are removed.

        ## Storage

        ### RAG_DATA_DIR

        Default: ./data. The folder that holds the database, the vector tables and the BM25 files.
        """,
    "zh/retrieval.md": """
        # 检索流程（Retrieval）

        助手根据检索到的文档片段回答关于文档的问题。

        ## 问题理解

        ### chitchat（闲聊）

        问候、感谢以及关于助手本身的问题（「你好」「你是谁？」「你用的是什么模型？」）在检索之前就得到固定的闲聊回复，
        说明助手只回答关于本文档的问题。聊天气、讲笑话也得到同样的回复。

        ### citations（引用）

        每条回答用 [1]、[2] 标出引用的片段，引用会与本次请求的证据核对，不对应证据的编号会被去掉。

        ## 索引

        ### reindex（重建索引）

        用 `rag reindex` 重新构建知识库的索引，构建完成并校验通过后新版本生效。
        """,
}

DOC_QUESTIONS = [
    "How do I configure citations?",
    "How do I configure feedback?",
    "How many index versions are kept?",
    "What does the data directory hold?",
    "怎么重建索引？",
    "引用是怎么核对的？",
    "How do I change which chat model answers?",
]
CHITCHAT_QUESTIONS = [
    "你好",
    "hello",
    "你好，你是谁？",
    "明天会下雨吗？要不要带伞",
    "Tell me a joke about cats.",
    "What should I cook for dinner tonight?",
    "推荐一部好看的电影吧",
]


@pytest.fixture(scope="module")
def assistant_reader(tmp_path_factory, real_embedder) -> VersionReader:
    folder = tmp_path_factory.mktemp("assistant-docs")
    for name, text in ASSISTANT_DOCS.items():
        (folder / "pages" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "pages" / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    store = make_store(folder)
    store.build("assistant", "v1", chunk_documents(read_folder(folder / "pages")), real_embedder)
    return VersionReader.open(store, "assistant", "v1")


@pytest.fixture(scope="module")
def fixture_reader(built_index) -> VersionReader:
    return VersionReader.open(built_index.store, built_index.kb, built_index.version)


def make_searcher(reader, embedder, gate=None, **kwargs) -> Searcher:
    return Searcher(reader=reader, queries=QueryVectorCache(embedder), planner=Planner(reader.catalog),
                    gate=GateStep(gate) if gate is not None else GateStep(), **kwargs)


def make_plan(**names) -> Plan:
    return Plan(question="q", corrected_question="q", kind="doc", **names)


# -- the decision ---------------------------------------------------------------------------------------


def test_a_question_closer_to_a_chitchat_exemplar_than_to_the_corpus_is_chitchat():
    gate = ChitchatGate(exemplar_margin=0.02)

    closer = gate.is_chitchat(make_plan(), 0.85, 0.0, None, exemplar_similarity=0.90, weighted_coverage=0.1)
    within_margin = gate.is_chitchat(make_plan(), 0.85, 0.0, None, exemplar_similarity=0.86, weighted_coverage=0.1)

    assert (closer, within_margin) == (True, False)


def test_a_question_in_the_corpus_vocabulary_is_never_chitchat_by_distance():
    gate = ChitchatGate(vocabulary_share=0.6)

    far_but_in_vocabulary = gate.is_chitchat(make_plan(), 0.50, 1.0, 0.95, exemplar_similarity=0.99,
                                             weighted_coverage=0.8)
    far_and_foreign = gate.is_chitchat(make_plan(), 0.50, 0.2, 0.95, exemplar_similarity=0.40,
                                       weighted_coverage=0.2)

    assert (far_but_in_vocabulary, far_and_foreign) == (False, True)


def test_a_question_in_the_corpus_vocabulary_is_not_weak_evidence():
    gate = ChitchatGate()

    assert gate.is_weak(make_plan(), 0.50, 1.0, 0.95, weighted_coverage=0.9) is False
    assert gate.is_weak(make_plan(), 0.50, 1.0, 0.95, weighted_coverage=0.1) is True


def test_a_question_naming_a_class_is_never_chitchat_even_near_an_exemplar():
    gate = ChitchatGate()

    verdicts = [gate.is_chitchat(make_plan(**names), 0.5, 0.0, 0.9, exemplar_similarity=0.99, weighted_coverage=0.0)
                for names in ({"classes": ("Fog",)}, {"hinted_classes": ("Fog",)}, {"members": ("near",)})]

    assert verdicts == [False, False, False]


def test_weighted_coverage_counts_rare_words_most():
    frequencies = {"use": 90, "write": 40, "citation": 3}

    rare_known = weighted_coverage(["citation", "poem"], lambda t: frequencies.get(t, 0), 100)
    common_known = weighted_coverage(["write", "poem"], lambda t: frequencies.get(t, 0), 100)
    all_known = weighted_coverage(["use", "citation"], lambda t: frequencies.get(t, 0), 100)

    assert common_known < 0.3 < rare_known < all_known == 1.0
    assert weighted_coverage([], lambda t: 0, 100) == 0.0


def test_exemplars_are_embedded_once_per_model(real_embedder):
    embedder = CountingEmbedder(real_embedder)
    exemplars = ExemplarVectors(texts=("hello", "tell me a joke"))

    first = exemplars.vectors(embedder)
    second = exemplars.vectors(embedder)

    assert embedder.query_calls == ["hello", "tell me a joke"]
    assert first is second and first.shape == (2, real_embedder.dimension)


# -- on a corpus that discusses chitchat ------------------------------------------------------------------


@pytest.mark.parametrize("question", DOC_QUESTIONS)
def test_documentation_questions_are_answered_on_a_corpus_that_discusses_chitchat(
        assistant_reader, real_embedder, question):
    result = make_searcher(assistant_reader, real_embedder).run(question)

    assert result.plan.kind == "doc"
    assert result.hits and not result.weak_evidence


@pytest.mark.parametrize("question", CHITCHAT_QUESTIONS)
def test_small_talk_is_chitchat_on_a_corpus_that_discusses_chitchat(assistant_reader, real_embedder, question):
    result = make_searcher(assistant_reader, real_embedder).run(question)

    assert (result.plan.kind, result.hits) == ("chitchat", ())


@pytest.mark.parametrize("question", CHITCHAT_QUESTIONS[3:])
def test_the_exemplars_alone_tell_small_talk_without_the_probe_calibration(assistant_reader, real_embedder, question):
    no_probes = ChitchatGate(margin=-10.0)  # the probe rule never fires: only the exemplars decide

    result = make_searcher(assistant_reader, real_embedder, gate=no_probes).run(question)

    assert result.plan.kind == "chitchat"


# -- on the fixture corpus (a 3D engine's API reference) -------------------------------------------------


@pytest.mark.parametrize("question", ["今天中午吃什么好", "给我讲个笑话吧", "Can you recommend a good movie for tonight?",
                                      "你是哪个公司开发的？", "hello, how is your day going?"])
def test_small_talk_is_chitchat_on_the_fixture_corpus(fixture_reader, real_embedder, question):
    result = make_searcher(fixture_reader, real_embedder).run(question)

    assert (result.plan.kind, result.hits) == ("chitchat", ())


@pytest.mark.parametrize("question", ["远处的东西怎么慢慢变淡看不清", "鼠标点一下怎么知道点中了哪个物体",
                                      "想用鼠标拖着让镜头绕着模型转",
                                      "画面边缘锯齿很明显怎么办"])
def test_colloquial_questions_naming_nothing_are_searched_on_the_fixture_corpus(
        fixture_reader, real_embedder, question):
    result = make_searcher(fixture_reader, real_embedder).run(question)

    assert result.plan.kind == "doc" and result.hits
