"""Scoring by rules (seed 001, "检索发版指标" and "生成发版指标"): retrieval metrics on a hand-made fixture,
every gate boundary, the generation rules per question, the generation gates and the attribution of failures.

Rates are compared with `==` against the same division written out (`5 / 9`): a rate is `hits / questions`,
so the two are the same float exactly, and an off-by-one anywhere shows up as a different number.
"""

from __future__ import annotations

import pytest

from evaluation import rules
from evaluation.services.gates import baseline_gate, generation_gates, retrieval_gates, verdict_of
from rag.metrics import QuestionScore, RetrievedChunk, class_window, score_question, summarize

# -- builders ----------------------------------------------------------------------------------------


def chunk(class_name: str, member: str = "", source: str | None = None) -> RetrievedChunk:
    """A retrieved chunk from the page of `class_name` (its file stem is the class name)."""
    return RetrievedChunk(class_name, member, source if source is not None else f"api/{class_name}.md")


def filler(count: int, class_name: str = "Clock") -> list[RetrievedChunk]:
    """Chunks of an unrelated class, to push others down the ranking."""
    return [chunk(class_name, f"m{n}") for n in range(count)]


def golden(item_id: str, classes=(), members=(), *, layer: str = "plain", negative_kind: str = "", **extra) -> dict:
    """A golden item in the SCHEMA.md shape; a negative_kind makes it a negative."""
    item = {"id": item_id, "layer": "negative" if negative_kind else layer, "answerable": not negative_kind,
            "expected_classes": list(classes), "expected_members": list(members), "negative_kind": negative_kind}
    item.update(extra)
    return item


def score(layer: str = "plain", *, class_hit: bool = True, member_hit: bool | None = None, empty: bool = False,
          answerable: bool = True, negative_kind: str = "") -> QuestionScore:
    """A scored question, as `summarize` receives them (services rebuild these from stored results)."""
    member_first = member_rr = None
    if member_hit is not None:  # score_question sets the three member fields together
        member_first, member_rr = member_hit, 1.0 if member_hit else 0.0
    return QuestionScore(id="q", layer=layer, answerable=answerable, empty=empty, class_hit=class_hit,
                         member_hit=member_hit, member_first=member_first, member_rr=member_rr,
                         negative_kind=negative_kind)


def scores(count: int, hits: int, layer: str = "plain", **fields) -> list[QuestionScore]:
    """`count` questions of a layer, of which the first `hits` hit the class."""
    return [score(layer, class_hit=n < hits, **fields) for n in range(count)]


def member_scores(count: int, hits: int, layer: str = "plain") -> list[QuestionScore]:
    """`count` questions asking for a member (class always hit), of which `hits` hit the member."""
    return [score(layer, member_hit=n < hits) for n in range(count)]


def gate(gates: list[dict], metric: str) -> dict:
    return next(g for g in gates if g["metric"] == metric)


def gate_status(question_scores: list[QuestionScore], metric: str) -> str:
    _metrics, _counts, gates = retrieval_gates(question_scores)
    return gate(gates, metric)["status"]


# -- retrieval metrics on a hand-made fixture -----------------------------------------------------------

# Nine answerable questions and three negatives; each comment says what the question checks.
FIXTURE = [
    # Member at rank 1 of its class's page: every flag true, reciprocal rank 1.
    (golden("r-01", ["Object3D"], ["castShadow"]),
     [chunk("Object3D", "castShadow"), chunk("Object3D", "position")]),
    # Class at rank 3, member at rank 4: class hit and hit@3, but the member is outside the first 3
    # (member miss), though inside the window it still scores a reciprocal rank of 1/4.
    (golden("r-02", ["Mesh"], ["geometry"]),
     [chunk("Object3D", "position"), chunk("Material", "side"), chunk("Mesh", "material"), chunk("Mesh", "geometry")]),
    # The chunk's file is the class's page but its structured class name differs: a class hit, not a strict one.
    (golden("r-03", ["PerspectiveCamera"], layer="colloquial"),
     [chunk("Camera", "fov", "cameras/PerspectiveCamera.md")]),
    # Two classes: the window is max(5, 3 x 2) = 6, and Fog at rank 6 is inside it.
    (golden("r-04", ["Scene", "Fog"], layer="multi"),
     [chunk("Scene", "background"), *filler(4), chunk("Fog", "near")]),
    # Two classes with Fog at rank 7: outside the window of 6, a class miss (Scene alone is not enough),
    # but Scene at rank 1 still counts for hit@1 and hit@3.
    (golden("r-05", ["Scene", "Fog"], layer="multi"),
     [chunk("Scene", "background"), *filler(5), chunk("Fog", "near")]),
    # Nothing from Raycaster in eight results: every flag false, reciprocal rank 0.
    (golden("r-06", ["Raycaster"], ["intersectObjects"], layer="typo"), filler(8)),
    # The member's name on another class's page does not count: member hit via rank 2, not first, RR 1/2.
    (golden("r-07", ["Object3D"], ["castShadow"], layer="member"),
     [chunk("Mesh", "castShadow"), chunk("Object3D", "castShadow")]),
    # Empty result for an answerable question: the only false empty.
    (golden("r-08", ["DirectionalLight"]), []),
    # One class: the window is 5, so rank 6 is a miss (and not empty).
    (golden("r-09", ["WebGLRenderer"]), [*filler(5), chunk("WebGLRenderer", "shadowMap")]),
    # Negatives: chitchat and out-of-catalog must be empty; no_answer is reported apart.
    (golden("n-01", negative_kind="chitchat"), []),
    (golden("n-02", negative_kind="out_of_catalog"), [chunk("Camera", "fov")]),
    (golden("n-03", negative_kind="no_answer"), []),
]


