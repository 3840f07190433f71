"""Rerank (E11): the rerank API client and the listwise LLM rerank against real local servers, the breaker,
and the rerank stage of a search on the fixture corpus."""

from __future__ import annotations

import dataclasses
import socket

import pytest

from infra.errors import ServiceError
from rag.engine.breaker import CircuitBreaker
from rag.engine.embed import QueryVectorCache
from rag.engine.index import VersionReader
from rag.engine.llm import ChatClient
from rag.engine.plan import Planner
from rag.engine.rerank import (
    RERANK_CANDIDATES,
    ApiReranker,
    LlmReranker,
    NoReranker,
    RerankResult,
    parse_llm_order,
    parse_rerank_body,
    reordered,
)
from rag.engine.search import Searcher
from rag.engine.steps import RerankStep
from rag.engine.types import Chunk, Hit, SearchOptions
from rag.models import Channel, RequestRecord
from rag.pipeline import get_engine
from rag.services.questions import QuestionRequest, question_search

API_KEY = "sk-rerank-secret"


def make_hit(name: str, text: str, rank: int) -> Hit:
    chunk = Chunk(chunk_id=f"id-{name}", source=f"{name}.md", title=name, class_name=name, class_alias="",
                  member="", heading_path=(name,), chunk_index=0, part=0, text=text)
    return Hit(chunk=chunk, score=1 / (60 + rank), source="rrf", rank=rank)


HITS = (
    make_hit("Fog", "Fog color near far: linear fog that grows denser with distance.", 1),
    make_hit("PerspectiveCamera", "fov: camera frustum vertical field of view.", 2),
    make_hit("Texture", "repeat: how many times the texture is repeated across the surface.", 3),
)


def ids(hits) -> list[str]:
    return [h.chunk.chunk_id for h in hits]


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_api_reranker(server, *, read_timeout=5.0, threshold=3, clock=None, **kwargs) -> ApiReranker:
    return ApiReranker(base_url=server.url, model="fake-rerank", api_key=API_KEY, timeout=(2.0, read_timeout),
                       breaker=CircuitBreaker(threshold=threshold, cooldown=30.0, clock=clock or FakeClock()),
                       **kwargs)


def make_llm_reranker(server, *, read_timeout=5.0, threshold=3) -> LlmReranker:
    client = ChatClient(base_url=server.url, model="fake-model", api_key="sk-test", timeout=(2.0, read_timeout),
                        temperature=0.0)
    return LlmReranker(client=client, breaker=CircuitBreaker(threshold=threshold, cooldown=30.0, clock=FakeClock()))


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# -- the rerank API ----------------------------------------------------------------------------------------


def test_the_rerank_api_reorders_the_hits_by_relevance(rerank_server):
    result = make_api_reranker(rerank_server).run("texture repeat", HITS)

    assert ids(result.hits) == ["id-Texture", "id-Fog", "id-PerspectiveCamera"]
    assert (result.backend, result.error, result.fell_back) == ("api", "", False)
    assert [h.rank for h in result.hits] == [1, 2, 3]
    assert [h.source for h in result.hits] == ["rerank"] * 3
    assert result.hits[0].score == 1.0 and result.hits[0].raw_score == HITS[2].score
    assert result.elapsed_ms > 0


