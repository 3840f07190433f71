"""Weighted retrieval (seed 002) on a tiny index of three made-up pages: the term and vector similarities on
0..1, their weighted fusion, the retrieval APIs' ranking over several versions (merge, priority, thresholds,
rerank), and how a chunk is shown (content tokens, important keywords, highlighting)."""

from __future__ import annotations

import html
import math
from collections import Counter

import numpy as np
import pytest

from conftest import make_store
from rag.engine.chunk import chunk_documents
from rag.engine.embed import QueryVectorCache
from rag.engine.index import VersionReader, bm25_text
from rag.engine.ingest import read_folder
from rag.engine.plan import Planner
from rag.engine.rerank import RerankResult, reordered
from rag.engine.text import tokenize
from rag.engine.weighted import (
    IMPORTANT_KEYWORDS,
    RerankFailed,
    WeightedRetriever,
    WeightedSearcher,
    WeightedSetting,
    WeightedSource,
    content_tokens,
    highlight,
    important_keywords,
    term_similarities,
    vector_similarities,
)

PAGES = {
    "Lamp.md": """# Lamp

A Lamp lights a room with a warm glow.

## Properties

### .brightness : Number

How bright the lamp shines, from 0 to 1. Default is 0.5.

### .colour : Color

The colour of the glow.
""",
    "Clock.md": """# Clock

A Clock tracks elapsed time between frames.

## Methods

### .tick ( ) : Number

Advances the clock and returns the seconds since the last tick.
""",
    "Bell.md": """# 铃铛（Bell）

铃铛在整点响起。

## 方法

### .ring ( times : Number )

让铃铛响 times 次。
""",
}
WEIGHTS = (0.0, 0.15, 0.3, 0.5, 0.65, 0.8, 1.0)
QUESTIONS = ("how bright is the lamp", "when does the clock tick", "铃铛什么时候响", "warm glow colour")


@pytest.fixture(scope="module")
def reader(tmp_path_factory, real_embedder) -> VersionReader:
    folder = tmp_path_factory.mktemp("weighted")
    source = folder / "pages"
    source.mkdir()
    for name, text in PAGES.items():
        (source / name).write_text(text, encoding="utf-8")
    store = make_store(folder)
    store.build("tiny", "v1", chunk_documents(read_folder(source)), real_embedder)
    return VersionReader.open(store, "tiny", "v1")


@pytest.fixture
def queries(real_embedder) -> QueryVectorCache:
    return QueryVectorCache(real_embedder)


def positions_of(reader, source: str, member: str | None = None) -> list[int]:
    return [i for i, c in enumerate(reader.chunks) if c.source == source and (member is None or c.member == member)]


# -- a BM25 written out here, from the chunks' own tokens, to hold the index to -----------------------------


def corpus_tokens(reader) -> list[list[str]]:
    return [tokenize(bm25_text(c), stem=True) for c in reader.chunks]


def reference_idf(reader, token: str) -> float:
    """Lucene's BM25 IDF over the chunks (Kamphuis et al., 2020)."""
    documents = corpus_tokens(reader)
    df = sum(token in doc for doc in documents)
    return math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))


def reference_term_similarities(reader, tokens: list[str], *, capped: bool = True) -> np.ndarray:
    """BM25 (Lucene: idf · tf / (tf + k1 · (1 − b + b · dl / avgdl))), times (k1 + 1) over Σ idf of the
    distinct terms."""
    k1, b = 1.5, 0.75
    documents = corpus_tokens(reader)
    average = sum(len(d) for d in documents) / len(documents)
    distinct = list(dict.fromkeys(tokens))
    ideal = sum(reference_idf(reader, t) for t in distinct)
    similarities = []
    for document in documents:
        counts = Counter(document)
        score = sum(reference_idf(reader, t) * counts[t] / (counts[t] + k1 * (1 - b + b * len(document) / average))
                    for t in distinct if counts[t])
        similarities.append(score * (k1 + 1) / ideal)
    result = np.array(similarities)
    return np.minimum(result, 1.0) if capped else result