@pytest.fixture(scope="module")
def fixture_report():
    return summarize([score_question(item, results) for item, results in FIXTURE])


def test_each_fixture_question_scores_as_worked_out_by_hand():
    by_id = {item["id"]: score_question(item, results) for item, results in FIXTURE}

    flags = {qid: (s.class_hit, s.strict_class_hit, s.hit_at_1, s.hit_at_3, s.member_hit, s.member_first,
                   s.member_rr, s.window, s.empty)
             for qid, s in by_id.items() if s.answerable}

    assert flags == {
        #        class  strict hit@1  hit@3  member first  RR    window empty
        "r-01": (True, True, True, True, True, True, 1.0, 5, False),
        "r-02": (True, True, False, True, False, False, 1 / 4, 5, False),
        "r-03": (True, False, True, True, None, None, None, 5, False),
        "r-04": (True, True, True, True, None, None, None, 6, False),
        "r-05": (False, False, True, True, None, None, None, 6, False),
        "r-06": (False, False, False, False, False, False, 0.0, 5, False),
        "r-07": (True, True, False, True, True, False, 1 / 2, 5, False),
        "r-08": (False, False, False, False, None, None, None, 5, True),
        "r-09": (False, False, False, False, None, None, None, 5, False),
    }


def test_fixture_rates_over_answerable_questions_match_the_hand_count(fixture_report):
    metrics = fixture_report.metrics

    # Answerable: r-01..r-09 = 9; the three negatives never enter these denominators.
    assert fixture_report.counts["answerable"] == 9
    # class hit: r-01, r-02, r-03, r-04, r-07 = 5 of 9 (r-05 Fog at 7, r-06 none, r-08 empty, r-09 rank 6).
    assert metrics["class_hit"] == 5 / 9
    # strict: the same minus r-03 (file stem only) = 4 of 9.
    assert metrics["strict_class_hit"] == 4 / 9
    # hit@1: r-01, r-03, r-04, r-05 = 4 of 9 (r-02 rank 3, r-07 rank 1 is Mesh).
    assert metrics["hit_at_1"] == 4 / 9
    # hit@3: hit@1 plus r-02 and r-07 = 6 of 9.
    assert metrics["hit_at_3"] == 6 / 9
    # false empty: r-08 only = 1 of 9.
    assert metrics["false_empty"] == 1 / 9


def test_fixture_member_rates_count_only_questions_that_ask_for_a_member(fixture_report):
    metrics = fixture_report.metrics

    # With members: r-01, r-02, r-06, r-07 = 4.
    assert fixture_report.counts["with_members"] == 4
    # member hit (first 3 only): r-01 rank 1, r-07 rank 2 = 2 of 4; r-02's rank 4 does not count.
    assert metrics["member_hit"] == 2 / 4
    # member first: r-01 only = 1 of 4.
    assert metrics["member_first_hit"] == 1 / 4
    # MRR: (1 + 1/4 + 0 + 1/2) / 4 = 1.75 / 4 = 7/16.
    assert metrics["member_mrr"] == 7 / 16


def test_fixture_layer_rates_are_computed_within_each_layer(fixture_report):
    metrics, counts = fixture_report.metrics, fixture_report.counts

    # colloquial: r-03 hit = 1 of 1; member layer: r-07 member hit = 1 of 1; typo: r-06 miss = 0 of 1;
    # multi: r-04 hit, r-05 miss = 1 of 2.
    assert (counts["colloquial"], counts["member"], counts["typo"], counts["multi"]) == (1, 1, 1, 2)
    assert (metrics["colloquial_class_hit"], metrics["member_layer_member_hit"], metrics["typo_class_hit"],
            metrics["multi_class_hit"]) == (1 / 1, 1 / 1, 0 / 1, 1 / 2)


def test_negatives_are_scored_apart_and_no_answer_does_not_count_as_must_be_empty(fixture_report):
    metrics = fixture_report.metrics

    # must be empty: chitchat (empty) and out_of_catalog (one chunk) = 1 of 2; counting the empty
    # no_answer question too would give 2 of 3.
    assert fixture_report.counts["negatives"] == 3
    assert metrics["negative_empty"] == 1 / 2
    assert (metrics["chitchat_empty"], metrics["out_of_catalog_empty"], metrics["no_answer_empty"]) == (1.0, 0.0, 1.0)


def test_an_empty_negative_is_never_a_false_empty():
    report = summarize([score_question(golden("r-1", ["Fog"]), [chunk("Fog")]),
                        score_question(golden("n-1", negative_kind="chitchat"), [])])

    assert report.metrics["false_empty"] == 0.0


@pytest.mark.parametrize(("classes", "window"), [
    (["Fog"], 5),
    (["Scene", "Fog"], 6),  # max(5, 3 x 2)
    (["Scene", "Fog", "Mesh"], 9),  # max(5, 3 x 3)
])
def test_class_window_is_five_or_three_per_class_whichever_is_larger(classes, window):
    assert class_window(classes) == window


