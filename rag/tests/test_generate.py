"""Generation: the production chat client against a real local server, citation checks, the breaker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rag.engine.breaker import CircuitBreaker
from rag.engine.generate import (CITATION_RE, EvidenceSignals, ExtractiveGenerator, LlmGenerator, answer_without_model,
                                 build_messages, check_citations, confidence_level, evidence_confidence,
                                 evidence_signals, read_section, sentence_scores, split_sentences)
from rag.engine.llm import ChatClient, GenerationError
from rag.engine.types import Answer, Chunk, Hit, Plan, Token


def make_hit(member: str, text: str, class_name: str = "PerspectiveCamera", *, cosine: float = 0.93,
             score: float = 0.03) -> Hit:
    chunk = Chunk(chunk_id=f"id-{class_name}-{member}", source=f"{class_name}.md", title=class_name,
                  class_name=class_name, class_alias="", member=member, heading_path=(class_name, "属性", f".{member}"),
                  chunk_index=1, part=0, text=text)
    return Hit(chunk=chunk, score=score, source="rrf", raw_score=cosine)


HITS = [
    make_hit("far", "### .far : Float\n\n摄像机的远端面，默认值是 2000。该值必须大于 near。"),
    make_hit("near", "### .near : Float\n\n近端面，默认值是 0.1。\n\n```js\ncamera.near = 0.5;\n```"),
]
PLAN = Plan(question="far 默认值", corrected_question="far 默认值", kind="doc", classes=("PerspectiveCamera",))


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_generator(llm_server, *, threshold=2, cooldown=30.0, read_timeout=5.0, clock=None):
    client = ChatClient(base_url=llm_server.url, model="fake-model", api_key="sk-test", timeout=(2.0, read_timeout))
    breaker = CircuitBreaker(threshold=threshold, cooldown=cooldown, clock=clock or FakeClock())
    return LlmGenerator(client=client, breaker=breaker)


def test_the_prompt_numbers_the_evidence():
    messages = build_messages("far 默认值？", HITS)

    assert "[1] PerspectiveCamera > 属性 > .far" in messages[1]["content"]
    assert "[2] PerspectiveCamera > 属性 > .near" in messages[1]["content"]


def test_citations_outside_the_evidence_are_removed():
    text, citations, invalid = check_citations("far 是 2000 [1]，near 是 0.1 [7]。", HITS)

    assert [c.chunk_id for c in citations] == ["id-PerspectiveCamera-far"]
    assert invalid == (7,)
    assert "[7]" not in text and "[1]" in text


def test_a_model_answer_is_cited_and_counted(llm_server):
    answer = make_generator(llm_server).run("far 默认值？", PLAN, HITS)

    assert (answer.mode, answer.confidence, answer.model_called) == ("llm", "high", True)
    assert [c.number for c in answer.citations] == [1]
    assert answer.usage.prompt_tokens == 120 and answer.usage.total_tokens > 120
    call = llm_server.calls[0]
    assert call["headers"]["Authorization"] == "Bearer sk-test" and call["body"]["model"] == "fake-model"


def test_an_answer_citing_unknown_evidence_loses_confidence(llm_server):
    llm_server.replies.append(("ok", "It is 2000 [1] and also [9]."))

    answer = make_generator(llm_server).run("far?", PLAN, HITS)

    assert answer.invalid_citations == (9,) and answer.confidence == "medium"


def test_an_answer_without_any_valid_citation_is_not_confident(llm_server):
    llm_server.replies.append(("ok", "It is 2000 [5]."))

    answer = make_generator(llm_server).run("far?", PLAN, HITS)

    assert answer.citations == () and answer.confidence == "low"


@pytest.mark.parametrize("kind, reason", [("500", "generation_http"), ("malformed", "generation_malformed"),
                                          ("slow", "generation_timeout")])
def test_a_failing_model_gives_the_evidence_degraded(llm_server, kind, reason):
    llm_server.replies.append((kind, ""))
    llm_server.delay = 1.5

    answer = make_generator(llm_server, read_timeout=0.5).run("far?", PLAN, HITS)

    assert (answer.degraded, answer.reason, answer.mode) == (True, reason, "extractive")
    assert answer.citations and "2000" in answer.text


def test_the_breaker_opens_after_consecutive_failures_and_stops_calling(llm_server):
    generator = make_generator(llm_server, threshold=2)
    llm_server.replies.extend([("500", ""), ("500", "")])

    generator.run("far?", PLAN, HITS)
    generator.run("far?", PLAN, HITS)
    third = generator.run("far?", PLAN, HITS)

    assert len(llm_server.calls) == 2
    assert (third.degraded, third.reason) == (True, "circuit_open")
    assert generator.breaker.state()["state"] == "open"


def test_the_breaker_lets_one_trial_through_after_the_cooldown_and_closes_on_success(llm_server):
    clock = FakeClock()
    generator = make_generator(llm_server, threshold=1, cooldown=30, clock=clock)
    llm_server.replies.append(("500", ""))
    generator.run("far?", PLAN, HITS)
    clock.now += 31

    assert generator.breaker.state()["state"] == "half_open"
    assert generator.breaker.allow() is True
    assert generator.breaker.allow() is False  # only one trial at a time
    generator.breaker.record_success()

    assert generator.breaker.state()["state"] == "closed"
    assert generator.run("far?", PLAN, HITS).mode == "llm"


def test_a_failed_trial_opens_the_breaker_again(llm_server):
    clock = FakeClock()
    generator = make_generator(llm_server, threshold=1, cooldown=30, clock=clock)
    llm_server.replies.extend([("500", ""), ("500", "")])
    generator.run("far?", PLAN, HITS)
    clock.now += 31

    trial = generator.run("far?", PLAN, HITS)

    assert trial.degraded and len(llm_server.calls) == 2
    assert generator.breaker.state()["state"] == "open"
    assert generator.breaker.state()["openings"] == 2


def test_a_streamed_answer_arrives_in_pieces_then_final(llm_server):
    llm_server.replies.append(("ok", "The far plane is 2000 [1] by default."))

    events = list(make_generator(llm_server).stream("far?", PLAN, HITS))

    tokens = [event.text for event in events if isinstance(event, Token)]
    final = events[-1]
    assert len(tokens) > 3 and "".join(tokens) == "The far plane is 2000 [1] by default."
    assert isinstance(final, Answer) and final.mode == "llm" and final.usage.prompt_tokens == 120


def test_a_stream_without_data_counts_as_a_failure(llm_server):
    llm_server.replies.append(("cut", ""))
    generator = make_generator(llm_server)

    events = list(generator.stream("far?", PLAN, HITS))

    assert len(events) == 1 and isinstance(events[0], Answer) and events[0].degraded
    assert generator.breaker.state()["failures"] == 1


def test_the_client_raises_on_http_errors(llm_server):
    llm_server.replies.append(("500", ""))
    client = ChatClient(base_url=llm_server.url, model="m")

    with pytest.raises(GenerationError) as raised:
        client.complete([{"role": "user", "content": "hi"}])

    assert raised.value.kind == "http"


def test_the_extractive_answer_quotes_matching_sentences_and_code():
    answer = ExtractiveGenerator().run("near 默认值是多少", PLAN, HITS)

    assert answer.mode == "extractive" and not answer.model_called
    assert "0.1" in answer.text and "camera.near = 0.5;" in answer.text
    assert [c.number for c in answer.citations] == [1, 2]


@pytest.mark.parametrize("plan, hits, reason", [
    (Plan(question="hi", corrected_question="hi", kind="chitchat"), [], "chitchat"),
    (Plan(question="X", corrected_question="X", kind="out_of_catalog", unknown_identifiers=("Foo",)), [],
     "class_not_in_catalog"),
    (Plan(question="q", corrected_question="q", kind="doc"), [], "no_class_matched"),
])
def test_the_paths_without_evidence_never_call_a_model(llm_server, plan, hits, reason):
    answer = answer_without_model(plan, hits)

    assert answer is not None and answer.reason == reason and not answer.model_called
    assert llm_server.calls == []


def test_weak_evidence_is_insufficient_when_no_class_is_named():
    weak = [make_hit("far", "### .far\n\n远端面。")]
    classless = Plan(question="q", corrected_question="q", kind="doc")

    below = answer_without_model(classless, weak, weak_evidence=True)
    named = answer_without_model(PLAN, weak, weak_evidence=True)

    assert (below.mode, below.reason) == ("empty", "below_threshold")
    assert named is None  # a named class is answered from its own chunks


def test_an_inherited_member_is_named_with_the_page_that_documents_it():
    plan = Plan(question="SpotLight.intensity has no effect", corrected_question="SpotLight.intensity has no effect",
                kind="doc", classes=("SpotLight", "Light"), members=("intensity",), inherited=(("intensity", "Light"),))
    chinese = replace(plan, question="SpotLight 的 intensity 没有效果")

    prompt = build_messages(plan.question, HITS, plan)[1]["content"]
    answer = ExtractiveGenerator().run(plan.question, plan, HITS)

    assert "SpotLight inherits `intensity`: it is documented on the page of Light." in prompt
    assert answer.text.startswith("SpotLight inherits `intensity`")
    assert ExtractiveGenerator().run(chinese.question, chinese, HITS).text.startswith(
        "SpotLight 的 `intensity` 继承自 Light，写在 Light 的页面上。")
    assert "Note:" not in build_messages(plan.question, HITS)[1]["content"]


def test_an_api_the_docs_lack_named_beside_one_they_have_is_said_so_and_the_answer_is_low_at_most():
    # The known class written first (the planner refuses a question that writes the unknown API first).
    plan = Plan(question="Can PerspectiveCamera's far plane be drawn under an OverlayRenderer?",
                corrected_question="Can PerspectiveCamera's far plane be drawn under an OverlayRenderer?", kind="doc",
                classes=("PerspectiveCamera",), unknown_identifiers=("OverlayRenderer",))
    chinese = replace(plan, question="PerspectiveCamera 的远端面上怎么叠一个 OverlayRenderer？")

    answer = ExtractiveGenerator().run(plan.question, plan, HITS)
    known = ExtractiveGenerator().run(plan.question, replace(plan, unknown_identifiers=()), HITS)

    assert answer.text.startswith("The documentation has no page for `OverlayRenderer`")
    assert answer.confidence in ("low", "none") and known.confidence not in ("low", "none")
    assert ExtractiveGenerator().run(chinese.question, chinese, HITS).text.startswith("文档中没有 `OverlayRenderer` 的页面")


# -- extractive answers that read as answers ---------------------------------------------------------------

DATA_DIR_SECTION = """### RAG_DATA_DIR