def reference_cosines(reader, vector: np.ndarray) -> np.ndarray:
    vectors = np.asarray(reader.vectors, dtype=np.float64)
    vector = np.asarray(vector, dtype=np.float64)
    return vectors @ vector / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(vector))


# -- term similarity -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("question", QUESTIONS)
def test_term_similarity_is_bm25_over_what_one_occurrence_of_each_term_scores(reader, question):
    tokens = reader.tokenize(question)

    similarities = term_similarities(reader, tokens)

    np.testing.assert_allclose(similarities, reference_term_similarities(reader, tokens), atol=1e-5)


def test_term_similarity_is_capped_at_one_where_bm25_exceeds_the_ideal(reader):
    raw = reference_term_similarities(reader, ["lamp"], capped=False)

    similarities = term_similarities(reader, ["lamp"])

    assert raw.max() > 1.0  # the Lamp page repeats its name in a short chunk
    assert similarities.max() == pytest.approx(1.0)
    np.testing.assert_allclose(similarities, np.minimum(raw, 1.0), atol=1e-5)


def test_term_similarity_stays_within_zero_and_one(reader):
    for question in QUESTIONS + ("lamp lamp clock tick 铃铛 bright glow colour",):
        similarities = term_similarities(reader, reader.tokenize(question))

        assert similarities.shape == (reader.count,)
        assert float(similarities.min()) >= 0.0 and float(similarities.max()) <= 1.0


def test_a_repeated_query_term_counts_once(reader):
    once = term_similarities(reader, ["tick", "clock"])

    repeated = term_similarities(reader, ["tick", "clock", "tick", "tick", "clock"])

    np.testing.assert_allclose(repeated, once, atol=1e-7)


def test_a_term_found_nowhere_still_counts_in_the_divisor(reader):
    unknown = "zyxwvut"
    position = positions_of(reader, "Clock.md", "tick")[0]
    alone = term_similarities(reader, ["tick"])[position]
    idf_tick, idf_unknown = reference_idf(reader, "tick"), reference_idf(reader, unknown)

    with_unknown = term_similarities(reader, ["tick", unknown])[position]

    assert alone == pytest.approx(1.0)
    raw_alone = reference_term_similarities(reader, ["tick"], capped=False)[position]
    assert with_unknown == pytest.approx(min(1.0, raw_alone * idf_tick / (idf_tick + idf_unknown)), abs=1e-5)
    assert with_unknown < alone
    assert idf_unknown > idf_tick  # a term of no document weighs like the rarest term


def test_no_query_terms_give_zero_everywhere(reader):
    assert term_similarities(reader, []).tolist() == [0.0] * reader.count
    assert term_similarities(reader, ["zyxwvut"]).tolist() == [0.0] * reader.count


# -- vector similarity ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("question", QUESTIONS)
def test_vector_similarity_is_the_cosine_clipped_at_zero(reader, queries, question):
    vector, _ = queries.embed_query(question)

    similarities = vector_similarities(reader, vector, top_k=2)

    np.testing.assert_allclose(similarities, np.clip(reference_cosines(reader, vector), 0.0, 1.0), atol=1e-5)


def test_a_negative_cosine_counts_as_zero(reader):
    opposite = -np.asarray(reader.vectors[0], dtype=np.float32)
    cosines = reference_cosines(reader, opposite)

    similarities = vector_similarities(reader, opposite, top_k=reader.count)

    assert cosines[0] == pytest.approx(-1.0, abs=1e-4)
    assert similarities[0] == 0.0
    assert all(similarities[i] == 0.0 for i in np.flatnonzero(cosines < 0))
    assert float(similarities.min()) >= 0.0