def test_the_request_has_the_rerank_shape_with_the_key_as_bearer_token(rerank_server):
    reranker = make_api_reranker(rerank_server, passage_chars=40)

    reranker.run("texture repeat", HITS)

    call = rerank_server.calls[0]
    assert call["path"] == "/v1/rerank"
    assert call["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert set(call["body"]) == {"model", "query", "documents", "top_n"}
    assert (call["body"]["model"], call["body"]["query"], call["body"]["top_n"]) == ("fake-rerank", "texture repeat", 3)
    assert call["body"]["documents"][0].startswith("Fog\nFog color near far")
    assert all(len(document) <= 40 for document in call["body"]["documents"])
    assert API_KEY not in repr(reranker)


def test_dashscope_results_nested_in_output_are_read(rerank_server):
    rerank_server.replies.append(("dashscope", None))

    result = make_api_reranker(rerank_server).run("camera fov", HITS)

    assert (result.backend, ids(result.hits)[0]) == ("api", "id-PerspectiveCamera")


def test_hits_the_api_leaves_out_follow_in_their_fused_order(rerank_server):
    rerank_server.replies.append(("body", {"results": [{"index": 2, "relevance_score": 0.7}]}))

    result = make_api_reranker(rerank_server).run("texture", HITS)

    assert ids(result.hits) == ["id-Texture", "id-Fog", "id-PerspectiveCamera"]
    assert [h.source for h in result.hits] == ["rerank", "rrf", "rrf"]
    assert result.hits[1].score == HITS[0].score


def test_equal_scores_keep_the_order_the_api_gave():
    body = {"results": [{"index": 1, "relevance_score": 0.2}, {"index": 2, "relevance_score": 0.5},
                        {"index": 0, "relevance_score": 0.5}]}

    assert parse_rerank_body(body, 3) == [(2, 0.5), (0, 0.5), (1, 0.2)]


@pytest.mark.parametrize(
    "reply, error",
    [
        (("500", None), "rerank_http"),
        (("raw", b"not json at all"), "rerank_malformed"),
        (("body", {"results": [{"index": 7, "relevance_score": 0.9}]}), "rerank_malformed"),  # out of range
        (("body", {"results": [{"index": -1, "relevance_score": 0.9}]}), "rerank_malformed"),
        (("body", {"results": [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.8}]}),
         "rerank_malformed"),  # a document twice
        (("body", {"results": [{"index": 0, "relevance_score": "high"}]}), "rerank_malformed"),
        (("body", {"results": [{"index": 0, "relevance_score": float("nan")}]}), "rerank_malformed"),
        (("body", {"results": [{"index": True, "relevance_score": 0.9}]}), "rerank_malformed"),
        (("body", {"results": [{"index": "1", "relevance_score": 0.9}]}), "rerank_malformed"),
        (("body", {"results": ["first"]}), "rerank_malformed"),
        (("body", {"results": []}), "rerank_malformed"),
        (("body", {"data": [{"index": 0, "relevance_score": 0.9}]}), "rerank_malformed"),
        (("body", [0, 1, 2]), "rerank_malformed"),
    ],
)
def test_a_failed_rerank_call_keeps_the_fused_order(rerank_server, reply, error):
    rerank_server.replies.append(reply)

    result = make_api_reranker(rerank_server).run("texture repeat", HITS)

    assert result.hits == HITS
    assert result.backend == "none" and result.fell_back
    assert result.error.startswith(error + ":")
    assert API_KEY not in result.error


def test_a_rerank_api_slower_than_its_timeout_keeps_the_fused_order(rerank_server):
    rerank_server.delay = 1.0
    rerank_server.replies.append(("slow", None))

    result = make_api_reranker(rerank_server, read_timeout=0.2).run("texture repeat", HITS)

    assert (result.hits, result.backend) == (HITS, "none")
    assert result.error.startswith("rerank_timeout:")
    assert result.elapsed_ms < 900


def test_an_unreachable_rerank_api_keeps_the_fused_order():
    reranker = ApiReranker(base_url=closed_port_url(), model="m", timeout=(1.0, 1.0))

    result = reranker.run("texture repeat", HITS)

    assert (result.hits, result.backend) == (HITS, "none")
    assert result.error.startswith("rerank_connection:")


def test_the_breaker_opens_after_repeated_failures_and_the_api_is_skipped(rerank_server):
    clock = FakeClock()
    reranker = make_api_reranker(rerank_server, threshold=2, clock=clock)
    rerank_server.replies += [("500", None), ("500", None)]

    reranker.run("texture", HITS)
    reranker.run("texture", HITS)
    skipped = reranker.run("texture", HITS)

    assert len(rerank_server.calls) == 2
    assert reranker.breaker.state()["state"] == "open"
    assert (skipped.hits, skipped.backend) == (HITS, "none")
    assert skipped.error.startswith("rerank_circuit_open:")

    clock.now += 31  # half-open: one trial goes out, and its success closes the breaker
    trial = reranker.run("texture", HITS)

    assert (trial.backend, len(rerank_server.calls)) == ("api", 3)
    assert reranker.breaker.state()["state"] == "closed"


