"""Retrieval (E5), fusion and adoption (E6) on the fixture corpus built with the real embedder."""

from __future__ import annotations

import dataclasses

import pytest

from rag.engine.adopt import Adopter
from rag.engine.embed import QueryVectorCache
from rag.engine.fuse import RRF_K, rrf_fuse
from rag.engine.index import VersionReader
from rag.engine.plan import Planner
from rag.engine.search import MAX_BM25_ROUTES, Searcher
from rag.engine.types import Chunk, Hit, Ranking, RouteKind, SearchOptions

STAGES = {"plan", "bm25", "embed", "embed_cached", "dense", "gate", "fuse", "adopt", "total"}


@pytest.fixture(scope="module")
def reader(built_index) -> VersionReader:
    return VersionReader.open(built_index.store, built_index.kb, built_index.version)


def make_searcher(reader, embedder, **kwargs) -> Searcher:
    return Searcher(reader=reader, queries=QueryVectorCache(embedder), planner=Planner(reader.catalog), **kwargs)


def classes_of(result) -> list[str]:
    return [h.chunk.class_name for h in result.hits]


def bm25_routes(result) -> list[str]:
    return [r.name for r in result.rankings if r.name.startswith("bm25")]


# -- reciprocal rank fusion --------------------------------------------------------------------------


def make_chunk(chunk_id) -> Chunk:
    return Chunk(chunk_id=str(chunk_id), source="a.md", title="A", class_name="A", class_alias="", member="",
                 heading_path=("A",), chunk_index=0, part=0, text="")


def make_ranking(ids, *, kind=RouteKind.DENSE, weight=1.0) -> Ranking:
    hits = tuple(Hit(chunk=make_chunk(i), score=0.0, source=kind.source, rank=n) for n, i in enumerate(ids, start=1))
    return Ranking(name=kind.value, hits=hits, kind=kind, weight=weight)


def fuse(*id_lists, weights=None) -> list[tuple[str, float]]:
    weights = weights or [1.0] * len(id_lists)
    return rrf_fuse([make_ranking(ids, weight=w) for ids, w in zip(id_lists, weights)])


def test_rrf_scores_are_summed_reciprocal_ranks_with_k_60():
    fused = dict(fuse([1, 2], [2, 3]))

    assert RRF_K == 60
    assert fused == pytest.approx({"1": 1 / 61, "2": 1 / 62 + 1 / 61, "3": 1 / 62})


def test_items_in_several_rankings_outrank_items_in_one():
    fused = fuse([10, 20, 30], [30, 40], [50, 30])

    assert [item for item, _ in fused][0] == "30"


def test_rrf_ties_break_on_rank_then_ranking_order():
    assert [item for item, _ in fuse([7], [3])] == ["7", "3"]
    assert [item for item, _ in fuse([3], [7])] == ["3", "7"]
    assert [item for item, _ in fuse([5, 6], [6, 5])] == ["5", "6"]


def test_rrf_weights_scale_a_ranking():
    fused = fuse([1], [2], weights=[1.0, 2.0])

    assert fused == [("2", pytest.approx(2 / 61)), ("1", pytest.approx(1 / 61))]


def test_rrf_of_no_rankings_is_empty():
    assert rrf_fuse([]) == []


# -- adoption ----------------------------------------------------------------------------------------


def make_class_of(classes: dict[int, str]):
    return lambda i: classes[i]


def test_a_single_class_question_adopts_5_led_by_the_best_3_of_its_class():
    class_of = make_class_of({i: "A" if i % 2 else "B" for i in range(10)})

    adopted = Adopter().run(list(range(10)), ["A"], class_of)

    assert adopted == [1, 3, 5, 0, 2]


def test_after_the_best_3_of_the_named_class_other_pages_come_first():
    class_of = make_class_of({i: "A" if i < 6 else "B" for i in range(10)})

    adopted = Adopter().run(list(range(10)), ["A"], class_of)

    assert adopted == [0, 1, 2, 6, 7]  # a class named in passing may not be where the answer is


def test_a_named_class_fills_the_window_when_no_other_page_was_found():
    class_of = make_class_of({i: "A" for i in range(10)})

    assert Adopter().run(list(range(10)), ["A"], class_of) == [0, 1, 2, 3, 4]


def test_a_multi_class_question_adopts_at_most_3_per_class_in_turn():
    class_of = make_class_of({0: "A", 1: "A", 2: "A", 3: "A", 4: "A", 5: "B", 6: "B", 7: "B", 8: "B", 9: "C"})

    adopted = Adopter().run(list(range(10)), ["B", "A"], class_of)

    assert adopted == [5, 0, 6, 1, 7, 2]