Default: `./data` (relative to the project root; created if missing). The one folder that holds all local state: \
the SQLite database, the LanceDB folder (`lancedb/`), the BM25 files and the file cache (`cache/`). Point it at a \
persistent disk in production.

```bash
export RAG_DATA_DIR=/var/lib/docs-rag
```
"""
DATABASE_SECTION = ("### DATABASE_URL\n\nDefault: empty, which means SQLite at `$RAG_DATA_DIR/db.sqlite3`. "
                    "A `postgres://` URL switches to PostgreSQL.")
RETENTION_SECTION = ("### version_retention\n\nAfter each activation the newest versions are kept. Older ones "
                     "are removed with their vector tables.")
DOCS_HITS = [make_hit("RAG_DATA_DIR", DATA_DIR_SECTION, "Configuration"),
             make_hit("DATABASE_URL", DATABASE_SECTION, "Configuration"),
             make_hit("version_retention", RETENTION_SECTION, "Retrieval")]


def docs_plan(question: str, **fields) -> Plan:
    return Plan(question=question, corrected_question=question, kind="doc", **fields)


def cited_numbers(text: str) -> set[int]:
    return {int(n) for n in CITATION_RE.findall(text)}


def test_sentences_split_at_their_ends_but_not_inside_parentheses_or_code():
    text = "Default: `./data` (relative to the root; created if missing). The folder holds all state. 默认值是 5。不能为 0；至少 1"

    assert split_sentences(text) == ["Default: `./data` (relative to the root; created if missing).",
                                     "The folder holds all state.", "默认值是 5。", "不能为 0；", "至少 1"]


def test_a_section_is_read_as_its_signature_sentences_and_first_code_example():
    section = read_section(DOCS_HITS[0].chunk)

    assert section.signature == "RAG_DATA_DIR"
    assert section.sentences[0].startswith("Default: `./data` (relative") and len(section.sentences) == 3
    assert section.code == ("```bash", "export RAG_DATA_DIR=/var/lib/docs-rag", "```")


def test_sentences_are_ranked_by_bm25_so_a_rarer_shared_word_counts_more():
    scores = sentence_scores(["hold", "data"], [["default", "data"], ["folder", "hold", "data"], ["data", "disk"],
                                                ["nothing"]])

    assert scores[1] > scores[0] > 0 and scores[3] == 0


def test_the_answer_leads_with_the_sentence_that_says_what_the_folder_holds():
    question = "What does RAG_DATA_DIR hold?"

    answer = ExtractiveGenerator().run(question, docs_plan(question, members=("RAG_DATA_DIR",)), DOCS_HITS)

    lead, *rest = answer.text.split("\n\n")
    assert lead == "**Configuration.RAG_DATA_DIR** [1]"
    assert rest[0].startswith("Default: `./data`") and "holds all local state" in rest[0] and rest[0].endswith("[1]")
    assert "persistent disk" in rest[0]  # a section this short (three sentences) is quoted whole
    assert rest[1].startswith("```bash")


def test_a_long_section_keeps_only_the_sentences_that_share_the_questions_words():
    filler = " ".join(f"Paragraph {n} of background about unrelated storage tiers." for n in range(8))
    text = DATA_DIR_SECTION.replace("Point it at", filler + " Point it at")
    hits = [make_hit("RAG_DATA_DIR", text, "Configuration")]
    question = "What does RAG_DATA_DIR hold?"

    answer = ExtractiveGenerator().run(question, docs_plan(question, members=("RAG_DATA_DIR",)), hits)

    assert "holds all local state" in answer.text and "Default: `./data`" in answer.text
    assert "Paragraph 3" not in answer.text and "persistent disk" not in answer.text


def test_supporting_quotes_follow_the_lead_one_line_each_and_only_when_they_share_a_word():
    question = "What does RAG_DATA_DIR hold?"

    answer = ExtractiveGenerator().run(question, docs_plan(question, members=("RAG_DATA_DIR",)), DOCS_HITS)

    quotes = answer.text.split("\n\n")[-1].splitlines()
    assert quotes == ["> Configuration.DATABASE_URL: Default: empty, which means SQLite at "
                      "`$RAG_DATA_DIR/db.sqlite3`. [2]"]  # version_retention shares no word: not quoted
    assert answer.text.count("### ") == 0 and "Older ones" not in answer.text  # no stitched sections


def test_every_marker_of_an_extractive_answer_is_one_of_its_citations_and_ends_a_line():
    question = "What does RAG_DATA_DIR hold?"

    answer = ExtractiveGenerator().run(question, docs_plan(question), DOCS_HITS)

    assert cited_numbers(answer.text) == {c.number for c in answer.citations} == {1, 2}
    assert [c.chunk_id for c in answer.citations] == [DOCS_HITS[0].chunk.chunk_id, DOCS_HITS[1].chunk.chunk_id]
    assert all(not CITATION_RE.search(line) or CITATION_RE.search(line).end() == len(line)
               for line in answer.text.splitlines())


def test_the_planned_member_leads_with_its_signature_even_when_retrieved_second():
    hits = [make_hit("near", "### .near : Float\n\n近端面，默认值是 0.1。"),
            make_hit("far", "### .far : Float\n\n摄像机的远端面，默认值是**2000**。该值必须大于 near plane 的值。")]
    plan = replace(PLAN, question="far 的默认值是多少？", corrected_question="far 的默认值是多少？", members=("far",))

    answer = ExtractiveGenerator().run(plan.corrected_question, plan, hits)

    # Numbered in the order the answer cites them: the second piece of evidence, cited first, is [1].
    assert answer.text.startswith("**PerspectiveCamera.far** — `.far : Float` [1]\n\n摄像机的远端面，默认值是**2000**。")
    assert "> PerspectiveCamera.near (`.near : Float`): 近端面，默认值是 0.1。 [2]" in answer.text
    assert [(c.number, c.chunk_id) for c in answer.citations] == [(1, hits[1].chunk.chunk_id), (2, hits[0].chunk.chunk_id)]


def test_a_short_parameter_list_is_quoted_whole_under_the_constructor_signature():
    text = ("### PerspectiveCamera(fov : Number, aspect : Number, near : Number, far : Number)\n\n"
            "fov — 摄像机视锥体垂直视野角度\n\naspect — 摄像机视锥体长宽比\n\nnear — 近端面\n\nfar — 远端面\n\n"
            "这些参数一起定义了摄像机的视锥体。")
    hits = [make_hit("PerspectiveCamera", text)]
    question = "PerspectiveCamera 的构造函数要传哪几个参数？"

    answer = ExtractiveGenerator().run(question, replace(PLAN, question=question, corrected_question=question), hits)

    assert answer.text.startswith("**PerspectiveCamera** — `PerspectiveCamera(fov : Number, aspect : Number, near : "
                                  "Number, far : Number)` [1]")
    assert "- fov — 摄像机视锥体垂直视野角度\n- aspect — 摄像机视锥体长宽比\n" in answer.text
    assert answer.text.endswith("- 这些参数一起定义了摄像机的视锥体。 [1]")


def test_a_bracketed_number_in_quoted_documentation_is_not_a_citation():
    hits = [make_hit("children", "### .children : Array\n\n子对象数组，第一个是 children[0]。默认为空数组。")]
    question = "children 默认值"

    answer = ExtractiveGenerator().run(question, replace(PLAN, members=("children",)), hits)

    assert "children[0]" in answer.text
    assert (answer.invalid_citations, answer.confidence) == ((), "high")


# -- confidence ----------------------------------------------------------------------------------------------

def signals(**fields) -> EvidenceSignals:
    base = dict(hits=5, named=False, named_lead=False, named_found=False, members_asked=False, member_found=False,
                pasted_error=False, words=6, coverage=0.0, cosine=0.9, lead_share=0.5, margin=0.1)
    return EvidenceSignals(**{**base, **fields})


@pytest.mark.parametrize("fields, level", [
    (dict(named=True, named_found=True, named_lead=True, members_asked=True, member_found=True, cosine=0.87), "high"),
    (dict(named=True, named_found=True, named_lead=True, members_asked=True, member_found=True, cosine=0.85), "medium"),
    (dict(named=True, named_found=True, named_lead=True, members_asked=True, member_found=False), "medium"),
    (dict(named=True, named_found=True, named_lead=True, cosine=0.92), "high"),
    (dict(named=True, named_found=True, named_lead=True, cosine=0.90), "medium"),
    (dict(named=True, named_found=True, named_lead=False, cosine=0.95), "medium"),
    (dict(named=True, named_found=False, named_lead=False, cosine=0.95), "low"),
    (dict(members_asked=True, member_found=True, words=8, cosine=0.9), "high"),
    (dict(members_asked=True, member_found=True, words=20, cosine=0.9), "medium"),
    (dict(coverage=0.5), "medium"),
    (dict(coverage=0.3), "low"),
    (dict(hits=0), "none"),
])
def test_confidence_levels_follow_the_calibrated_rules(fields, level):
    assert confidence_level(signals(**fields)) == level


def test_signals_read_the_named_member_coverage_and_cosine_of_the_first_hit():
    hits = [make_hit("far", "### .far : Float\n\n远端面，默认值是 2000。", cosine=0.88),
            make_hit("near", "### .near : Float\n\n近端面。", score=0.01)]
    plan = replace(PLAN, corrected_question="far default", members=("far",))

    read = evidence_signals(plan, hits)

    assert (read.named, read.named_lead, read.named_found, read.members_asked, read.member_found) == (True,) * 5
    assert (read.words, read.coverage, read.cosine) == (2, 0.5, 0.88)  # "far" is in the section, "default" is not
    assert read.lead_share == 1.0 and read.margin == pytest.approx(2 / 3)


def test_the_leads_words_include_a_section_completion_added_for_its_page_but_not_another_pages():
    plan = replace(PLAN, corrected_question="cast shadow example code")
    first = make_hit("castShadow", "### .castShadow : Boolean\n\nCasts dynamic shadows.")
    example = replace(make_hit("", "```js\nlight.castShadow = true; // example code\n```"), source="structure")
    elsewhere = replace(make_hit("", "example code", class_name="WebGLRenderer"), source="structure")

    assert evidence_signals(plan, [first]).coverage == 0.5  # cast, shadow
    assert evidence_signals(plan, [first, example]).coverage == 1.0
    assert evidence_signals(plan, [first, elsewhere]).coverage == 0.5


def test_the_leads_words_include_its_pages_sections_adopted_within_the_cited_window():
    plan = replace(PLAN, corrected_question="cast shadow example code")
    first = make_hit("castShadow", "### .castShadow : Boolean\n\nCasts dynamic shadows.")
    overview = make_hit("", "```js\nlight.castShadow = true; // example code\n```")
    other = make_hit("intensity", "Its strength.", class_name="WebGLRenderer")

    assert evidence_signals(plan, [first, overview]).coverage == 1.0  # the answer cites the page's example
    # Below the window (the lead and two quotes), an adopted section of the page is not cited with it.
    assert evidence_signals(plan, [first, other, other, overview]).coverage == 0.5


def test_the_leads_words_are_those_its_pages_cited_sections_hold_together():
    plan = replace(PLAN, corrected_question="cast shadow example code")
    first = make_hit("castShadow", "### .castShadow : Boolean\n\nCasts dynamic shadows.")
    sibling = make_hit("receiveShadow", "### .receiveShadow : Boolean\n\nSee the example code.")

    # Neither holds more than half of the question's words; the answer cites both, and they hold all of them.
    assert evidence_signals(plan, [first, sibling]).coverage == 1.0


def test_a_question_naming_nothing_is_low_when_its_words_are_not_in_the_evidence():
    plan = docs_plan("How do I change the colours of the sky?")

    assert evidence_confidence(plan, DOCS_HITS) == "low"
    assert evidence_confidence(docs_plan("Which folder holds the local state and the database?"), DOCS_HITS) == "medium"
    assert evidence_confidence(plan, []) == "none"


def test_extractive_and_model_answers_of_the_same_evidence_have_the_same_level(llm_server):
    llm_server.replies.append(("ok", "far 的默认值是 2000 [1]。"))
    plan = replace(PLAN, members=("far",))

    model = make_generator(llm_server).run("far 默认值？", plan, HITS)
    extractive = ExtractiveGenerator().run("far 默认值？", plan, HITS)
    far_away = [replace(h, raw_score=0.8) for h in HITS]

    assert model.confidence == extractive.confidence == "high"
    assert ExtractiveGenerator().run("far 默认值？", plan, far_away).confidence == "medium"
