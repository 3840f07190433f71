"""Query rewriting (seed 002's agent enhanced search): the model's keywords against a real local chat server,
and the rewrite routes of a search on the fixture corpus, fused with the question's own."""

from __future__ import annotations

import pytest

from rag.engine.breaker import CircuitBreaker
from rag.engine.embed import QueryVectorCache
from rag.engine.index import VersionReader
from rag.engine.llm import ChatClient
from rag.engine.plan import Planner
from rag.engine.rewrite import MAX_KEYWORD_CHARS, QueryRewriter, parse_keywords
from rag.engine.search import Searcher
from rag.engine.steps import RewriteStep
from rag.engine.types import RouteKind, SearchOptions
from rag.pipeline import get_engine


def make_rewriter(llm_server, *, read_timeout=5.0, threshold=3) -> QueryRewriter:
    client = ChatClient(base_url=llm_server.url, model="fake-model", api_key="sk-test", timeout=(2.0, read_timeout),
                        temperature=0.0)
    return QueryRewriter(client=client, breaker=CircuitBreaker(threshold=threshold, cooldown=30.0))


# -- the keywords ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, keywords",
    [
        ("Fog near far 雾 远处", "Fog near far 雾 远处"),
        ("```\nFog.near Fog.far\n```", "Fog.near Fog.far"),
        ("<think>The user means fog.</think>Fog 雾", "Fog 雾"),
        ("Keywords: PerspectiveCamera fov", "PerspectiveCamera fov"),
        ("关键词：透视相机 PerspectiveCamera", "透视相机 PerspectiveCamera"),
        ("- Fog\n- near\n- 雾", "Fog near 雾"),
        ("1. Texture\n2. repeat", "Texture repeat"),
    ],
)
def test_the_reply_is_read_as_one_line_of_keywords(reply, keywords):
    assert parse_keywords(reply) == keywords


@pytest.mark.parametrize("reply", ["", "   ", "```\n```", "<think>hmm</think>", "x" * (MAX_KEYWORD_CHARS + 1)])
def test_an_empty_or_overlong_reply_is_refused(reply):
    with pytest.raises(ValueError):
        parse_keywords(reply)


def test_the_rewriter_asks_the_model_for_keywords(llm_server):
    llm_server.default_text = "PerspectiveCamera fov 视角 默认值"

    rewrite = make_rewriter(llm_server).run("相机的视角默认多大")

    body = llm_server.calls[0]["body"]
    assert (rewrite.keywords, rewrite.error) == ("PerspectiveCamera fov 视角 默认值", "")
    assert body["messages"][1] == {"role": "user", "content": "相机的视角默认多大"}
    assert "exactly as written" in body["messages"][0]["content"]
    assert "language of the question" in body["messages"][0]["content"]
    assert rewrite.elapsed_ms > 0 and rewrite.usage.prompt_tokens == 120


@pytest.mark.parametrize("kind, text, error", [
    ("500", "", "rewrite_http"),
    ("slow", "Fog", "rewrite_timeout"),
    ("malformed", "", "rewrite_malformed"),
    ("ok", "", "rewrite_malformed"),
    ("ok", "雾" * (MAX_KEYWORD_CHARS + 1), "rewrite_malformed"),
])
def test_a_failed_rewrite_gives_no_keywords_and_says_why(llm_server, kind, text, error):
    llm_server.delay = 1.0
    llm_server.replies.append((kind, text))

    rewrite = make_rewriter(llm_server, read_timeout=0.2).run("雾怎么设置")

    assert rewrite.keywords == ""
    assert rewrite.error.startswith(error + ":")
    assert "sk-test" not in rewrite.error


def test_a_reply_that_repeats_the_question_adds_no_keywords(llm_server):
    llm_server.default_text = "Fog  color"

    rewrite = make_rewriter(llm_server).run("fog color")

    assert (rewrite.keywords, rewrite.error) == ("", "")


def test_the_breaker_skips_a_failing_model(llm_server):
    rewriter = make_rewriter(llm_server, threshold=2)
    llm_server.replies += [("500", ""), ("500", "")]
    rewriter.run("雾")
    rewriter.run("雾")

    rewrite = rewriter.run("雾")

    assert len(llm_server.calls) == 2
    assert rewrite.keywords == "" and rewrite.error.startswith("rewrite_circuit_open:")


# -- the rewrite routes of a search ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader(built_index) -> VersionReader:
    return VersionReader.open(built_index.store, built_index.kb, built_index.version)


def make_searcher(reader, embedder, rewriter=None, **kwargs) -> Searcher:
    rewrite = RewriteStep(rewriter) if rewriter is not None else None
    return Searcher(reader=reader, queries=QueryVectorCache(embedder), planner=Planner(reader.catalog),
                    rewrite=rewrite, **kwargs)


QUESTION = "远处的东西怎么慢慢变得看不清"