def test_three_class_question_hits_with_its_last_class_at_rank_nine_and_misses_at_ten():
    item = golden("r-1", ["Scene", "Fog", "Mesh"], layer="multi")
    head = [chunk("Scene"), chunk("Fog"), *filler(6)]  # ranks 1-8

    at_nine = score_question(item, [*head, chunk("Mesh")])
    at_ten = score_question(item, [*head, chunk("Clock"), chunk("Mesh")])

    assert (at_nine.class_hit, at_ten.class_hit) == (True, False)


def test_member_of_another_expected_class_counts_for_a_multi_class_question():
    item = golden("r-1", ["WebGLRenderer", "DirectionalLight"], ["castShadow"], layer="multi")

    result = score_question(item, [chunk("WebGLRenderer", "shadowMap"), chunk("DirectionalLight", "castShadow")])

    assert (result.class_hit, result.member_hit, result.member_rr) == (True, True, 1 / 2)


# -- retrieval gates: every boundary -----------------------------------------------------------------------


@pytest.mark.parametrize(("hits", "status"), [(90, "pass"), (89, "fail")])
def test_class_hit_gate_passes_at_exactly_ninety_percent(hits, status):
    assert gate_status(scores(100, hits), "class_hit") == status


@pytest.mark.parametrize(("hits", "status"), [(75, "pass"), (74, "fail")])
def test_member_hit_gate_passes_at_exactly_seventy_five_percent(hits, status):
    assert gate_status(member_scores(100, hits), "member_hit") == status


@pytest.mark.parametrize(("answerable", "status"), [(50, "pass"), (49, "fail")])
def test_false_empty_gate_passes_at_two_percent_and_fails_just_above(answerable, status):
    # One empty answer in 50 is exactly 2%; in 49 it is 2.04%.
    question_scores = [score(empty=True, class_hit=False), *scores(answerable - 1, answerable - 1)]

    metrics, _counts, gates = retrieval_gates(question_scores)

    assert metrics["false_empty"] == 1 / answerable
    assert gate(gates, "false_empty")["status"] == status


def test_false_empty_ignores_empty_negatives():
    question_scores = [*scores(10, 10), *[score(answerable=False, empty=True, class_hit=False,
                                                negative_kind="chitchat") for _ in range(5)]]

    assert gate_status(question_scores, "false_empty") == "pass"


@pytest.mark.parametrize(("count", "hits", "status"), [
    (10, 7, "pass"),  # exactly 70%
    (10, 6, "fail"),
    (5, 4, "pass"),  # the minimum layer size is checked
    (5, 3, "fail"),  # 60% with 5 questions
])
def test_colloquial_class_hit_gate_at_seventy_percent(count, hits, status):
    assert gate_status(scores(count, hits, "colloquial"), "colloquial_class_hit") == status


def test_colloquial_gate_is_skipped_under_five_questions_with_a_note_naming_the_count():
    _metrics, _counts, gates = retrieval_gates([*scores(20, 20), *scores(4, 0, "colloquial")])

    colloquial = gate(gates, "colloquial_class_hit")

    # 0% would fail: skipping is decided by the count, not the value.
    assert (colloquial["status"], colloquial["value"]) == ("skipped", 0.0)
    assert colloquial["note"] == "the colloquial layer has 4 question(s), needs 5"


@pytest.mark.parametrize(("count", "hits", "status"), [
    (10, 7, "pass"),  # exactly 70%
    (10, 6, "fail"),
    (5, 4, "pass"),
    (5, 3, "fail"),
    (4, 0, "skipped"),
])
def test_member_layer_member_hit_gate_at_seventy_percent_with_five_questions_minimum(count, hits, status):
    assert gate_status(member_scores(count, hits, "member"), "member_layer_member_hit") == status


def test_member_layer_questions_without_a_member_do_not_count_toward_its_minimum():
    question_scores = [*member_scores(4, 0, "member"), score("member")]  # five questions, four ask for a member

    _metrics, counts, gates = retrieval_gates(question_scores)

    assert counts["member"] == 4
    assert gate(gates, "member_layer_member_hit")["note"] == "the member layer has 4 question(s), needs 5"


@pytest.mark.parametrize(("count", "hits", "status"), [
    (4, 2, "pass"),  # exactly 50%
    (3, 2, "pass"),
    (3, 1, "fail"),
    (2, 0, "skipped"),
])
def test_typo_class_hit_gate_at_fifty_percent_with_three_questions_minimum(count, hits, status):
    assert gate_status(scores(count, hits, "typo"), "typo_class_hit") == status


def test_typo_gate_skipped_note_names_the_count():
    _metrics, _counts, gates = retrieval_gates(scores(2, 0, "typo"))

    assert gate(gates, "typo_class_hit")["note"] == "the typo layer has 2 question(s), needs 3"


def test_gate_without_any_applicable_question_is_skipped_not_failed():
    _metrics, _counts, gates = retrieval_gates(scores(10, 10))

    member = gate(gates, "member_hit")

    assert (member["status"], member["value"], member["note"]) == (
        "skipped", None, "no question this metric applies to")


def test_retrieval_gate_table_lists_the_seed_thresholds_in_order():
    _metrics, _counts, gates = retrieval_gates(scores(10, 10))

    assert [(g["metric"], g["op"], g["threshold"]) for g in gates] == [
        ("class_hit", ">=", 0.90), ("member_hit", ">=", 0.75), ("false_empty", "<=", 0.02),
        ("colloquial_class_hit", ">=", 0.70), ("member_layer_member_hit", ">=", 0.70),
        ("typo_class_hit", ">=", 0.50)]