def test_no_hits_are_not_sent_to_the_api(rerank_server):
    result = make_api_reranker(rerank_server).run("texture", ())

    assert (result.hits, result.backend, rerank_server.calls) == ((), "none", [])


def test_no_reranker_keeps_the_fused_order():
    result = NoReranker().run("texture", HITS)

    assert (result.hits, result.backend, result.error) == (HITS, "none", "")


# -- listwise rerank through the generation model ---------------------------------------------------------


def test_the_model_ranks_the_numbered_passages(llm_server):
    llm_server.default_text = "[3, 1]"

    result = make_llm_reranker(llm_server).run("texture repeat", HITS)

    assert ids(result.hits) == ["id-Texture", "id-Fog", "id-PerspectiveCamera"]
    assert (result.backend, result.error) == ("llm", "")
    assert [h.source for h in result.hits] == ["rerank", "rerank", "rrf"]  # the one left out follows
    assert [round(h.score, 4) for h in result.hits[:2]] == [1.0, round(2 / 3, 4)]
    assert result.usage.prompt_tokens == 120


def test_the_rerank_prompt_numbers_the_passages_and_asks_for_a_json_array(llm_server):
    llm_server.default_text = "[1, 2, 3]"
    reranker = dataclasses.replace(make_llm_reranker(llm_server), passage_chars=30)

    reranker.run("texture repeat", HITS)

    body = llm_server.calls[0]["body"]
    prompt = body["messages"][1]["content"]
    assert "JSON array" in body["messages"][0]["content"]
    assert "Question: texture repeat" in prompt
    assert "[1] Fog\nFog color" in prompt and "[3] Texture\n" in prompt
    assert "denser with distance" not in prompt  # each passage is cut to passage_chars
    assert body["temperature"] == 0.0 and body["stream"] is False


@pytest.mark.parametrize(
    "reply, order",
    [
        ("<think>Texture is about repeat.</think>\n```json\n[3, 2, 1]\n```", [2, 1, 0]),
        ("Passage [3] answers it best: [3, 2, 1]", [2, 1, 0]),
        ("[2, 2, 1]", [1, 0, 2]),
    ],
)
def test_a_ranking_inside_fences_prose_or_with_repeats_is_read(llm_server, reply, order):
    llm_server.default_text = reply

    result = make_llm_reranker(llm_server).run("texture repeat", HITS)

    assert ids(result.hits) == [ids(HITS)[i] for i in order]
    assert result.backend == "llm"


@pytest.mark.parametrize("reply", ["Passage two is best.", "[]", "[0, 1]", "[4]", '["2", "1"]', "[1.5, 2]",
                                   "[true]", "{\"ranking\": 2}", ""])
def test_a_ranking_that_is_not_passage_numbers_keeps_the_fused_order(llm_server, reply):
    llm_server.default_text = reply
    reranker = make_llm_reranker(llm_server)

    result = reranker.run("texture repeat", HITS)

    assert (result.hits, result.backend) == (HITS, "none")
    assert result.error.startswith("rerank_malformed:")
    assert reranker.breaker.state()["failures"] == 0  # the model answered: not a failure of the model


@pytest.mark.parametrize("kind, error", [("500", "rerank_http"), ("slow", "rerank_timeout"),
                                         ("malformed", "rerank_malformed")])
def test_a_failed_model_call_keeps_the_fused_order_and_counts_for_the_breaker(llm_server, kind, error):
    llm_server.delay = 1.0
    llm_server.replies.append((kind, ""))
    reranker = make_llm_reranker(llm_server, read_timeout=0.2)

    result = reranker.run("texture repeat", HITS)

    assert (result.hits, result.backend) == (HITS, "none")
    assert result.error.startswith(error + ":")
    assert reranker.breaker.state()["failures"] == 1


def test_an_open_breaker_skips_the_model(llm_server):
    reranker = make_llm_reranker(llm_server, threshold=1)
    llm_server.replies.append(("500", ""))
    reranker.run("texture", HITS)

    result = reranker.run("texture", HITS)

    assert len(llm_server.calls) == 1
    assert result.error.startswith("rerank_circuit_open:")