def test_a_class_with_fewer_chunks_leaves_its_turns_empty():
    class_of = make_class_of({0: "A", 1: "A", 2: "A", 3: "B"})

    adopted = Adopter().run([0, 1, 2, 3], ["A", "B"], class_of)

    assert adopted == [0, 3, 1, 2]


def test_excluded_chunks_are_removed_before_adopting():
    class_of = make_class_of({i: "A" if i < 5 else "B" for i in range(10)})

    single = Adopter().run(list(range(10)), ["A"], class_of, excluded={0, 2})
    multi = Adopter().run(list(range(10)), ["A", "B"], class_of, excluded={0, 5})

    assert single == [1, 3, 4, 5, 6]  # A's best three are 1, 3, 4 once 0 and 2 are gone
    assert multi == [1, 6, 2, 7, 3, 8]


def test_a_class_less_question_keeps_the_fused_first_3_then_leads_with_the_strongest_other_classes():
    class_of = make_class_of({0: "A", 1: "A", 2: "A", 3: "A", 4: "B", 5: "C", 6: "A"})
    scores = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5, 5: 0.4, 6: 0.3}

    adopted = Adopter().run(list(range(7)), [], class_of, scores=scores)
    spread_from_the_second = Adopter(kept=1).run(list(range(7)), [], class_of, scores=scores)

    assert adopted == [0, 1, 2, 4, 5]  # the page's members as fused, then the two other pages
    assert spread_from_the_second == [0, 4, 5, 1, 2]


def test_the_spread_gives_its_places_to_classes_not_already_kept():
    class_of = make_class_of({0: "A", 1: "B", 2: "A", 3: "B", 4: "C", 5: "D", 6: "E"})
    scores = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5, 5: 0.4, 6: 0.3}

    adopted = Adopter().run(list(range(7)), [], class_of, scores=scores)

    assert adopted == [0, 1, 2, 4, 5]  # B's second chunk waits: C and D lead the places after the first 3


def test_a_page_introduction_followed_by_one_of_its_members_leads_with_the_member():
    class_of = make_class_of({0: "A", 1: "A", 2: "B", 3: "C", 4: "A", 5: "D", 6: "E"})
    scores = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5, 5: 0.4, 6: 0.3}

    member_next = Adopter().run(list(range(7)), [], class_of, scores=scores, overviews={0})
    other_page_next = Adopter().run([0, 2, 1, 3, 4, 5, 6], [], class_of, scores=scores, overviews={0})

    assert member_next == [1, 0, 2, 3, 5]  # A still leads, by the member asked about
    assert other_page_next == [0, 2, 1, 3, 5]


def test_release_notes_never_lead_a_class_less_question_and_follow_the_leads():
    class_of = make_class_of({0: "changes", 1: "changes", 2: "A", 3: "B", 4: "C", 5: "D", 6: "A"})
    scores = {0: 0.9, 1: 0.85, 2: 0.8, 3: 0.6, 4: 0.5, 5: 0.4, 6: 0.3}

    adopted = Adopter(single=7).run(list(range(7)), [], class_of, scores=scores, follows={0, 1})

    assert adopted == [2, 3, 4, 5, 6, 0, 1]


def test_a_class_less_question_without_scores_adopts_the_top_5():
    class_of = make_class_of({i: "A" for i in range(8)})

    assert Adopter().run(list(range(8)), [], class_of) == [0, 1, 2, 3, 4]


# -- searching the fixture index ---------------------------------------------------------------------


