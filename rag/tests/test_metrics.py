"""The release gate type (rag.metrics.Gate): one comparison and one row shape for every gate table, and the
helpers `make bench` splits and breaks down its tables with. The seed's thresholds and notes per gate table
are checked in evaluation/tests/test_rules.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rag import metrics
from rag.metrics import Gate, GateResult, QuestionScore, class_hit_by_layer, id_half, split_halves


@pytest.mark.parametrize(("op", "value", "status"), [
    (">=", 0.9, "pass"),  # the threshold itself passes either way
    (">=", 0.89, "fail"),
    ("<=", 0.9, "pass"),
    ("<=", 0.91, "fail"),
])
def test_a_gate_compares_its_value_with_the_threshold_inclusively(op, value, status):
    assert Gate("class_hit", op, 0.9).check(value).status == status


def test_a_gate_row_has_the_stored_shape_in_the_stored_order():
    row = Gate("hallucination_count", "<=", 0, needs_judge=True).check(1).as_dict()

    assert list(row.items()) == [("metric", "hallucination_count"), ("op", "<="), ("threshold", 0), ("value", 1),
                                 ("status", "fail"), ("note", "")]


def test_a_layer_gate_is_skipped_under_its_minimum_whatever_the_value():
    gate = Gate("typo_class_hit", ">=", 0.5, layer="typo", minimum=3)

    small, enough = gate.check(0.0, counts={"typo": 2}), gate.check(0.0, counts={"typo": 3})

    assert (small.status, small.value, small.note) == ("skipped", 0.0, "the typo layer has 2 question(s), needs 3")
    assert enough.status == "fail"


def test_a_judge_gate_is_not_scored_without_a_judge_or_a_judged_question():
    gate = Gate("judge_pass", ">=", 0.8, needs_judge=True)

    no_judge, nothing_judged = gate.check(0.9, judge_configured=False), gate.check(None)

    assert (no_judge.status, no_judge.value, no_judge.note) == ("not_scored", None, "no judge model configured")
    assert (nothing_judged.status, nothing_judged.note) == ("not_scored", "no judged question")


def test_an_unmeasured_gate_is_skipped_with_the_callers_note():
    result = Gate("newly_failing_count", "<=", 2).check(None, unmeasured="no baseline run of the active version")

    assert result == GateResult("newly_failing_count", "<=", 2, None, "skipped", "no baseline run of the active version")


def test_a_gate_refuses_an_unknown_operator():
    with pytest.raises(ValueError, match="op"):
        Gate("class_hit", ">", 0.9)


def make_score(question_id: str, layer: str = "plain", *, class_hit: bool = False) -> QuestionScore:
    return QuestionScore(id=question_id, layer=layer, answerable=layer != "negative", empty=False,
                         class_hit=class_hit)


@pytest.mark.parametrize(("question_id", "half"), [
    ("r-001", "A"), ("r-002", "B"), ("rd-064", "B"), ("rd-065", "A"), ("h-10", "B"), ("x-2-7", "A"),
])
def test_a_question_s_half_is_read_from_the_number_its_id_ends_in(question_id, half):
    assert id_half(question_id) == half


def test_an_id_without_a_number_has_no_half():
    with pytest.raises(ValueError, match="ends in a number"):
        id_half("r-first")


def test_the_halves_split_by_id_alone_and_keep_the_given_order():
    scores = [make_score(question_id) for question_id in ("r-004", "r-001", "r-002", "r-003")]

    halves = split_halves(scores)

    assert {half: [s.id for s in part] for half, part in halves.items()} == {"A": ["r-001", "r-003"],
                                                                              "B": ["r-004", "r-002"]}
    assert split_halves(list(reversed(scores)))["A"] == list(reversed(halves["A"]))


def test_both_halves_exist_even_when_one_is_empty():
    assert split_halves([make_score("r-001")]) == {"A": [make_score("r-001")], "B": []}


def test_class_hit_by_layer_counts_answerable_questions_of_each_layer():
    scores = [make_score("r-001", "plain", class_hit=True), make_score("r-002", "plain"),
              make_score("r-003", "colloquial", class_hit=True), make_score("r-004", "negative", class_hit=True)]

    by_layer = class_hit_by_layer(scores)

    assert by_layer == {"plain": 0.5, "colloquial": 1.0, "member": None, "typo": None, "multi": None}


def test_the_metrics_are_plain_python_for_make_bench():
    tree = ast.parse(Path(metrics.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert not {name for name in imported if name.split(".")[0] in ("django", "rag")}