# -- generation rules per question --------------------------------------------------------------------

CAMERA_PAGE = "PerspectiveCamera.md"


def gen_item(**extra) -> dict:
    item = {"id": "g-1", "answerable": True, "expected_classes": ["PerspectiveCamera"], "expected_members": ["far"],
            "must_mention": ["2000"], "forbidden": ["far defaults to 1000"], "needs_code": True}
    item.update(extra)
    return item


def negative_item(**extra) -> dict:
    return gen_item(answerable=False, expected_classes=[], expected_members=[], must_mention=[], forbidden=[],
                    needs_code=False, **extra)


GOOD_TEXT = ("`PerspectiveCamera.far` defaults to 2000 [1].\n\n"
             "```js\nconst camera = new PerspectiveCamera(50, 1, 0.1, 2000);\n```")


def outcome(**fields) -> rules.GenerationOutcome:
    """A good answer to `gen_item()`; override the fields a test breaks."""
    values = {"text": GOOD_TEXT, "confidence": "high", "mode": "llm", "citations": ("c1",), "invalid_citations": 0,
              "evidence": (chunk("PerspectiveCamera", "far", CAMERA_PAGE),), "evidence_ids": ("c1", "c2"),
              "discarded": (), "model_called": True}
    values.update(fields)
    return rules.GenerationOutcome(**values)


def refusal(**fields) -> rules.GenerationOutcome:
    """What the engine returns for a question it must not answer: no evidence, no model call."""
    values = {"text": "Not enough material.", "confidence": "none", "mode": "empty", "citations": (),
              "evidence": (), "evidence_ids": (), "model_called": False}
    values.update(fields)
    return outcome(**values)


def rules_of(item: dict, answer: rules.GenerationOutcome) -> dict:
    return rules.score_generation(item, answer).rules


def test_good_answer_keeps_every_rule():
    result = rules.score_generation(gen_item(), outcome())

    assert result.rules == {
        "answer_parses": True, "confidence_expected": True, "citations_valid": True, "class_mentioned": True,
        "member_mentioned": True, "path_clean": True, "negative_refused": None,
        "expected_class_not_discarded": True, "must_mention": True, "no_forbidden_claim": True, "code_block": True}
    assert result.rules_passed


@pytest.mark.parametrize(("confidence", "expected"), [("high", True), ("medium", True), ("low", False),
                                                      ("none", False)])
def test_answerable_question_expects_a_usable_confidence(confidence, expected):
    assert rules_of(gen_item(), outcome(confidence=confidence))["confidence_expected"] is expected


@pytest.mark.parametrize(("confidence", "expected"), [("none", True), ("low", False), ("high", False)])
def test_negative_question_expects_confidence_none(confidence, expected):
    assert rules_of(negative_item(), refusal(confidence=confidence))["confidence_expected"] is expected


@pytest.mark.parametrize(("text", "confidence", "expected"), [
    (GOOD_TEXT, "high", True),
    (GOOD_TEXT, "certain", False),  # not one of the four confidences
    (None, "high", False),  # no text at all
])
def test_answer_parses_needs_text_and_a_known_confidence(text, confidence, expected):
    assert rules_of(gen_item(), outcome(text=text, confidence=confidence))["answer_parses"] is expected


@pytest.mark.parametrize(("fields", "expected"), [
    ({}, True),
    ({"citations": ()}, False),  # no citation at all
    ({"citations": ("c1", "c9")}, False),  # c9 is not in this request's evidence
    ({"invalid_citations": 1}, False),  # the engine stripped a citation outside the evidence
])
def test_citations_valid_needs_at_least_one_citation_all_inside_the_evidence(fields, expected):
    assert rules_of(gen_item(), outcome(**fields))["citations_valid"] is expected


def test_citation_class_and_member_rules_do_not_apply_to_a_low_confidence_answer():
    checked = rules_of(gen_item(), outcome(confidence="low", citations=(), text="Not enough material."))

    # Citations and the class only count where the answer was due; members count on every answerable question.
    assert (checked["citations_valid"], checked["class_mentioned"], checked["member_mentioned"]) == (None, None, False)


@pytest.mark.parametrize(("text", "class_ok", "member_ok"), [
    ("perspectivecamera.FAR is 2000 [1]", True, True),  # case does not matter
    ("The far plane is 2000 [1]", False, True),
    ("PerspectiveCamera uses 2000 [1]", True, False),
])
def test_class_and_member_must_be_mentioned_in_the_text(text, class_ok, member_ok):
    checked = rules_of(gen_item(), outcome(text=text))

    assert (checked["class_mentioned"], checked["member_mentioned"]) == (class_ok, member_ok)


def test_every_expected_class_must_be_mentioned():
    item = gen_item(expected_classes=["WebGLRenderer", "DirectionalLight"], expected_members=[])

    assert rules_of(item, outcome(text="Set WebGLRenderer.shadowMap.enabled [1]"))["class_mentioned"] is False


@pytest.mark.parametrize("leak", [
    "cameras/PerspectiveCamera.md",
    "v3d-api-zh/cameras/PerspectiveCamera.md",
    "examples/webgl_shadow.html",
    "/home/x/y.js",
    "C:\\docs\\camera.md",
    "models/gltf/Duck.glb",
    # A URL with a path is treated as a path: answers cite evidence numbers, never addresses, and a URL
    # path exposes the docs' layout or an example scene (threejs.org/examples/...).
    "https://threejs.org/examples/webgl_shadow.html",
])
def test_file_and_example_paths_in_the_answer_break_path_clean(leak):
    assert rules_of(gen_item(), outcome(text=f"{GOOD_TEXT}\nSee {leak} for more."))["path_clean"] is False