def test_parse_llm_order_returns_zero_based_positions_without_repeats():
    assert parse_llm_order("[2, 3, 2]", 3) == [1, 2]
    with pytest.raises(ValueError):
        parse_llm_order("[2, 9]", 3)


# -- the rerank stage of a search ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader(built_index) -> VersionReader:
    return VersionReader.open(built_index.store, built_index.kb, built_index.version)


def make_searcher(reader, embedder, reranker=None, rerank_candidates=RERANK_CANDIDATES, **kwargs) -> Searcher:
    rerank = RerankStep(reranker, rerank_candidates) if reranker is not None else None
    return Searcher(reader=reader, queries=QueryVectorCache(embedder), planner=Planner(reader.catalog), rerank=rerank,
                    **kwargs)


@dataclasses.dataclass
class PromotingReranker:
    """Put one chunk first (score 1.0), the others after it in their order, and remember what it was sent."""

    chunk_id: str
    backend: str = "api"
    seen: list = dataclasses.field(default_factory=list)

    def run(self, question, hits):
        self.seen.append((question, tuple(hits)))
        first = [p for p, h in enumerate(hits) if h.chunk.chunk_id == self.chunk_id]
        order = [(p, 1.0) for p in first] + [(p, 0.5) for p in range(len(hits)) if p not in first]
        return RerankResult(hits=reordered(hits, order), backend=self.backend)


QUESTION = "PerspectiveCamera 的 fov 默认是多少"


def test_a_search_without_a_reranker_is_unchanged_and_says_so(reader, counting_embedder):
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)
    reranker = PromotingReranker("none")

    switched_off = make_searcher(reader, counting_embedder, reranker=reranker).run(QUESTION,
                                                                                   SearchOptions(rerank=False))

    assert (baseline.rerank, baseline.rerank_error, baseline.reranked) == ("none", "", ())
    assert "rerank" not in baseline.timings_ms and "rerank" not in switched_off.timings_ms
    assert ids(switched_off.hits) == ids(baseline.hits) and switched_off.hits == baseline.hits
    assert switched_off.fused == baseline.fused and reranker.seen == []


def test_a_search_reranks_its_best_fused_candidates_before_adoption(reader, counting_embedder):
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)
    own_class = [h for h in baseline.fused[:10] if h.chunk.class_name == "PerspectiveCamera"]
    promoted = own_class[-1].chunk.chunk_id  # the named class's weakest of the ten candidates
    reranker = PromotingReranker(promoted)

    result = make_searcher(reader, counting_embedder, reranker=reranker, rerank_candidates=10).run(QUESTION)

    question, sent = reranker.seen[0]
    assert question == baseline.plan.corrected_question
    assert ids(sent) == ids(baseline.fused[:10])
    assert (result.rerank, result.rerank_error) == ("api", "")
    assert result.hits[0].chunk.chunk_id == promoted
    assert (result.hits[0].source, result.hits[0].score) == ("rerank", 1.0)
    assert ids(result.reranked)[0] == promoted and len(result.reranked) == 10
    assert result.fused == baseline.fused  # the fused list stays the fusion's
    assert result.timings_ms["rerank"] >= 0


def test_excluded_chunks_are_not_sent_to_the_reranker(reader, counting_embedder):
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)
    first = baseline.fused[0].chunk.chunk_id
    reranker = PromotingReranker(first)

    result = make_searcher(reader, counting_embedder, reranker=reranker).run(QUESTION, SearchOptions(exclude=[first]))

    assert first not in ids(reranker.seen[0][1])
    assert first not in ids(result.hits)


def test_a_search_reranked_by_the_api_orders_candidates_by_its_scores(reader, counting_embedder, rerank_server):
    searcher = make_searcher(reader, counting_embedder, reranker=make_api_reranker(rerank_server),
                             rerank_candidates=8)

    result = searcher.run("Texture repeat wrapS")

    documents = rerank_server.calls[0]["body"]["documents"]
    scores = [h.score for h in result.reranked]
    assert len(documents) == 8 and result.rerank == "api"
    assert scores == sorted(scores, reverse=True) and len(scores) == 8
    assert (result.hits[0].chunk.class_name, result.hits[0].source) == ("Texture", "rerank")


