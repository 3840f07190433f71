"""The release gate type (rag.metrics.Gate): one comparison and one row shape for every gate table. The
seed's thresholds and notes per gate table are checked in evaluation/tests/test_rules.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rag import metrics
from rag.metrics import Gate, GateResult


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



def test_the_metrics_are_plain_python_for_make_bench():
    tree = ast.parse(Path(metrics.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert not {name for name in imported if name.split(".")[0] in ("django", "rag")}