def test_an_evidence_source_named_in_the_answer_breaks_path_clean():
    # A bare file name has no slash, so only the evidence check can catch it.
    assert rules.PATH_RE.search(CAMERA_PAGE) is None

    checked = rules_of(gen_item(), outcome(text=f"{GOOD_TEXT}\nFrom {CAMERA_PAGE}."))

    assert checked["path_clean"] is False


@pytest.mark.parametrize("prose", [
    "The aspect is width/height, e.g. 16/9 or 1/2.",
    "Use near and/or far; fov/near/far default to 50/0.1/2000.",
    "Set renderer.shadowMap.enabled = true and call Object3D.updateMatrix().",
    "See https://threejs.org for the project.",  # a bare host names no path
    "默认值：fov 50，near 0.1，far 2000。",
])
def test_plain_prose_with_slashes_fractions_and_dotted_names_keeps_path_clean(prose):
    assert rules_of(gen_item(), outcome(text=f"{GOOD_TEXT}\n{prose}"))["path_clean"] is True


@pytest.mark.parametrize(("answer", "expected"), [
    (refusal(), True),
    (refusal(confidence="low"), False),  # not an empty answer
    (refusal(evidence=(chunk("Camera"),), evidence_ids=("c1",)), False),  # evidence was adopted
    (refusal(model_called=True), False),  # the generation model was called
])
def test_negative_question_must_be_refused_empty_without_calling_the_model(answer, expected):
    checked = rules_of(negative_item(), answer)

    assert checked["negative_refused"] is expected


def test_answer_only_rules_do_not_apply_to_a_negative_question():
    checked = rules_of(negative_item(), refusal())

    assert {name: checked[name] for name in ("citations_valid", "class_mentioned", "member_mentioned",
                                             "expected_class_not_discarded", "must_mention",
                                             "no_forbidden_claim", "code_block")} == dict.fromkeys(
        ("citations_valid", "class_mentioned", "member_mentioned", "expected_class_not_discarded", "must_mention",
         "no_forbidden_claim", "code_block"))


@pytest.mark.parametrize(("evidence", "discarded", "expected"), [
    ((chunk("PerspectiveCamera", "far"),), (), True),
    ((chunk("Camera", "fov"),), (chunk("PerspectiveCamera", "far"),), False),  # only in discarded chunks
    ((chunk("Camera", "fov", "cameras/PerspectiveCamera.md"),), (chunk("PerspectiveCamera", "far"),), True),
    ((chunk("Camera", "fov"),), (), True),  # never found: a retrieval miss, not a discard
])
def test_expected_class_only_in_discarded_chunks_is_flagged(evidence, discarded, expected):
    answer = outcome(evidence=evidence, discarded=discarded)

    assert rules_of(gen_item(), answer)["expected_class_not_discarded"] is expected


@pytest.mark.parametrize(("text", "must_mention", "expected"), [
    ("far is 2000 and near is 0.1", ["2000", "0.1"], True),
    ("far is 2000", ["2000", "0.1"], False),
])
def test_must_mention_needs_every_word(text, must_mention, expected):
    assert rules_of(gen_item(must_mention=must_mention), outcome(text=text))["must_mention"] is expected


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD_TEXT, True),
    ("PerspectiveCamera.far defaults to 1000 [1]", False),
    ("PerspectiveCamera.far FAR DEFAULTS TO 1000 [1]", False),
])
def test_a_forbidden_claim_in_the_answer_breaks_no_forbidden_claim(text, expected):
    assert rules_of(gen_item(), outcome(text=text))["no_forbidden_claim"] is expected


@pytest.mark.parametrize(("needs_code", "text", "expected"), [
    (True, GOOD_TEXT, True),
    (True, "PerspectiveCamera.far defaults to 2000 [1]", False),
    (False, "PerspectiveCamera.far defaults to 2000 [1]", None),
])
def test_code_block_is_required_only_when_the_item_needs_code(needs_code, text, expected):
    assert rules_of(gen_item(needs_code=needs_code), outcome(text=text))["code_block"] is expected


def test_rules_without_golden_words_do_not_apply():
    item = gen_item(expected_members=[], must_mention=[], forbidden=[], needs_code=False)

    checked = rules_of(item, outcome())

    assert (checked["member_mentioned"], checked["must_mention"], checked["no_forbidden_claim"],
            checked["code_block"]) == (None, None, None, None)


def test_a_broken_rule_fails_the_question_but_a_not_applicable_one_does_not():
    assert rules.score_generation(negative_item(), refusal()).rules_passed
    assert not rules.score_generation(gen_item(), outcome(citations=())).rules_passed


# -- generation metrics and gates ---------------------------------------------------------------------

ANSWERABLE_RULES = ("answer_parses", "confidence_expected", "citations_valid", "class_mentioned", "member_mentioned",
                    "path_clean", "expected_class_not_discarded")