def test_a_rewrite_is_searched_beside_the_question_and_fused(reader, counting_embedder, llm_server):
    llm_server.default_text = "Fog near far 雾 远处 颜色"
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)

    result = make_searcher(reader, counting_embedder, rewriter=make_rewriter(llm_server)).run(QUESTION)

    rewrite_routes = {r.name: r for r in result.rankings if r.kind in (RouteKind.DENSE_REWRITE, RouteKind.BM25_REWRITE)}
    assert result.rewrite == "Fog near far 雾 远处 颜色" and result.rewrite_error == ""
    # Weighted as the question's own whole-question routes: with no class named, BM25 counts as much as vectors.
    question_weight = next(r.weight for r in result.rankings if r.name == "bm25:question")
    assert {name: r.weight for name, r in rewrite_routes.items()} == {"dense:rewrite": 1.0,
                                                                       "bm25:rewrite": question_weight}
    assert question_weight == 1.0
    assert [r.name for r in result.rankings[:len(baseline.rankings)]] == [r.name for r in baseline.rankings]
    assert counting_embedder.query_calls[-1] == "Fog near far 雾 远处 颜色"
    assert {"rewrite", "rewrite_search"} <= set(result.timings_ms)
    assert llm_server.calls[0]["body"]["messages"][1]["content"] == baseline.plan.corrected_question

    # The chunk both rewrite routes rank first gains their reciprocal ranks in the fusion.
    top = rewrite_routes["bm25:rewrite"].hits[0].chunk.chunk_id
    before = {h.chunk.chunk_id: h.score for h in baseline.fused}
    after = {h.chunk.chunk_id: h.score for h in result.fused}
    assert after[top] > before.get(top, 0.0)
    assert "Fog" in [h.chunk.class_name for h in result.hits[:3]]


@pytest.mark.parametrize("mode, route", [("vector", "dense:rewrite"), ("bm25", "bm25:rewrite")])
def test_a_single_route_mode_searches_the_rewrite_on_that_route_only(reader, counting_embedder, llm_server,
                                                                     mode, route):
    llm_server.default_text = "Fog near far"

    result = make_searcher(reader, counting_embedder, rewriter=make_rewriter(llm_server)).run(
        QUESTION, SearchOptions(mode=mode))

    assert [r.name for r in result.rankings if r.name.endswith(":rewrite")] == [route]


def test_a_failed_rewrite_leaves_the_search_as_without_it(reader, counting_embedder, llm_server):
    llm_server.replies.append(("500", ""))
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)

    result = make_searcher(reader, counting_embedder, rewriter=make_rewriter(llm_server)).run(QUESTION)

    assert result.hits == baseline.hits and result.fused == baseline.fused
    assert result.rankings == baseline.rankings
    assert result.rewrite == "" and result.rewrite_error.startswith("rewrite_http:")
    assert "rewrite" in result.timings_ms and "rewrite_search" not in result.timings_ms


def test_a_call_can_switch_the_rewrite_off_or_ask_for_the_configured_one(reader, counting_embedder, llm_server):
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)

    off = make_searcher(reader, counting_embedder, rewriter=make_rewriter(llm_server)).run(
        QUESTION, SearchOptions(rewrite=False))
    missing = make_searcher(reader, counting_embedder).run(QUESTION, SearchOptions(rewrite=True))
    chosen = make_searcher(reader, counting_embedder, rewriter=make_rewriter(llm_server)).run(
        QUESTION, SearchOptions(rewrite=True))

    assert off.hits == baseline.hits and off.rankings == baseline.rankings and "rewrite" not in off.timings_ms
    assert (baseline.rewrite, baseline.rewrite_error) == ("", "")
    assert missing.hits == baseline.hits and missing.rewrite_error.startswith("rewrite_not_configured:")
    assert chosen.rewrite == llm_server.default_text
    assert len(llm_server.calls) == 1  # only the call that chose a rewriter asked the model


def test_chitchat_and_unknown_classes_are_never_rewritten(reader, counting_embedder, llm_server):
    searcher = make_searcher(reader, counting_embedder, rewriter=make_rewriter(llm_server))

    searcher.run("今天中午吃什么好")
    searcher.run("How do I use VolumetricFogRenderer?")

    assert llm_server.calls == []


# -- built from settings ---------------------------------------------------------------------------------------


def test_query_rewriting_needs_the_switch_and_a_generation_model(engine_settings, llm_server):
    engine_settings(QUERY_REWRITE=True)
    assert get_engine().rewriter is None

    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake", QUERY_REWRITE=False)
    assert get_engine().rewriter is None

    engine_settings(QUERY_REWRITE=True, QUERY_REWRITE_TIMEOUT=2.5)
    rewriter = get_engine().rewriter
    assert isinstance(rewriter, QueryRewriter)
    assert (rewriter.client.model, rewriter.client.temperature, rewriter.client.timeout[1]) == ("fake", 0.0, 2.5)
