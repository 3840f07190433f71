"""The judge model client (seed 001, "生成发版指标"): verdicts parsed strictly, one retry, a cache, repeats.

The model is a real HTTP server on 127.0.0.1 speaking the chat-completions protocol; `ChatClient` and `Judge`
are the production classes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from conftest import JsonHandler, serve_on_loopback
from evaluation import judge as judge_module
from evaluation.judge import Judge, JudgeError, cache_key
from rag.services.generation import ChatClient

QUESTION = "What is the default far plane of PerspectiveCamera?"
ANSWER = "PerspectiveCamera.far defaults to 2000 [1]."
REFERENCE = "far defaults to 2000."
EVIDENCE = [{"source": "cameras/PerspectiveCamera.md", "heading_path": "Properties > far",
             "text": "Camera frustum far plane. Default is 2000."}]


def verdict_json(grounding=5, answering=5, citation_alignment=5, api_usage=5, *, hallucination=False,
                 contradicts_reference=False, notes="fine", **extra) -> str:
    data = {"grounding": grounding, "answering": answering, "citation_alignment": citation_alignment,
            "api_usage": api_usage, "hallucination": hallucination, "contradicts_reference": contradicts_reference,
            "notes": notes}
    data.update(extra)
    return json.dumps(data)


PASS = verdict_json()
FAIL = verdict_json(grounding=3, notes="partly grounded")


@dataclass
class JudgeServer:
    """Replies in order: a string is the assistant's text, an int an HTTP error status; then `default`."""

    url: str = ""
    replies: list = field(default_factory=list)
    default: str = PASS
    requests: list = field(default_factory=list)  # the JSON bodies received


@pytest.fixture(scope="module")
def shared_judge_server():
    """One server per module: stopping one waits out its 0.5 s poll interval."""
    state = JudgeServer()

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            body = self.read_json()
            state.requests.append(body)
            reply = state.replies.pop(0) if state.replies else state.default
            if self.path != "/v1/chat/completions":
                return self.send_json(404, {"error": "not found"})
            if isinstance(reply, int):
                return self.send_json(reply, {"error": {"message": "judge exploded"}})
            return self.send_json(200, {"id": "j", "object": "chat.completion", "model": body.get("model"),
                                        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                                     "finish_reason": "stop"}],
                                        "usage": {"prompt_tokens": 300, "completion_tokens": 40}})

    with serve_on_loopback(Handler) as url:
        state.url = url
        yield state


@pytest.fixture
def judge_server(shared_judge_server):
    """The judge model, with nothing scripted and nothing received yet."""
    shared_judge_server.replies.clear()
    shared_judge_server.requests.clear()
    shared_judge_server.default = PASS
    return shared_judge_server


def make_judge(server: JudgeServer, *, model: str = "judge-model", repeats: int = 1,
               cache: dict | None = None) -> Judge:
    client = ChatClient(base_url=server.url, model=model, timeout=(2.0, 5.0), temperature=0.0, seed=7)
    if cache is None:
        return Judge(client=client, repeats=repeats)
    return Judge(client=client, repeats=repeats, cache_get=cache.get, cache_put=cache.__setitem__)


def run(judge: Judge, *, answer: str = ANSWER, evidence: list[dict] = EVIDENCE, reference: str = REFERENCE):
    return judge.run(question=QUESTION, answer=answer, evidence=evidence, reference=reference)


# -- a verdict ---------------------------------------------------------------------------------------


def test_verdict_in_a_json_fence_with_text_around_it_is_read(judge_server):
    judge_server.replies = [f"Here is my review.\n```json\n{verdict_json(5, 4, 4, 3, notes='ok')}\n```\nThanks."]

    judgement = run(make_judge(judge_server))

    verdict = judgement.verdict
    assert (verdict.grounding, verdict.answering, verdict.citation_alignment, verdict.api_usage,
            verdict.hallucination, verdict.contradicts_reference, verdict.notes) == (5, 4, 4, 3, False, False, "ok")
    assert (judgement.flaky, judgement.cached, len(judgement.verdicts)) == (False, 0, 1)


@pytest.mark.parametrize(("scores", "flags", "passed", "correct"), [
    ((5, 5, 5, 5), {}, True, True),
    ((4, 4, 4, 4), {}, True, True),  # 4 is enough everywhere
    ((3, 5, 5, 5), {}, False, True),  # grounding 3: not a judge pass; correctness ignores grounding
    ((5, 3, 5, 5), {}, False, False),  # answering counts for both
    ((5, 5, 3, 5), {}, False, True),  # citation alignment: pass only
    ((5, 5, 5, 3), {}, True, False),  # API usage: correct only
    ((5, 5, 5, 5), {"hallucination": True}, False, False),  # a hallucination fails both even with 5s
    ((5, 5, 5, 5), {"contradicts_reference": True}, True, False),  # against the reference: not correct
])
def test_passed_and_correct_follow_the_seed(judge_server, scores, flags, passed, correct):
    judge_server.replies = [verdict_json(*scores, **flags)]

    verdict = run(make_judge(judge_server)).verdict

    assert (verdict.passed, verdict.correct) == (passed, correct)
    assert (verdict.as_dict()["passed"], verdict.as_dict()["correct"]) == (passed, correct)