def gen_score(*, answerable: bool = True, **broken_or_missing) -> rules.GenerationScore:
    """A scored question whose rules all hold, except those given (False: broken, None: not applicable)."""
    if answerable:
        checked = dict.fromkeys(ANSWERABLE_RULES, True)
    else:
        checked = {"answer_parses": True, "confidence_expected": True, "path_clean": True, "negative_refused": True}
    checked.update(broken_or_missing)
    return rules.GenerationScore(id="g", answerable=answerable, rules=checked)


def gen_scores(count: int, keeping: int, rule: str) -> list[rules.GenerationScore]:
    """`count` answerable questions of which the first `keeping` keep `rule` and the rest break it."""
    return [gen_score(**{rule: n < keeping}) for n in range(count)]


def judge_summary(judged: int = 10, passed: int = 10, hallucinations: int = 0) -> rules.JudgeSummary:
    return rules.JudgeSummary(judged=judged, passed=passed, hallucinations=hallucinations, correct=passed, flaky=0,
                              errors=0)


def gen_gates(generation_scores, judge=None) -> list[dict]:
    metrics, _counts = rules.generation_metrics(generation_scores, judge)
    return generation_gates(metrics, judge_configured=judge is not None)


def test_without_a_judge_the_judge_gates_are_not_scored_and_the_verdict_says_so():
    gates = gen_gates([gen_score(), gen_score(answerable=False)])

    judged = [gate(gates, "judge_pass"), gate(gates, "hallucination_count")]

    assert [(g["status"], g["value"], g["note"]) for g in judged] == [
        ("not_scored", None, "no judge model configured")] * 2
    assert {g["status"] for g in gates if g not in judged} == {"pass"}
    assert verdict_of(gates) == "not_scored"


def test_a_failed_rule_gate_fails_the_verdict_even_without_a_judge():
    gates = gen_gates([gen_score(), gen_score(class_mentioned=False)])

    assert verdict_of(gates) == "fail"


def test_all_gates_passing_with_a_judge_gives_pass():
    gates = gen_gates([gen_score(), gen_score(answerable=False)], judge_summary())

    assert verdict_of(gates) == "pass"


@pytest.mark.parametrize(("passed", "status"), [(8, "pass"), (7, "fail")])
def test_judge_pass_gate_passes_at_exactly_eighty_percent(passed, status):
    metrics, _counts = rules.generation_metrics([gen_score()], judge_summary(judged=10, passed=passed))

    judge_pass = gate(generation_gates(metrics, judge_configured=True), "judge_pass")

    assert (judge_pass["value"], judge_pass["status"]) == (passed / 10, status)


@pytest.mark.parametrize(("hallucinations", "status"), [(0, "pass"), (1, "fail")])
def test_a_single_hallucination_fails_the_gate(hallucinations, status):
    gates = gen_gates([gen_score()], judge_summary(hallucinations=hallucinations))

    assert gate(gates, "hallucination_count")["status"] == status


def test_a_configured_judge_that_judged_nothing_leaves_judge_pass_not_scored():
    gates = gen_gates([gen_score()], judge_summary(judged=0, passed=0))

    assert (gate(gates, "judge_pass")["status"], gate(gates, "judge_pass")["note"]) == (
        "not_scored", "no judged question")
    assert verdict_of(gates) == "not_scored"


@pytest.mark.parametrize(("keeping", "status"), [(95, "pass"), (94, "fail")])
def test_class_mentioned_gate_passes_at_exactly_ninety_five_percent(keeping, status):
    assert gate(gen_gates(gen_scores(100, keeping, "class_mentioned")), "class_mentioned")["status"] == status


@pytest.mark.parametrize(("keeping", "status"), [(85, "pass"), (84, "fail")])
def test_member_mentioned_gate_passes_at_exactly_eighty_five_percent(keeping, status):
    assert gate(gen_gates(gen_scores(100, keeping, "member_mentioned")), "member_mentioned")["status"] == status


def test_rates_leave_questions_a_rule_does_not_apply_to_out_of_the_denominator():
    # 19 kept + 1 broken + 5 not applicable: 19 / 20 = 95% (counting the five would make it 24 / 25).
    generation_scores = [*gen_scores(20, 19, "class_mentioned"), *[gen_score(class_mentioned=None)] * 5]

    metrics, _counts = rules.generation_metrics(generation_scores, None)

    assert metrics["class_mentioned"] == 19 / 20


def test_a_single_path_leak_fails_the_hundred_percent_path_gate():
    gates = gen_gates([*gen_scores(99, 99, "path_clean"), gen_score(path_clean=False)])

    assert (gate(gates, "path_clean")["value"], gate(gates, "path_clean")["status"]) == (99 / 100, "fail")


@pytest.mark.parametrize(("discarded", "value", "status"), [(0, 0.0, "pass"), (1, 1 / 20, "fail")])
def test_expected_class_discarded_is_the_share_of_answerable_questions_and_must_be_zero(discarded, value, status):
    generation_scores = [gen_score(expected_class_not_discarded=n >= discarded) for n in range(20)]

    discarded_gate = gate(gen_gates(generation_scores), "expected_class_discarded")

    assert (discarded_gate["value"], discarded_gate["status"]) == (pytest.approx(value), status)


def test_negative_refused_counts_only_negatives():
    generation_scores = [gen_score(), gen_score(answerable=False), gen_score(answerable=False, negative_refused=False)]

    metrics, counts = rules.generation_metrics(generation_scores, None)

    assert (metrics["negative_refused"], counts["negatives"], counts["answerable"]) == (1 / 2, 2, 1)