def test_an_ann_searched_version_knows_the_similarity_of_its_top_k_only():
    class AnnReader:
        count = 5

        def dense_scores(self, vector):
            return None

        def dense_search(self, vector, k):
            assert k == 3
            return [3, 1, 4], [1.0000002, 0.6, -0.2]

    similarities = vector_similarities(AnnReader(), np.ones(4, dtype=np.float32), top_k=3)

    np.testing.assert_allclose(similarities, [0.0, 0.6, 0.0, 1.0, 0.0], atol=1e-6)


# -- the weighted retriever ----------------------------------------------------------------------------------


@pytest.mark.parametrize("weight", WEIGHTS)
def test_every_hit_is_the_weighted_sum_of_its_two_similarities(reader, queries, weight):
    question = "how bright is the lamp"
    vector, _ = queries.embed_query(question)
    cosines = np.clip(reference_cosines(reader, vector), 0.0, 1.0)
    terms = reference_term_similarities(reader, reader.tokenize(question))

    result = WeightedRetriever(reader, queries).run(question, dense_weight=weight, top_k=reader.count)

    assert sorted(h.position for h in result.hits) == list(range(reader.count))
    for hit in result.hits:
        assert hit.chunk == reader.chunks[hit.position]
        assert hit.similarity == pytest.approx(weight * hit.vector_similarity + (1 - weight) * hit.term_similarity,
                                               abs=1e-6)
        if weight > 0:
            assert hit.vector_similarity == pytest.approx(cosines[hit.position], abs=1e-5)
        if weight < 1:
            assert hit.term_similarity == pytest.approx(terms[hit.position], abs=1e-5)
        assert 0.0 <= hit.similarity <= 1.0 + 1e-6


@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("question", QUESTIONS)
def test_hits_come_best_first_with_ties_in_index_order(reader, queries, weight, question):
    result = WeightedRetriever(reader, queries).run(question, dense_weight=weight, top_k=reader.count)

    keys = [(-h.similarity, h.position) for h in result.hits]

    assert keys == sorted(keys)


@pytest.mark.parametrize("top_k", [1, 2, 3, 5])
def test_top_k_keeps_the_best_of_the_full_ranking(reader, queries, top_k):
    retriever = WeightedRetriever(reader, queries)
    full = retriever.run("when does the clock tick", dense_weight=0.4, top_k=reader.count)

    result = retriever.run("when does the clock tick", dense_weight=0.4, top_k=top_k)

    assert [h.position for h in result.hits] == [h.position for h in full.hits][:top_k]


def test_top_k_beyond_the_chunk_count_returns_every_chunk(reader, queries):
    result = WeightedRetriever(reader, queries).run("lamp", dense_weight=0.5, top_k=reader.count + 10)

    assert len(result.hits) == reader.count


def test_equal_similarities_keep_index_order(reader, queries):
    lamp = positions_of(reader, "Lamp.md")
    assert term_similarities(reader, ["lamp", "glow"])[lamp].tolist() == [1.0] * len(lamp)  # three-way tie

    result = WeightedRetriever(reader, queries).run("lamp glow", dense_weight=0.0, top_k=len(lamp))
    nothing = WeightedRetriever(reader, queries).run("zyxwvut", dense_weight=0.0, top_k=4)

    assert [h.position for h in result.hits] == sorted(lamp)
    assert [h.position for h in nothing.hits] == [0, 1, 2, 3]
    assert {h.similarity for h in nothing.hits} == {0.0}


def test_the_ranking_is_the_same_on_every_call(reader, queries):
    retriever = WeightedRetriever(reader, queries)

    runs = [[h.position for h in retriever.run("lamp glow", dense_weight=0.0, top_k=reader.count).hits]
            for _ in range(3)]

    assert runs[0] == runs[1] == runs[2]


def test_a_mask_keeps_only_its_chunks(reader, queries):
    clock = positions_of(reader, "Clock.md")
    mask = np.zeros(reader.count, dtype=bool)
    mask[clock] = True

    result = WeightedRetriever(reader, queries).run("how bright is the lamp", dense_weight=0.5, top_k=5, mask=mask)
    empty = WeightedRetriever(reader, queries).run("how bright is the lamp", dense_weight=0.5, top_k=5,
                                                   mask=np.zeros(reader.count, dtype=bool))

    assert sorted(h.position for h in result.hits) == clock
    assert empty.hits == ()


