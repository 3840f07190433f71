"""The routes (E5) on the fixture corpus: each route's rankings, their kinds and weights, the keyword routes'
budget, fusion by those weights, the chitchat gate, and a route added by registration."""

from __future__ import annotations

import dataclasses

import pytest

from rag.engine.embed import QueryVectorCache
from rag.engine.fuse import RRF_K, rrf_fuse
from rag.engine.gate import ChitchatGate
from rag.engine.index import VersionReader
from rag.engine.plan import Planner
from rag.engine.routes import (DEFAULT_ROUTES, MAX_BM25_ROUTES, ROUTE_WEIGHTS, Bm25ClassRoute, Bm25HeadRoute,
                               Bm25MemberRoute, Bm25QuestionRoute, DenseClassRoute, DenseRoute, Query, load_routes)
from rag.engine.search import Searcher
from rag.engine.text import tokenize
from rag.engine.types import Plan, RouteKind, SearchOptions


@pytest.fixture(scope="module")
def reader(built_index) -> VersionReader:
    return VersionReader.open(built_index.store, built_index.kb, built_index.version)


def make_plan(reader, question: str) -> Plan:
    return Planner(reader.catalog).run(question)


def make_query(reader, question: str, embedder=None) -> Query:
    plan = make_plan(reader, question)
    return Query(plan=plan, reader=reader, queries=QueryVectorCache(embedder), tokens=tokenize(plan.corrected_question))


@dataclasses.dataclass
class Ran:
    query: Query
    rankings: list


def run_routes(query: Query, *routes) -> Ran:
    return Ran(query, [ranking for route in routes for ranking in route.run(query)])


def run_dense(reader, embedder, question: str) -> Ran:
    return run_routes(make_query(reader, question, embedder), DenseRoute(), DenseClassRoute())


def run_bm25(reader, question: str) -> Ran:
    return run_routes(make_query(reader, question), Bm25QuestionRoute(), Bm25ClassRoute(), Bm25HeadRoute(),
                      Bm25MemberRoute())


def names_kinds_weights(rankings) -> list[tuple[str, RouteKind, float]]:
    return [(r.name, r.kind, r.weight) for r in rankings]


# -- route kinds and weights -------------------------------------------------------------------------


def test_every_route_kind_has_a_weight_and_only_four_differ_from_one():
    differing = {kind: weight for kind, weight in ROUTE_WEIGHTS.items() if weight != 1.0}

    assert set(ROUTE_WEIGHTS) == set(RouteKind)
    assert differing == {RouteKind.DENSE_CLASS: 2.0, RouteKind.DENSE_FIELD: 2.0, RouteKind.BM25_QUESTION: 0.5,
                         RouteKind.BM25_REWRITE: 0.5}


def test_a_route_kind_names_its_retriever_family():
    families = {kind: kind.source for kind in RouteKind}

    assert families == {RouteKind.DENSE: "dense", RouteKind.DENSE_CLASS: "dense", RouteKind.DENSE_FIELD: "dense",
                        RouteKind.BM25_QUESTION: "bm25",
                        RouteKind.BM25_CLASS: "bm25", RouteKind.BM25_HEAD: "bm25", RouteKind.BM25_MEMBER: "bm25",
                        RouteKind.DENSE_REWRITE: "dense", RouteKind.BM25_REWRITE: "bm25"}


# -- the dense routes --------------------------------------------------------------------------------


def test_the_dense_routes_rank_globally_and_within_each_named_class(reader, counting_embedder):
    dense = run_dense(reader, counting_embedder, "PerspectiveCamera 和 OrbitControls 的区别")

    assert names_kinds_weights(dense.rankings) == [
        ("dense", RouteKind.DENSE, 1.0),
        ("dense:class:PerspectiveCamera", RouteKind.DENSE_CLASS, 2.0),
        ("dense:field:PerspectiveCamera", RouteKind.DENSE_FIELD, 2.0),
        ("dense:class:OrbitControls", RouteKind.DENSE_CLASS, 2.0),
        ("dense:field:OrbitControls", RouteKind.DENSE_FIELD, 2.0),
    ]
    assert {h.chunk.class_name for h in dense.rankings[1].hits + dense.rankings[2].hits} == {"PerspectiveCamera"}
    assert {h.chunk.class_name for h in dense.rankings[3].hits + dense.rankings[4].hits} == {"OrbitControls"}
    assert {h.source for r in dense.rankings for h in r.hits} == {"dense"}