def test_a_rule_gate_with_no_applicable_question_is_skipped_and_does_not_block_the_verdict():
    gates = gen_gates([gen_score()], judge_summary())  # no negatives

    refused = gate(gates, "negative_refused")

    assert (refused["status"], refused["note"]) == ("skipped", "no question this rule applies to")
    assert verdict_of(gates) == "pass"


def test_generation_metrics_report_judge_rates_and_counts():
    summary = rules.JudgeSummary(judged=8, passed=6, hallucinations=1, correct=4, flaky=2, errors=1)

    metrics, counts = rules.generation_metrics([gen_score()], summary)

    assert (metrics["judge_pass"], metrics["correct_rate"], metrics["hallucination_count"]) == (6 / 8, 4 / 8, 1)
    assert (counts["judged"], counts["flaky"], counts["judge_errors"]) == (8, 2, 1)


@pytest.mark.parametrize(("newly_failing", "status"), [(None, "skipped"), (0, "pass"), (2, "pass"), (3, "fail")])
def test_baseline_gate_allows_up_to_the_limit_of_newly_failing_questions(newly_failing, status):
    baseline = baseline_gate(newly_failing, 2)

    assert (baseline["metric"], baseline["value"], baseline["status"]) == ("newly_failing_count", newly_failing, status)


def test_baseline_gate_without_a_baseline_says_why():
    assert baseline_gate(None, 2)["note"] == "no baseline run of the active version"


@pytest.mark.parametrize(("statuses", "verdict"), [
    (["pass", "skipped"], "pass"),
    (["pass", "not_scored", "skipped"], "not_scored"),
    (["pass", "not_scored", "fail"], "fail"),
])
def test_verdict_is_fail_over_not_scored_over_pass(statuses, verdict):
    assert verdict_of([{"status": s} for s in statuses]) == verdict


# -- attribution -------------------------------------------------------------------------------------


def attribute(item: dict, *, adopted=(), ranked=None, excluded=(), plan=None) -> rules.Attribution:
    """Attribute a retrieval failure; `ranked` defaults to the adopted chunks (nothing else was found)."""
    adopted = list(adopted)
    return rules.attribute_retrieval(item, score_question(item, adopted), plan or {"kind": "doc", "corrections": []},
                                     list(adopted if ranked is None else ranked), adopted, list(excluded))


def test_answerable_question_planned_as_chitchat_is_a_plan_error():
    result = attribute(golden("r-1", ["Fog"]), plan={"kind": "chitchat", "corrections": []})

    assert (result.code, result.detail) == ("plan_error", "planned as chitchat")


def test_negative_that_adopted_chunks_is_a_plan_error():
    result = attribute(golden("n-1", negative_kind="out_of_catalog"), adopted=[chunk("Camera"), chunk("Fog")])

    assert (result.code, result.detail) == (
        "plan_error", "should be empty (out_of_catalog) but 2 chunk(s) were adopted")


def test_a_correction_to_another_class_that_lost_the_expected_one_is_a_plan_error():
    plan = {"kind": "doc", "corrections": [{"from": "Raycastr", "to": "Camera"}]}

    result = attribute(golden("r-1", ["Raycaster"], layer="typo"), adopted=[chunk("Camera")], plan=plan)

    assert (result.code, result.detail) == ("plan_error", "corrected Raycastr→Camera")


def test_a_right_correction_is_not_blamed_for_a_retrieval_miss():
    plan = {"kind": "doc", "corrections": [{"from": "Raycastr", "to": "Raycaster"}]}

    result = attribute(golden("r-1", ["Raycaster"], layer="typo"), adopted=[chunk("Camera")], plan=plan)

    assert result.code == "not_retrieved"


def test_expected_class_only_in_excluded_chunks_is_adopted_but_excluded():
    fog = chunk("Fog", "near")

    result = attribute(golden("r-1", ["Fog"]), adopted=[chunk("Scene")], ranked=[chunk("Scene"), fog], excluded=[fog])

    assert (result.code, result.detail) == ("adopted_but_excluded", "Fog was only in excluded chunks")


def test_expected_class_ranked_beyond_the_window_is_outside_window_with_its_rank():
    adopted = filler(5)

    result = attribute(golden("r-1", ["Fog"]), adopted=adopted, ranked=[*adopted, *filler(2, "Mesh"), chunk("Fog")])

    assert (result.code, result.detail) == ("outside_window", "Fog found at rank 8, outside the window of 5")


def test_multi_class_question_reports_the_window_of_its_class_count():
    adopted = [chunk("Scene"), *filler(5)]
    ranked = [*adopted, chunk("Fog")]

    result = attribute(golden("r-1", ["Scene", "Fog"], layer="multi"), adopted=adopted, ranked=ranked)

    assert (result.code, result.detail) == ("outside_window", "Fog found at rank 7, outside the window of 6")


def test_expected_class_found_by_no_route_is_not_retrieved():
    result = attribute(golden("r-1", ["Fog"]), adopted=filler(5))

    assert (result.code, result.detail) == ("not_retrieved", "no route found Fog")


def test_class_hit_but_member_below_the_first_three_is_a_member_outside_window():
    adopted = [chunk("Object3D", "position"), chunk("Object3D", "rotation"), chunk("Object3D", "scale"),
               chunk("Object3D", "castShadow")]

    result = attribute(golden("r-1", ["Object3D"], ["castShadow"], layer="member"), adopted=adopted)

    assert (result.code, result.detail) == ("outside_window", "member found at rank 4, outside the first 3")