def test_request_carries_the_model_seed_and_the_whole_case(judge_server):
    run(make_judge(judge_server, model="qwen3.8-flash"))

    (body,) = judge_server.requests
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    assert (body["model"], body["temperature"], body["seed"], body["stream"]) == ("qwen3.8-flash", 0.0, 7, False)
    assert body["messages"][0]["role"] == "system"
    for part in (QUESTION, ANSWER, REFERENCE, "[1] cameras/PerspectiveCamera.md · Properties > far",
                 "Camera frustum far plane. Default is 2000."):
        assert part in user


def test_judge_built_from_settings_asks_at_temperature_zero_with_the_configured_seed(judge_server, settings):
    from evaluation.services.scoring import make_judge as judge_from_settings

    settings.RAG_JUDGE = {**settings.RAG_JUDGE, "BASE_URL": judge_server.url, "MODEL": "qwen3.8-flash",
                          "API_KEY": "", "SEED": 1234, "REPEATS": 1}
    judge = judge_from_settings()
    judge.cache_get, judge.cache_put = (lambda key: None), (lambda key, verdict: None)  # no database here

    run(judge)

    (body,) = judge_server.requests
    assert (body["model"], body["temperature"], body["seed"]) == ("qwen3.8-flash", 0.0, 1234)
    assert judge.describe() == {"model": "qwen3.8-flash", "prompt_version": judge_module.PROMPT_VERSION,
                                "repeats": 1, "seed": 1234}


def test_missing_reference_and_evidence_are_said_to_be_missing(judge_server):
    run(make_judge(judge_server), evidence=[], reference="")

    user = judge_server.requests[0]["messages"][1]["content"]
    assert "Reference facts:\n(none given)" in user
    assert "Evidence:\n(none)" in user


# -- malformed replies and errors ------------------------------------------------------------------------


def test_a_malformed_reply_is_retried_once(judge_server):
    judge_server.replies = ["I think the answer is fine.", FAIL]

    judgement = run(make_judge(judge_server))

    assert len(judge_server.requests) == 2
    assert (judgement.verdict.grounding, judgement.verdict.passed) == (3, False)


def test_two_malformed_replies_raise_malformed_after_exactly_two_requests(judge_server):
    judge_server.replies = ["no verdict", "```json\n{\"grounding\": 5,\n```"]

    with pytest.raises(JudgeError) as error:
        run(make_judge(judge_server))

    assert error.value.code == "malformed"
    assert len(judge_server.requests) == 2


@pytest.mark.parametrize("bad", [
    verdict_json(grounding=6),  # out of range
    verdict_json(answering=0),
    verdict_json(citation_alignment="5"),  # a string
    verdict_json(api_usage=4.5),  # not an integer
    verdict_json(grounding=True),  # a boolean is not a score
    verdict_json(hallucination="no"),  # a flag must be true or false
    json.dumps({"grounding": 5, "answering": 5, "citation_alignment": 5, "hallucination": False,
                "contradicts_reference": False}),  # api_usage missing
    "[5, 5, 5, 5]",
])
def test_a_verdict_breaking_the_schema_counts_as_malformed(judge_server, bad):
    judge_server.replies = [bad, bad]

    with pytest.raises(JudgeError) as error:
        run(make_judge(judge_server))

    assert (error.value.code, len(judge_server.requests)) == ("malformed", 2)


def test_a_verdict_breaking_the_schema_once_is_replaced_by_the_retry(judge_server):
    judge_server.replies = [verdict_json(grounding=6), PASS]

    judgement = run(make_judge(judge_server))

    assert (judgement.verdict.grounding, len(judge_server.requests)) == (5, 2)


def test_an_http_error_from_the_judge_is_unavailable(judge_server):
    judge_server.replies = [500]

    with pytest.raises(JudgeError) as error:
        run(make_judge(judge_server))

    assert error.value.code == "unavailable"


def test_an_unreachable_judge_is_unavailable():
    client = ChatClient(base_url="http://127.0.0.1:9/v1", model="judge-model", timeout=(1.0, 1.0))

    with pytest.raises(JudgeError) as error:
        Judge(client=client).run(question=QUESTION, answer=ANSWER, evidence=EVIDENCE)

    assert error.value.code == "unavailable"


# -- the cache ---------------------------------------------------------------------------------------