def test_keywords_are_more_query_terms_but_the_vector_reads_the_question_only(reader, counting_embedder):
    question = "how bright is the lamp"
    retriever = WeightedRetriever(reader, QueryVectorCache(counting_embedder))
    plain = retriever.run(question, dense_weight=0.5, top_k=reader.count)

    rewritten = retriever.run(question, dense_weight=0.5, top_k=reader.count, keywords="warm glow")

    terms = reference_term_similarities(reader, reader.tokenize(f"{question} warm glow"))
    assert rewritten.tokens == ("bright", "lamp", "warm", "glow")
    assert counting_embedder.query_calls == [question]
    assert rewritten.embed_cached is True
    assert ({h.position: h.vector_similarity for h in rewritten.hits}
            == {h.position: h.vector_similarity for h in plain.hits})
    for hit in rewritten.hits:
        assert hit.term_similarity == pytest.approx(terms[hit.position], abs=1e-5)
    colour = positions_of(reader, "Lamp.md", "colour")[0]
    assert ({h.position: h.term_similarity for h in rewritten.hits}[colour]
            > {h.position: h.term_similarity for h in plain.hits}[colour])


def test_result_tokens_are_the_distinct_query_terms_in_order(reader, queries):
    result = WeightedRetriever(reader, queries).run("lamp clock lamp tick clock", dense_weight=0.0, top_k=1)

    assert result.tokens == ("lamp", "clock", "tick")


def test_a_term_only_ranking_embeds_nothing(reader, counting_embedder):
    result = WeightedRetriever(reader, QueryVectorCache(counting_embedder)).run("lamp", dense_weight=0.0, top_k=3)

    assert counting_embedder.query_calls == []
    assert {h.vector_similarity for h in result.hits} == {0.0}


@pytest.mark.parametrize("weight", [-0.01, 1.01, 2.0])
def test_a_weight_outside_zero_to_one_is_refused(reader, queries, weight):
    with pytest.raises(ValueError):
        WeightedRetriever(reader, queries).run("lamp", dense_weight=weight, top_k=3)


# -- how a chunk is shown ------------------------------------------------------------------------------------


def test_content_tokens_are_the_chunk_text_as_the_index_tokenizes_it(reader):
    colour = reader.chunks[positions_of(reader, "Lamp.md", "colour")[0]]

    tokens = content_tokens(reader, colour)

    assert tokens == ["colour", "color", "colour", "glow"]  # the body only: no page title, no heading path
    assert "lamp" in tokenize(bm25_text(colour), stem=True)


def test_content_tokens_of_chinese_text_are_jieba_words(reader):
    bell = reader.chunks[positions_of(reader, "Bell.md", "")[0]]

    tokens = content_tokens(reader, bell)

    assert {"铃铛", "整点", "响起"} <= set(tokens)


def reference_keywords(reader, chunk, count: int) -> list[str]:
    words = [w for w in tokenize(chunk.text) if len(w) > 1 and not w.isdigit()]
    weights = {w: reference_idf(reader, tokenize(w, stem=True)[0]) * tf / (tf + 1.5)
               for w, tf in Counter(words).items()}
    return [w for w, _ in sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:count]]


def test_important_keywords_weigh_idf_by_saturated_term_frequency(reader):
    for chunk in reader.chunks:
        assert important_keywords(reader, chunk) == reference_keywords(reader, chunk, IMPORTANT_KEYWORDS)


def test_important_keywords_break_ties_alphabetically(reader):
    clock = reader.chunks[positions_of(reader, "Clock.md", "")[0]]

    keywords = important_keywords(reader, clock)

    # "clock" is written twice; the others once each, and each is in both Clock chunks (the same IDF).
    assert keywords == ["clock", "between", "elapsed", "frames", "methods"]