def test_a_question_naming_a_class_returns_that_class(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("PerspectiveCamera 的 fov 默认是多少")

    assert result.plan.kind == "doc"
    assert len(result.hits) == 5
    assert classes_of(result)[:3] == ["PerspectiveCamera"] * 3  # then other pages (adoption)
    assert result.hits[0].chunk.member == "fov"
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert result.version == "v1"


def test_a_chinese_alias_question_finds_its_class(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("纹理怎么重复平铺")

    assert result.plan.hinted_classes == ("Texture",)
    assert result.hits[0].chunk.class_name == "Texture"


def test_a_typo_question_is_searched_as_corrected(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("PerspectivCamera 的 near 是多少")

    assert counting_embedder.query_calls == ["PerspectiveCamera 的 near 是多少"]
    assert (result.hits[0].chunk.class_name, result.hits[0].chunk.member) == ("PerspectiveCamera", "near")


def test_a_multi_class_question_adopts_from_both_classes(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("PerspectiveCamera 和 OrbitControls 的区别")

    assert result.plan.classes == ("PerspectiveCamera", "OrbitControls")
    assert classes_of(result) == ["PerspectiveCamera", "OrbitControls"] * 3


@pytest.mark.parametrize("question", ["今天中午吃什么好", "Good morning, did you sleep well last night?"])
def test_a_chitchat_question_comes_back_empty(reader, counting_embedder, question):
    result = make_searcher(reader, counting_embedder).run(question)

    assert (result.plan.kind, result.hits) == ("chitchat", ())
    assert result.plan.reason


def test_an_unknown_class_comes_back_empty_without_embedding(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("ArcRotateCamera 怎么用")

    assert (result.plan.kind, result.hits, result.rankings) == ("out_of_catalog", (), ())
    assert counting_embedder.query_calls == []


def test_an_excluded_chunk_is_never_returned(reader, counting_embedder):
    searcher = make_searcher(reader, counting_embedder)
    first = searcher.run("PerspectiveCamera 的 fov 默认是多少")
    excluded = first.hits[0].chunk.chunk_id

    again = searcher.run("PerspectiveCamera 的 fov 默认是多少", SearchOptions(exclude=[excluded, "no-such-chunk"]))

    assert excluded not in [h.chunk.chunk_id for h in again.hits]
    assert again.excluded == (excluded,)
    assert len(again.hits) == 5


def test_top_k_changes_how_many_a_single_class_question_adopts(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("PerspectiveCamera 的 fov", SearchOptions(top_k=2))

    assert len(result.hits) == 2


def test_an_identical_question_reuses_the_query_vector(reader, counting_embedder):
    searcher = make_searcher(reader, counting_embedder)

    first = searcher.run("怎么让轨道控制器停下来慢一点")
    second = searcher.run("怎么让轨道控制器停下来慢一点")

    assert len(counting_embedder.query_calls) == 1
    assert (searcher.queries.hits, searcher.queries.misses) == (1, 1)
    assert (first.timings_ms["embed_cached"], second.timings_ms["embed_cached"]) == (False, True)
    assert [h.chunk.chunk_id for h in first.hits] == [h.chunk.chunk_id for h in second.hits]


def test_every_stage_is_timed(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("WebGLRenderer 的 setPixelRatio 怎么用")

    assert set(result.timings_ms) == STAGES
    assert all(result.timings_ms[s] >= 0 for s in STAGES - {"embed_cached"})


def test_at_most_6_bm25_routes_run(reader, counting_embedder):
    question = "PerspectiveCamera OrbitControls WebGLRenderer Fog Texture Raycaster Color 的 near far fov"

    result = make_searcher(reader, counting_embedder).run(question)

    assert len(result.plan.classes) == 7
    assert len(bm25_routes(result)) == MAX_BM25_ROUTES == 6
    assert bm25_routes(result)[0] == "bm25:question"


def test_the_whole_question_bm25_route_counts_half_only_when_a_class_is_named(reader, counting_embedder):
    searcher = make_searcher(reader, counting_embedder)

    def weight(question: str) -> float:
        return next(r.weight for r in searcher.run(question).rankings if r.name == "bm25:question")

    assert weight("纹理怎么重复平铺") == 1.0  # no class named (a hint is not a name): as much as the vector side
    assert weight("PerspectiveCamera 的 fov 默认是多少") == 0.5


def test_a_member_question_gets_a_member_route(reader, counting_embedder):
    result = make_searcher(reader, counting_embedder).run("WebGLRenderer 的 setPixelRatio 怎么用")

    assert "bm25:member:setPixelRatio" in bm25_routes(result)
    assert (result.hits[0].chunk.class_name, result.hits[0].chunk.member) == ("WebGLRenderer", "setPixelRatio")


def test_a_version_above_the_in_memory_limit_is_searched_through_lancedb(built_index, counting_embedder):
    store = dataclasses.replace(built_index.store, ann_min_vectors=10)
    reader = VersionReader.open(store, built_index.kb, built_index.version)

    result = make_searcher(reader, counting_embedder).run("PerspectiveCamera 的 fov 默认是多少")

    assert reader.vectors is None
    assert "dense" in [r.name for r in result.rankings]
    assert classes_of(result)[:3] == ["PerspectiveCamera"] * 3  # then other pages (adoption)
    assert result.hits[0].chunk.member == "fov"


@pytest.mark.parametrize("mode", ["vector", "bm25"])
def test_single_route_modes_still_find_the_class(reader, counting_embedder, mode):
    result = make_searcher(reader, counting_embedder).run("Raycaster 的 intersectObjects 返回什么", SearchOptions(mode=mode))

    assert result.mode == mode
    assert result.hits[0].chunk.class_name == "Raycaster"
    assert all(r.name.startswith("dense") for r in result.rankings) == (mode == "vector")
    assert all(r.name.startswith("bm25") for r in result.rankings) == (mode == "bm25")


def test_bm25_mode_does_not_embed_a_question_that_names_a_class(reader, counting_embedder):
    make_searcher(reader, counting_embedder).run("Raycaster 的 intersectObjects", SearchOptions(mode="bm25"))

    assert counting_embedder.query_calls == []


def test_an_unknown_mode_is_refused(reader, counting_embedder):
    with pytest.raises(ValueError):
        make_searcher(reader, counting_embedder).run("Fog", SearchOptions(mode="fuzzy"))


def test_everyday_words_bring_the_member_the_docs_name_for_them(reader, counting_embedder):
    question = "手机上画面发糊，怎么办？"
    plain = make_searcher(reader, counting_embedder).run(question)
    searcher = Searcher(reader=reader, queries=QueryVectorCache(counting_embedder),
                        planner=Planner(reader.catalog, words={"发糊": "setPixelRatio"}))

    result = searcher.run(question)

    assert (plain.plan.expansions, result.plan.expansions) == ((), (("发糊", "setPixelRatio"),))
    assert "setPixelRatio" not in [h.chunk.member for h in plain.hits[:3]]  # without the table: read as small talk
    assert (result.hits[0].chunk.class_name, result.hits[0].chunk.member) == ("WebGLRenderer", "setPixelRatio")


INTERNAL_PAGES = {
    "Parser.md": """# Parser

Reads a command line.

## Methods

### .parse ( argv : Array ) : this

Parses the command line arguments and runs the matching action.

### ._parseArguments ( argv : Array ) : this

Parses the command line arguments for the parser's own use.

### .exitOverride ( handler : Function ) : this

Calls the handler instead of exiting the process when parsing fails.
""",
}


def reader_of(folder, pages: dict[str, str], kb: str, embedder) -> VersionReader:
    """A version built from pages written here (name -> Markdown) in a fresh folder."""
    from conftest import make_store

    from rag.engine.chunk import chunk_documents
    from rag.engine.ingest import read_folder

    (folder / "docs").mkdir()
    for name, text in pages.items():
        (folder / "docs" / name).write_text(text, encoding="utf-8")
    store = make_store(folder)
    store.build(kb, "v1", chunk_documents(read_folder(folder / "docs")), embedder)
    return VersionReader.open(store, kb, "v1")


@pytest.fixture(scope="module")
def internal_reader(tmp_path_factory, real_embedder) -> VersionReader:
    return reader_of(tmp_path_factory.mktemp("internal"), INTERNAL_PAGES, "cli", real_embedder)


def test_a_member_named_with_a_leading_underscore_follows_the_public_ones(internal_reader, real_embedder):
    searcher = make_searcher(internal_reader, real_embedder)

    asked = [h.chunk.member for h in searcher.run("How does the Parser parse command line arguments?").hits]
    named = [h.chunk.member for h in searcher.run("What does Parser _parseArguments do?").hits]

    assert asked.index("_parseArguments") > max(asked.index("parse"), asked.index("exitOverride"))
    assert named[0] == "_parseArguments"  # written in the question: it keeps its place


@pytest.mark.parametrize("member, question, internal", [
    ("_exit", "how do I stop it exiting", True),
    ("_exit", "what does _exit do", False),  # the question writes it
    ("__init__", "how is it constructed", False),  # a dunder method is public API
    ("exit", "how do I stop it exiting", False),
])
def test_a_leading_underscore_marks_an_internal_member(member, question, internal):
    from rag.engine.search import _internal

    assert _internal(member, question) is internal


def long_stroke_section() -> str:
    """A member section far longer than one chunk, every paragraph about stroking (as gtk-doc's cairo_stroke)."""
    paragraph = ("Strokes the current path with the current line width, line join, line cap and dash settings; "
                 "after stroking, the current path is cleared from the context. ")
    return "\n\n".join(paragraph * 2 for _ in range(6))


SECTION_PAGES = {
    "Context.md": f"""# Context

The drawing context.

## Methods

### .stroke ( ) : void

{long_stroke_section()}

### .setDash ( dashes : Array, offset : Number ) : void

Sets the dash pattern used when stroking, so a path is stroked as dashes or dots instead of a solid line.

### .setLineWidth ( width : Number ) : void

Sets the line width used when stroking a path.
""",
}


@pytest.fixture(scope="module")
def section_reader(tmp_path_factory, real_embedder) -> VersionReader:
    return reader_of(tmp_path_factory.mktemp("sections"), SECTION_PAGES, "draw", real_embedder)


def test_a_long_section_takes_one_place_and_its_other_parts_follow_the_other_sections(section_reader, real_embedder):
    searcher = make_searcher(section_reader, real_embedder)
    assert sum(c.member == "stroke" for c in section_reader.chunks) >= 3  # the fixture is cut into parts

    hits = searcher.run("How do I stroke a path as dots instead of a solid line?").hits
    members = [h.chunk.member for h in hits]

    assert members.count("stroke") >= 2  # every part is still found
    assert {"setDash", "setLineWidth"} <= set(members[:members.index("stroke") + 3])
    assert members[members.index("stroke") + 1:].index("stroke") >= 2  # its next part comes after the others