def test_class_hit_but_member_nowhere_is_a_member_not_retrieved():
    adopted = [chunk("Object3D", "position"), chunk("Mesh", "castShadow")]  # the member on another class's page

    result = attribute(golden("r-1", ["Object3D"], ["castShadow"], layer="member"), adopted=adopted)

    assert (result.code, result.detail) == ("not_retrieved", "no route found the member")


def test_class_hit_but_member_only_in_excluded_chunks_is_adopted_but_excluded():
    member = chunk("Object3D", "castShadow")

    result = attribute(golden("r-1", ["Object3D"], ["castShadow"]), adopted=[chunk("Object3D", "position")],
                       ranked=[chunk("Object3D", "position"), member], excluded=[member])

    assert result.code == "adopted_but_excluded"


def generation_attribution(item, answer, *, retrieval=None, judge=None) -> rules.Attribution:
    return rules.attribute_generation(item, rules.score_generation(item, answer), answer, retrieval, judge)


def test_a_negative_that_was_answered_is_a_plan_error_naming_the_model_call():
    answer = outcome(text="It defaults to 2000 [1].", confidence="high")

    result = generation_attribution(negative_item(), answer)

    assert (result.code, result.detail) == ("plan_error",
                                            "answered a question that should be refused (the model was called)")


def test_expected_class_only_discarded_comes_before_the_retrieval_cause():
    answer = outcome(evidence=(chunk("Camera"),), discarded=(chunk("PerspectiveCamera", "far"),))

    result = generation_attribution(gen_item(), answer, retrieval=rules.Attribution("not_retrieved", "x"))

    assert result.code == "expected_class_discarded"


def test_a_retrieval_cause_passes_through_before_answer_rules():
    retrieval = rules.Attribution("outside_window", "PerspectiveCamera found at rank 8, outside the window of 5")

    result = generation_attribution(gen_item(), outcome(citations=(), text="No idea."), retrieval=retrieval)

    assert result == retrieval


@pytest.mark.parametrize(("fields", "detail"), [
    ({"citations": ()}, "no valid citation"),
    ({"citations": ("c1",), "invalid_citations": 2}, "2 citation(s) outside the evidence"),
])
def test_broken_citations_are_citation_wrong(fields, detail):
    result = generation_attribution(gen_item(), outcome(**fields), judge={"passed": False, "notes": "bad"})

    assert (result.code, result.detail) == ("citation_wrong", detail)


@pytest.mark.parametrize(("fields", "rule"), [
    ({"confidence": "low"}, "confidence_expected"),
    ({"text": "The far plane defaults to 2000 [1]\n```js\n```"}, "class_mentioned"),
    ({"text": "PerspectiveCamera: 2000 [1]\n```js\n```"}, "member_mentioned"),
    ({"text": "PerspectiveCamera.far is large [1]\n```js\n```"}, "must_mention"),
    ({"text": "PerspectiveCamera.far defaults to 2000 [1]"}, "code_block"),
    ({"text": f"{GOOD_TEXT}\nsee cameras/PerspectiveCamera.md"}, "path_clean"),
])
def test_a_missed_answer_rule_is_generation_missed_naming_the_first_rule(fields, rule):
    result = generation_attribution(gen_item(), outcome(**fields), judge={"passed": False, "notes": "bad"})

    assert (result.code, result.detail) == ("generation_missed", f"rule {rule} failed")


def test_class_missing_is_named_before_must_mention_when_both_fail():
    result = generation_attribution(gen_item(), outcome(text="far is large [1]\n```js\n```"))

    assert result.detail == "rule class_mentioned failed"


@pytest.mark.parametrize("judge", [
    {"passed": False, "hallucination": False, "notes": "invented a parameter"},
    {"passed": True, "hallucination": True, "notes": "invented a parameter"},
])
def test_an_answer_the_judge_failed_is_judge_flagged_with_its_notes(judge):
    result = generation_attribution(gen_item(), outcome(), judge=judge)

    assert (result.code, result.detail) == ("judge_flagged", "invented a parameter")


def test_an_answer_nothing_flagged_has_no_attribution():
    result = generation_attribution(gen_item(), outcome(), judge={"passed": True, "hallucination": False})

    assert (result.code, result.detail) == ("", "")


# -- every metric has a home (rag.metrics.METRICS) --------------------------------------------------------------


def test_every_metric_a_run_stores_is_registered_with_its_direction():
    from rag.metrics import METRICS, lower_is_better, metric

    retrieval = summarize([score_question({"id": "q", "layer": "plain", "answerable": True,
                                           "expected_classes": ["Fog"]}, [])]).metrics
    generation, _ = rules.generation_metrics([gen_score()], judge_summary(), {
        "unexpected_degraded_count": 0, "low_confidence_model_call_count": 0})
    gated = [gate["metric"] for gate in generation_gates(generation, judge_configured=True)]

    assert set(retrieval) | set(generation) | set(gated) | {baseline_gate(0, 0)["metric"]} <= set(METRICS)
    assert metric("layer:typo").label == "class hit · typo" and metric("no_such_metric") is None
    assert {name for name in METRICS if lower_is_better(name)} == {
        "false_empty", "expected_class_discarded", "hallucination_count", "unexpected_degraded_count",
        "low_confidence_model_call_count", "newly_failing_count"}