def test_important_keywords_skip_single_characters_and_numbers_and_honour_count(reader):
    brightness = reader.chunks[positions_of(reader, "Lamp.md", "brightness")[0]]

    keywords = important_keywords(reader, brightness, count=10)
    first_two = important_keywords(reader, brightness, count=2)

    assert not {"0", "1"} & set(keywords)
    assert all(len(w) > 1 and w == w.lower() for w in keywords)
    assert first_two == keywords[:2]


def test_a_rare_repeated_word_outranks_a_common_one(reader):
    colour = reader.chunks[positions_of(reader, "Lamp.md", "colour")[0]]

    keywords = important_keywords(reader, colour)

    assert keywords.index("colour") < keywords.index("glow")  # twice in one chunk against once in three


def test_highlight_wraps_matched_words_and_escapes_the_rest(reader):
    marked = highlight(reader, 'The <b>Lamp</b> shines & "glows"', ["lamp", "shine", "glow"])

    assert marked == 'The &lt;b&gt;<em>Lamp</em>&lt;/b&gt; <em>shines</em> &amp; &quot;<em>glows</em>&quot;'


def test_highlight_marks_chinese_words_by_jieba_pieces(reader):
    assert highlight(reader, "铃铛在整点响起", ["铃铛", "响起"]) == "<em>铃铛</em>在整点<em>响起</em>"


def test_highlight_without_terms_only_escapes(reader):
    text = "if (a < b && c > 'd') { lamp(); }"

    assert highlight(reader, text, []) == html.escape(text)


def test_highlight_never_marks_punctuation_or_spaces(reader):
    marked = highlight(reader, "lamp, lamp; (lamp)", ["lamp"])

    assert marked == "<em>lamp</em>, <em>lamp</em>; (<em>lamp</em>)"


HIGHLIGHT_TEXTS = [
    'The <b>lamp</b> shines & "glows"',
    "if (a < b && c > 'd') { return lamp.brightness; }",
    "<script>alert('铃铛')</script>",
    "铃铛在整点响起。让铃铛响 3 次！",
    "```js\nconst lamp = new Lamp(); lamp.colour = \"#ffcc00\";\n```",
    "Already escaped: &lt;lamp&gt; &amp; &quot;clock&quot;",
    "mixed 中文 and English: 时钟 tick() <= 0.5 && glow >= 1",
    "",
]
HIGHLIGHT_TERMS = [(), ("lamp",), ("lamp", "铃铛", "tick", "glow"), ("amp", "lt", "quot", "script", "alert"),
                   ("brightness", "colour", "响起", "clock", "中文")]


@pytest.mark.parametrize("text", HIGHLIGHT_TEXTS)
def test_highlight_with_tags_removed_and_unescaped_is_the_original_text(reader, text):
    for terms in HIGHLIGHT_TERMS:
        marked = highlight(reader, text, terms)
        bare = marked.replace("<em>", "").replace("</em>", "")

        assert html.unescape(bare) == text
        assert not set("<>\"'") & set(bare)
        assert marked.count("<em>") == marked.count("</em>")
        assert "<em></em>" not in marked


# -- the retrieval APIs' ranking over several versions (WeightedSearcher) --------------------------------------


class LastFirst:
    """A reranker written for these tests: the candidates in reverse order, scored 0.9, 0.8, …; or no order."""

    def __init__(self, fails: str = ""):
        self.fails, self.seen = fails, []

    def run(self, question, hits):
        self.seen.append(len(hits))
        if self.fails:
            return RerankResult(hits=tuple(hits), backend="none", error=self.fails)
        order = [(p, round(0.9 - 0.1 * n, 2)) for n, p in enumerate(reversed(range(len(hits))))]
        return RerankResult(hits=reordered(hits, order), backend="api")


def source(reader, key: int, **fields) -> WeightedSource:
    return WeightedSource(key=key, reader=reader, planner=Planner(reader.catalog), **fields)