def test_the_same_case_twice_is_answered_from_the_cache(judge_server):
    cache: dict = {}
    judge = make_judge(judge_server, cache=cache)
    judge_server.replies = [verdict_json(5, 4, 4, 3, notes="cached once")]

    first = run(judge)
    second = run(judge)

    assert len(judge_server.requests) == 1
    assert second.verdict == first.verdict
    assert (first.cached, second.cached, len(cache)) == (0, 1, 1)
    assert "passed" not in next(iter(cache.values()))  # derived fields are recomputed, not stored


@pytest.mark.parametrize("change", [
    {"answer": "PerspectiveCamera.far defaults to 1000 [1]."},
    {"evidence": [{**EVIDENCE[0], "text": "Camera frustum far plane. Default is 1000."}]},
    {"evidence": [{**EVIDENCE[0], "source": "cameras/OrthographicCamera.md"}]},
    {"reference": "far defaults to 1000."},
])
def test_a_different_answer_evidence_or_reference_misses_the_cache(judge_server, change):
    judge = make_judge(judge_server, cache={})
    run(judge)

    run(judge, **change)

    assert len(judge_server.requests) == 2


def test_the_cache_key_changes_with_the_judge_model(judge_server):
    cache: dict = {}
    run(make_judge(judge_server, model="qwen3.8-flash", cache=cache))

    run(make_judge(judge_server, model="another-judge", cache=cache))

    assert len(judge_server.requests) == 2
    assert cache_key("qwen3.8-flash", QUESTION, ANSWER, EVIDENCE, REFERENCE, 0) != cache_key(
        "another-judge", QUESTION, ANSWER, EVIDENCE, REFERENCE, 0)


def test_the_cache_key_changes_with_the_prompt_version(judge_server, monkeypatch):
    cache: dict = {}
    before = cache_key("judge-model", QUESTION, ANSWER, EVIDENCE, REFERENCE, 0)
    run(make_judge(judge_server, cache=cache))

    monkeypatch.setattr(judge_module, "PROMPT_VERSION", "judge-v2")
    run(make_judge(judge_server, cache=cache))

    assert len(judge_server.requests) == 2
    assert cache_key("judge-model", QUESTION, ANSWER, EVIDENCE, REFERENCE, 0) != before


def test_a_failed_judgement_is_not_cached(judge_server):
    cache: dict = {}
    judge = make_judge(judge_server, cache=cache)
    judge_server.replies = [500]
    with pytest.raises(JudgeError):
        run(judge)

    judgement = run(judge)

    assert (cache != {}, judgement.cached, len(judge_server.requests)) == (True, 0, 2)


# -- repeats -----------------------------------------------------------------------------------------


def test_repeats_that_disagree_on_pass_mark_the_item_flaky(judge_server):
    judge_server.replies = [PASS, FAIL, PASS]

    judgement = run(make_judge(judge_server, repeats=3))

    assert len(judge_server.requests) == 3
    assert judgement.flaky is True
    assert [v.passed for v in judgement.verdicts] == [True, False, True]
    assert judgement.verdict.passed is True  # the first verdict is the one reported
    assert len(judgement.as_dict()["all"]) == 3


def test_repeats_that_disagree_only_on_hallucination_mark_the_item_flaky(judge_server):
    judge_server.replies = [FAIL, verdict_json(3, hallucination=True), FAIL]

    judgement = run(make_judge(judge_server, repeats=3))

    assert ([v.passed for v in judgement.verdicts], judgement.flaky) == ([False, False, False], True)


def test_repeats_that_agree_are_not_flaky(judge_server):
    judge_server.replies = [PASS, verdict_json(4, 5, 4, 5, notes="other words"), PASS]

    judgement = run(make_judge(judge_server, repeats=3))

    assert (len(judge_server.requests), judgement.flaky) == (3, False)


def test_each_repeat_is_cached_under_its_own_key(judge_server):
    cache: dict = {}
    judge_server.replies = [PASS, FAIL, PASS]
    run(make_judge(judge_server, repeats=3, cache=cache))

    again = run(make_judge(judge_server, repeats=3, cache=cache))

    assert (len(cache), len(judge_server.requests), again.cached, again.flaky) == (3, 3, 3, True)


@pytest.mark.parametrize("reply", [
    f"The answer passes {{ castShadow: true }} to the light.\n```json\n{verdict_json(5, 4, 4, 3)}\n```",
    f"{verdict_json(5, 4, 4, 3)}\nIt should call updateProjectionMatrix() {{ after }} changing far.",
])
def test_braces_in_the_text_around_the_verdict_do_not_hide_it(judge_server, reply):
    judge_server.replies = [reply]

    verdict = run(make_judge(judge_server)).verdict

    assert ((verdict.grounding, verdict.api_usage), len(judge_server.requests)) == ((5, 3), 1)
