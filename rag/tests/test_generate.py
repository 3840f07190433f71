"""Generation: the production chat client against a real local server, citation checks, the breaker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rag.engine.breaker import CircuitBreaker
from rag.engine.generate import ExtractiveGenerator, LlmGenerator, answer_without_model, build_messages, check_citations
from rag.engine.llm import ChatClient, GenerationError
from rag.engine.types import Answer, Chunk, Hit, Plan, Token


def make_hit(member: str, text: str, class_name: str = "PerspectiveCamera") -> Hit:
    chunk = Chunk(chunk_id=f"id-{member}", source=f"{class_name}.md", title=class_name, class_name=class_name,
                  class_alias="", member=member, heading_path=(class_name, "属性", f".{member}"), chunk_index=1,
                  part=0, text=text)
    return Hit(chunk=chunk, score=0.03, source="rrf")


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

    assert [c.chunk_id for c in citations] == ["id-far"]
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