def test_a_failing_rerank_api_leaves_the_search_as_without_it(reader, counting_embedder, rerank_server):
    baseline = make_searcher(reader, counting_embedder).run(QUESTION)
    rerank_server.replies.append(("500", None))

    result = make_searcher(reader, counting_embedder, reranker=make_api_reranker(rerank_server)).run(QUESTION)

    assert result.hits == baseline.hits
    assert result.rerank == "none" and result.rerank_error.startswith("rerank_http:")
    assert result.reranked == () and "rerank" in result.timings_ms


def test_a_call_that_asks_for_a_rerank_gets_the_configured_one_or_is_told_there_is_none(reader, counting_embedder):
    searcher = make_searcher(reader, counting_embedder)
    promoted = searcher.run(QUESTION).fused[3].chunk.chunk_id

    missing = searcher.run(QUESTION, SearchOptions(rerank=True))
    chosen = make_searcher(reader, counting_embedder, reranker=PromotingReranker(promoted, backend="llm")).run(
        QUESTION, SearchOptions(rerank=True))

    assert missing.rerank == "none" and missing.rerank_error.startswith("rerank_not_configured:")
    assert chosen.rerank == "llm" and chosen.reranked[0].chunk.chunk_id == promoted


def test_chitchat_is_not_reranked(reader, counting_embedder):
    reranker = PromotingReranker("none")

    result = make_searcher(reader, counting_embedder, reranker=reranker).run("今天中午吃什么好")

    assert result.plan.kind == "chitchat" and reranker.seen == []


# -- built from settings, asked through the question service --------------------------------------------------


def test_nothing_configured_means_no_reranker(engine_settings):
    engine_settings()

    engine = get_engine()

    assert (engine.reranker, engine.rerankers, engine.rewriter) == (None, {}, None)


def test_a_rerank_base_url_configures_the_api_reranker(engine_settings, rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="qwen-rerank", RERANK_API_KEY=API_KEY,
                    RERANK_TIMEOUT=3.0, RERANK_CANDIDATES=12, LLM_RERANK=True)

    engine = get_engine()

    assert isinstance(engine.reranker, ApiReranker) and set(engine.rerankers) == {"api"}
    assert (engine.reranker.model, engine.reranker.api_key, engine.reranker.timeout) == ("qwen-rerank", API_KEY,
                                                                                          (3.0, 3.0))
    assert engine.rerank_candidates == 12


def test_llm_rerank_needs_the_switch_and_a_generation_model(engine_settings, llm_server):
    engine_settings(LLM_RERANK=True)
    assert get_engine().reranker is None

    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake", LLM_RERANK=False)
    assert get_engine().reranker is None and isinstance(get_engine().rerankers["llm"], LlmReranker)

    engine_settings(LLM_RERANK=True, RERANK_TIMEOUT=4.0)
    reranker = get_engine().reranker
    assert isinstance(reranker, LlmReranker)
    assert (reranker.client.temperature, reranker.client.timeout[1]) == (0.0, 4.0)


@pytest.mark.django_db
def test_the_question_service_reranks_unless_the_request_says_not_to(built_kb, engine_settings, rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="m")
    request = QuestionRequest(question="Texture repeat wrapS", channel=Channel.CLI, kb="sdk")

    reranked = question_search(request)
    fused = question_search(dataclasses.replace(request, rerank=False))

    assert reranked.result.rerank == "api" and "rerank" in reranked.result.timings_ms
    assert fused.result.rerank == "none" and "rerank" not in fused.result.timings_ms
    assert len(rerank_server.calls) == 1
    assert RequestRecord.objects.filter(timings__has_key="rerank").count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("changes, code", [({"rerank": "yes"}, "invalid_rerank"), ({"rewrite": 1}, "invalid_rewrite")])
def test_rerank_and_rewrite_switches_must_be_booleans(changes, code):
    with pytest.raises(ServiceError) as raised:
        question_search(QuestionRequest(question="Fog", channel=Channel.CLI, kb="sdk", **changes))

    assert raised.value.code == code