def ranked(reader, queries, sources, question="how bright is the lamp", rerankers=None, **setting):
    searcher = WeightedSearcher(queries=queries, rerankers=rerankers or {}, rerank_candidates=2)
    return searcher.run(question, sources, WeightedSetting(**{"similarity_threshold": 0.0, **setting}))


def test_one_source_ranks_as_its_weighted_retriever_does(reader, queries):
    alone = WeightedRetriever(reader, queries).run("how bright is the lamp", dense_weight=0.3, top_k=5)

    result = ranked(reader, queries, [source(reader, 1)], dense_weight=0.3, top_k=5)

    assert [c.hit for c in result.passing] == list(alone.hits)
    assert {c.source.key for c in result.passing} == {1} and result.rerank == "none"


def test_several_sources_merge_by_similarity_and_equal_ones_break_on_the_source_key(reader, queries):
    result = ranked(reader, queries, [source(reader, 7), source(reader, 3)], top_k=6)

    pairs = [(c.hit.similarity, c.source.key) for c in result.passing]
    assert pairs == sorted(pairs, key=lambda p: (-p[0], p[1]))
    assert [key for _, key in pairs[:2]] == [3, 7]  # the same version twice: each chunk ties, key 3 first
    assert len(result.passing) == 6  # the merged list is cut at top_k too


def test_priority_groups_come_first_before_the_cut(reader, queries):
    result = ranked(reader, queries, [source(reader, 1, group=1), source(reader, 2, group=0)], top_k=4,
                    by_priority=True)

    assert [c.source.key for c in result.passing] == [2, 2, 2, 2]


def test_the_similarity_threshold_drops_what_is_below_it(reader, queries):
    every = ranked(reader, queries, [source(reader, 1)], top_k=10)
    cut = every.passing[2].hit.similarity

    result = ranked(reader, queries, [source(reader, 1)], top_k=10, similarity_threshold=cut)

    assert all(c.hit.similarity >= cut for c in result.passing)
    assert len(result.passing) == sum(1 for c in every.passing if c.hit.similarity >= cut)


def test_a_source_whose_filter_allows_nothing_is_skipped(reader, queries):
    result = ranked(reader, queries, [source(reader, 1, mask=np.zeros(reader.count, dtype=bool)), source(reader, 2)],
                    top_k=10)

    assert {c.source.key for c in result.passing} == {2}


def test_a_rerank_reorders_scores_and_keeps_what_reaches_the_rank_threshold(reader, queries):
    reranker = LastFirst()
    before = ranked(reader, queries, [source(reader, 1)], top_k=4)

    result = ranked(reader, queries, [source(reader, 1)], rerankers={"api": reranker}, top_k=4, rerank=("api",),
                    rank_score_threshold=0.75)

    assert [c.hit for c in result.passing] == [c.hit for c in reversed(before.passing)][:2]
    assert [c.rank_score for c in result.passing] == [0.9, 0.8] and result.rerank == "api"
    assert "rerank" in result.timings_ms


def test_the_model_reads_at_most_its_candidates(reader, queries):
    model = LastFirst()

    ranked(reader, queries, [source(reader, 1)], rerankers={"llm": model}, top_k=5, rerank=("llm",))

    assert model.seen == [2]


def test_a_rerank_that_gives_no_order_fails_and_a_missing_one_is_named(reader, queries):
    with pytest.raises(RerankFailed, match="timed out"):
        ranked(reader, queries, [source(reader, 1)], rerankers={"api": LastFirst(fails="timed out")}, rerank=("api",))
    searcher = WeightedSearcher(queries=queries, rerankers={"api": LastFirst()})

    assert searcher.missing(WeightedSetting(rerank=("api", "llm"))) == ["llm"]
    with pytest.raises(KeyError, match="llm"):
        searcher.run("lamp", [source(reader, 1)], WeightedSetting(rerank=("llm",)))