@pytest.mark.parametrize("question, member", [
    ("PerspectiveCamera zoom in closer", "zoom"),
    ("PerspectiveCamera 改了参数后画面没变", "updateProjectionMatrix"),  # "call it after changing the parameters"
])
def test_the_field_route_ranks_a_class_by_what_its_members_are_for(reader, real_embedder, question, member):
    dense = run_dense(reader, real_embedder, question)

    field = next(r for r in dense.rankings if r.kind is RouteKind.DENSE_FIELD)
    assert field.hits[0].chunk.member == member
    assert {h.chunk.class_name for h in field.hits} == {"PerspectiveCamera"}


def test_the_query_embeds_the_question_once_for_every_route_and_keeps_every_similarity(reader, counting_embedder):
    dense = run_dense(reader, counting_embedder, "PerspectiveCamera 的 fov 默认是多少")
    query = dense.query

    best = dense.rankings[0].hits[0]
    assert counting_embedder.query_calls == ["PerspectiveCamera 的 fov 默认是多少"]
    assert query.dense_scores().shape == (len(reader.chunks),)
    assert query.best_similarity == best.score == pytest.approx(float(query.dense_scores().max()))
    assert query.embed_cached is False
    assert [h.rank for h in dense.rankings[0].hits[:3]] == [1, 2, 3]


def test_a_query_no_route_read_has_embedded_nothing(reader, counting_embedder):
    query = make_query(reader, "今天中午吃什么好", counting_embedder)

    untouched = (query.embedded, counting_embedder.query_calls[:])
    similarity = query.best_similarity

    assert untouched == (False, [])
    assert query.embedded and 0.0 < similarity < 1.0


def test_a_version_searched_through_lancedb_gets_one_dense_ranking_and_no_class_ranking(built_index,
                                                                                       counting_embedder):
    store = dataclasses.replace(built_index.store, ann_min_vectors=10)
    reader = VersionReader.open(store, built_index.kb, built_index.version)

    dense = run_dense(reader, counting_embedder, "PerspectiveCamera 的 fov 默认是多少")

    assert dense.query.dense_scores() is None
    assert names_kinds_weights(dense.rankings) == [("dense", RouteKind.DENSE, 1.0)]
    assert dense.query.best_similarity == dense.rankings[0].hits[0].score


# -- the BM25 routes ---------------------------------------------------------------------------------


def test_the_bm25_routes_are_question_class_head_and_member(reader):
    bm25 = run_bm25(reader, "WebGLRenderer 的 setPixelRatio 怎么用")

    assert names_kinds_weights(bm25.rankings) == [
        ("bm25:question", RouteKind.BM25_QUESTION, 0.5),
        ("bm25:class:WebGLRenderer", RouteKind.BM25_CLASS, 1.0),
        ("bm25:head:WebGLRenderer", RouteKind.BM25_HEAD, 1.0),
        ("bm25:member:setPixelRatio", RouteKind.BM25_MEMBER, 1.0),
    ]
    assert {h.chunk.member for h in bm25.rankings[3].hits} == {"setPixelRatio"}
    assert {h.source for r in bm25.rankings for h in r.hits} == {"bm25"}
    assert bm25.query.question_scores().shape == (len(reader.chunks),)


def test_a_class_route_reads_only_its_class(reader):
    bm25 = run_bm25(reader, "纹理怎么重复平铺")

    texture = next(r for r in bm25.rankings if r.kind is RouteKind.BM25_CLASS)
    assert texture.name == "bm25:class:Texture"
    assert {h.chunk.class_name for h in texture.hits} == {"Texture"}


def test_a_search_stops_its_keyword_routes_at_6_rankings_the_whole_question_first(reader, counting_embedder):
    searcher = Searcher(reader=reader, queries=QueryVectorCache(counting_embedder), planner=Planner(reader.catalog))
    question = "PerspectiveCamera OrbitControls WebGLRenderer Fog Texture Raycaster Color 的 near far fov"

    every = run_bm25(reader, question).rankings
    result = searcher.run(question, SearchOptions(mode="bm25"))

    assert len(every) > MAX_BM25_ROUTES == 6
    assert [r.kind for r in result.rankings] == [RouteKind.BM25_QUESTION] + [RouteKind.BM25_CLASS] * 5


def test_a_route_that_finds_nothing_is_left_out_but_the_whole_question_stays(reader):
    bm25 = run_bm25(reader, "zzzqqq")

    assert [(r.name, r.hits) for r in bm25.rankings] == [("bm25:question", ())]


# -- fusion by kind weight ---------------------------------------------------------------------------


def test_fusion_sums_each_ranking_weight_over_k_plus_rank(reader, counting_embedder):
    searcher = Searcher(reader=reader, queries=QueryVectorCache(counting_embedder), planner=Planner(reader.catalog))
    result = searcher.run("PerspectiveCamera 的 fov 默认是多少")
    expected: dict[str, float] = {}
    for ranking in result.rankings:
        for hit in ranking.hits:
            expected[hit.chunk.chunk_id] = expected.get(hit.chunk.chunk_id, 0.0) + ranking.weight / (RRF_K + hit.rank)

    fused = dict(rrf_fuse(result.rankings))

    assert {r.kind for r in result.rankings} >= {RouteKind.DENSE_CLASS, RouteKind.BM25_QUESTION}
    assert fused == pytest.approx(expected)
    assert [(h.chunk.chunk_id, h.score) for h in result.fused] == list(fused.items())[: len(result.fused)]


def test_a_heavier_ranking_outweighs_a_lighter_one_at_the_same_rank(reader, counting_embedder):
    dense = run_dense(reader, counting_embedder, "PerspectiveCamera 和 OrbitControls 的区别")
    camera, controls = dense.rankings[1], dense.rankings[2]
    lighter_camera = dataclasses.replace(camera, weight=ROUTE_WEIGHTS[RouteKind.DENSE])

    tied = rrf_fuse([camera, controls])[0][0]
    outweighed = rrf_fuse([lighter_camera, controls])[0][0]

    assert tied == camera.hits[0].chunk.chunk_id  # equal weights: the first ranking wins the tie
    assert outweighed == controls.hits[0].chunk.chunk_id


# -- the chitchat gate -------------------------------------------------------------------------------


def make_gate_plan(**names) -> Plan:
    return Plan(question="q", corrected_question="q", kind="doc", **names)


def test_the_gate_lets_through_a_question_that_names_a_class_or_member():
    gate = ChitchatGate()

    verdicts = [gate.is_chitchat(make_gate_plan(**names), 0.0, 0.0, 0.9)
                for names in ({"classes": ("Fog",)}, {"hinted_classes": ("Fog",)}, {"members": ("near",)})]

    assert verdicts == [False, False, False]


def test_the_gate_calls_chitchat_what_is_not_closer_than_small_talk_by_the_margin():
    gate = ChitchatGate(margin=0.05, coverage_weight=0.1)
    plan = make_gate_plan()

    below = gate.is_chitchat(plan, 0.75, 0.5, 0.80)  # 0.75 + 0.05 is below 0.80 + 0.05
    above = gate.is_chitchat(plan, 0.80, 0.5, 0.80)  # 0.80 + 0.05 is not
    unmeasured = gate.is_chitchat(plan, 0.0, 0.0, None)

    assert (below, above, unmeasured) == (True, False, False)


def test_weak_evidence_has_no_margin_and_ignores_hinted_classes():
    gate = ChitchatGate(margin=0.05, coverage_weight=0.1)

    within_margin = gate.is_weak(make_gate_plan(), 0.77, 0.5, 0.80)  # chitchat by the margin, not weak
    below = gate.is_weak(make_gate_plan(hinted_classes=("Fog",)), 0.60, 0.5, 0.80)
    named = gate.is_weak(make_gate_plan(classes=("Fog",)), 0.0, 0.0, 0.80)

    assert (within_margin, below, named) == (False, True, False)


# -- a route added by registration ---------------------------------------------------------------------


class FirstChunkOfEachClass:
    """A route written for this test: the first chunk of each named class, as a dense ranking."""

    stage = side = "dense"

    def run(self, query):
        from rag.engine.routes import make_ranking

        firsts = [next(i for i, c in enumerate(query.reader.chunks) if c.class_name == name)
                  for name in query.plan.classes]
        yield make_ranking(RouteKind.DENSE, firsts, [1.0] * len(firsts), query.reader, "first")


def test_a_route_is_one_class_and_one_line_in_the_list_of_routes(reader, counting_embedder):
    routes = load_routes([*DEFAULT_ROUTES, f"{__name__}.FirstChunkOfEachClass"])
    searcher = Searcher(reader=reader, queries=QueryVectorCache(counting_embedder), planner=Planner(reader.catalog),
                        routes=routes)

    result = searcher.run("PerspectiveCamera 的 fov 默认是多少")
    vector_only = searcher.run("PerspectiveCamera 的 fov 默认是多少", SearchOptions(mode="bm25"))

    assert "dense:first" in [r.name for r in result.rankings]
    assert "dense:first" not in [r.name for r in vector_only.rankings]  # a dense route: not in a BM25-only search


def test_a_route_that_does_not_import_is_named():
    with pytest.raises(ValueError, match="rag.engine.routes.NoSuchRoute"):
        load_routes(["rag.engine.routes.NoSuchRoute"])


def test_the_system_check_names_a_listed_route_that_does_not_import(settings):
    from rag.checks import routes_import

    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "ROUTES": ["rag.engine.routes.DenseRoute", "nowhere.Route"]}
    errors = routes_import(None)
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "ROUTES": []}

    assert [(e.id, "nowhere.Route" in e.msg) for e in errors] == [("rag.E001", True)]
    assert routes_import(None) == []
