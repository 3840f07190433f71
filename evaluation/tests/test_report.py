"""The HTML report of a run and the comparison of two runs: offline, escaped, and right about the numbers."""

from __future__ import annotations

import re

import pytest

from evaluation.report import compare_runs, question_anchor, render_compare, render_report

PAYLOAD = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def make_chunk(rank, class_name="Object3D", member="castShadow", *, adopted=True, chunk_id=None):
    return {"rank": rank, "chunk_id": chunk_id or f"c{rank}", "class_name": class_name, "member": member,
            "source": "api/Object3D.md", "score": 1.0 / rank, "adopted": adopted}


def make_result(item_id, *, passed=True, question="How do I cast shadows?", **extra):
    result = {
        "item_id": item_id, "question": question, "layer": "plain", "kb": "v3d-api-en", "answerable": True,
        "negative_kind": "", "expected_classes": ["Object3D"], "expected_members": ["castShadow"],
        "passed": passed, "attribution": "" if passed else "not_retrieved",
        "attribution_detail": "" if passed else "Object3D not in the top 5",
        "plan": {"kind": "doc", "classes": ["Object3D"], "corrections": [{"from": "Objet3D", "to": "Object3D"}]},
        "retrieved": [make_chunk(1), make_chunk(2, "Mesh", "")], "excluded": [], "answer": "",
        "confidence": "", "citations": [], "rules": {}, "judge": None, "flaky": False, "request_id": "req-1",
    }
    result.update(extra)
    return result


def make_retrieval_run(**extra):
    run = {
        "id": 12, "kind": "retrieval", "golden_set": {"name": "retrieval-core", "version": 3}, "kb": "v3d-api-en",
        "index_versions": {"v3d-api-en": "v7"}, "candidate": True, "status": "done", "verdict": "fail",
        "error": "", "started_at": "2025-05-01T10:00:00+00:00", "finished_at": "2025-05-01T10:03:12+00:00",
        "commit": "abc1234", "judge": None,
        "metrics": {"class_hit": 0.9333, "member_hit": 0.7, "false_empty": 0.0, "hit_at_1": None},
        "counts": {"answerable": 15, "negatives": 2, "typo": 3},
        "gates": [
            {"metric": "class_hit", "op": ">=", "threshold": 0.9, "value": 0.9333, "status": "pass"},
            {"metric": "member_hit", "op": ">=", "threshold": 0.75, "value": 0.7, "status": "fail"},
            {"metric": "false_empty", "op": "<=", "threshold": 0.02, "value": 0.0, "status": "pass"},
            {"metric": "typo_class_hit", "op": ">=", "threshold": 0.5, "value": 0.33, "status": "skipped",
             "note": "layer has 2 questions, needs 3"},
        ],
        "layers": [
            {"layer": "plain", "questions": 10, "metrics": {"class_hit": 1.0, "member_hit": 0.8}},
            {"layer": "typo", "questions": 2, "metrics": {"class_hit": 0.5, "hit_at_3": None}},
        ],
        "baseline": {"run_id": 7, "newly_failing": ["r-002", "r-099"], "newly_passing": [],
                     "max_newly_failing": 1, "status": "fail"},
        "results": [
            make_result("r-001"),
            make_result("r-002", passed=False, layer="typo"),
            make_result("r-003", retrieved=[make_chunk(rank) for rank in range(1, 13)], excluded=["c11"]),
        ],
    }
    run.update(extra)
    return run


def make_generation_run(**extra):
    judge = {"grounding": 2, "answering": 4, "citation_alignment": 3, "api_usage": 4, "hallucination": True,
             "passed": False, "correct": False, "notes": "invented a parameter"}
    run = make_retrieval_run(
        id=13, kind="generation", golden_set={"name": "generation-core", "version": 1}, verdict="not_scored",
        judge={"model": "qwen3.8-flash", "prompt_version": "j2", "repeats": 1},
        metrics={"judge_pass": None, "hallucination_count": 1, "structure": 1.0},
        gates=[
            {"metric": "structure", "op": ">=", "threshold": 1.0, "value": 1.0, "status": "pass"},
            {"metric": "judge_pass", "op": ">=", "threshold": 0.8, "value": None, "status": "not_scored",
             "note": "judge unavailable"},
            {"metric": "hallucination_count", "op": "<=", "threshold": 0, "value": 1, "status": "fail"},
        ],
        layers=[{"layer": "plain", "questions": 2, "metrics": {"structure": 1.0, "citation_legal": 0.5}}],
        baseline=None,
        results=[
            make_result("g-001", answer="Set `castShadow = true` [1].", confidence="high",
                        citations=[{"number": 1, "chunk_id": "c1", "source": "api/Object3D.md"}],
                        rules={"structure": True, "citation_legal": True, "refusal": None},
                        judge={**judge, "hallucination": False, "passed": True, "correct": True, "notes": ""}),
            make_result("g-002", passed=False, attribution="judge_flagged", answer="It takes `shadowBias`.",
                        confidence="high", rules={"structure": True, "citation_legal": False}, judge=judge),
        ],
    )
    run.update(extra)
    return run


def find(pattern: str, html: str) -> str:
    """Return the first part of the page that matches, across lines."""
    return re.search(pattern, html, re.DOTALL).group(0)


def gate_chart(html: str) -> str:
    return find(r'<svg id="gate-chart".*?</svg>', html)


# -- one offline document ------------------------------------------------------------------------------


@pytest.mark.parametrize("make_run", [make_retrieval_run, make_generation_run])
def test_report_is_one_document_that_opens_offline(make_run):
    html = render_report(make_run())

    assert html.lstrip().lower().startswith("<!doctype html>")
    assert html.count("<html") == 1 and html.rstrip().endswith("</html>")
    assert "<style>" in html and "<svg" in html
    for reference in ("<script", "src=", 'href="http', "href='http", "<link", "@import", "url("):
        assert reference not in html


def test_compare_is_one_document_that_opens_offline():
    html = render_compare(make_retrieval_run(), make_retrieval_run(id=14))

    assert html.lstrip().lower().startswith("<!doctype html>")
    for reference in ("<script", "src=", 'href="http', "<link", "url("):
        assert reference not in html


# -- escaping ------------------------------------------------------------------------------------------


def test_markup_in_questions_answers_chunks_and_judge_notes_is_escaped():
    run = make_generation_run()
    failed = run["results"][1]
    failed["question"] = f"question {PAYLOAD}"
    failed["answer"] = f"answer {PAYLOAD}"
    failed["retrieved"][0]["class_name"] = f"class {PAYLOAD}"
    failed["judge"] = {**failed["judge"], "notes": f"note {PAYLOAD}"}
    failed["attribution_detail"] = f"detail {PAYLOAD}"

    html = render_report(run)

    assert PAYLOAD not in html and "<script" not in html
    for field in ("question", "answer", "class", "note", "detail"):
        assert f"{field} {ESCAPED}" in html


def test_markup_in_chart_labels_and_gate_notes_is_escaped_inside_the_svg():
    run = make_retrieval_run()
    run["layers"][0]["layer"] = PAYLOAD
    run["gates"][3]["note"] = f"note {PAYLOAD}"
    run["golden_set"]["name"] = PAYLOAD
    run["results"][0]["item_id"] = f'"><b>{PAYLOAD}'

    html = render_report(run)

    assert PAYLOAD not in html and "<script" not in html and "<b>" not in html
    assert f"note {ESCAPED}" in gate_chart(html)
    assert ESCAPED in find(r'<svg id="breakdown-chart".*?</svg>', html)


def test_question_anchors_are_safe_and_distinct():
    assert question_anchor("r-001") == "q-r-001"
    assert question_anchor("a b") != question_anchor("a_b")
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", question_anchor('"><script>x'))


def test_compare_escapes_question_text_from_both_runs():
    a = make_retrieval_run(results=[make_result("r-001", question=f"old {PAYLOAD}")])
    b = make_retrieval_run(id=14, results=[make_result("r-001", passed=False, question=f"new {PAYLOAD}")])

    html = render_compare(a, b)

    assert PAYLOAD not in html
    assert f"old {ESCAPED}" in html and f"new {ESCAPED}" in html


# -- content -------------------------------------------------------------------------------------------


def test_report_shows_verdict_gate_statuses_and_notes():
    html = render_report(make_retrieval_run())

    assert "Evaluation run #12 — retrieval-core v3" in html
    assert '<div class="verdict verdict-fail">FAIL</div>' in html
    for status in ("pass", "fail", "skipped"):
        assert f'<span class="badge badge-{status}">{status}</span>' in html
    assert "layer has 2 questions, needs 3" in html
    assert "≥ 90.0%" in html and "93.3%" in html and "≤ 2.0%" in html
    assert "candidate — not yet active" in html
    assert "judge not configured — judge metrics not scored" in html


def test_not_scored_gate_and_verdict_are_shown_with_counts_as_integers():
    html = render_report(make_generation_run())

    assert '<div class="verdict verdict-not_scored">NOT SCORED</div>' in html
    assert '<span class="badge badge-not_scored">not scored</span>' in html
    assert "judge unavailable" in html
    assert "≤ 0</td>" in html  # the hallucination count threshold is a count, not 0.0%
    assert "qwen3.8-flash · prompt j2" in html


def test_gate_chart_has_one_bar_and_one_threshold_line_per_gated_metric():
    run = make_retrieval_run()

    chart = gate_chart(render_report(run))

    assert chart.count('class="bar ') == len(run["gates"]) == 4
    assert chart.count('class="threshold"') == 4
    assert 'data-key="member_hit"' in chart and 'fill="#c62828"' in chart  # the failing gate is red


def test_generation_chart_has_one_bar_per_rule_with_its_pass_rate():
    html = render_report(make_generation_run())

    chart = find(r'<svg id="breakdown-chart".*?</svg>', html)

    assert chart.count('class="bar ') == 2  # structure and citation_legal; refusal never applied
    assert "100.0% (2/2)" in chart and "50.0% (1/2)" in chart
    assert gate_chart(html).count('class="bar ') == 3


def test_layer_table_has_the_union_of_metric_columns():
    html = render_report(make_retrieval_run())

    table = find(r'<h2 id="layers">.*?</table>', html)

    for column in ("class_hit", "member_hit", "hit_at_3"):
        assert f'<th class="number">{column}</th>' in table
    assert "—" in table  # typo has no member_hit, and hit_at_3 is None


def test_baseline_section_links_known_questions_and_says_the_limit_was_exceeded():
    html = render_report(make_retrieval_run())

    assert "Against the baseline run #7" in html
    assert '<a href="#q-r-002">r-002</a>' in html
    assert "r-099" in html and 'href="#q-r-099"' not in html  # not in this run: no dangling link
    assert "limit exceeded" in html


def test_questions_keep_their_order_and_failed_ones_are_indexed_near_the_top():
    html = render_report(make_retrieval_run())

    rows = re.findall(r'<tr id="(q-[^"]+)">', html)
    failed_index = find(r'<h2 id="failed">.*?</ul>', html)

    assert rows == ["q-r-001", "q-r-002", "q-r-003"]
    assert 'href="#q-r-002"' in failed_index and "q-r-001" not in failed_index
    assert html.index('id="failed"') < html.index('id="questions"')
    assert "not retrieved" in html and "Object3D not in the top 5" in html


def test_only_ten_chunks_show_and_the_rest_fold_into_details():
    html = render_report(make_retrieval_run())

    row = find(r'<tr id="q-r-003">.*?</tr>', html)

    assert "<details><summary>2 more</summary>" in row
    assert row.count("<li ") == 12
    assert row.count("badge-fail\">excluded") == 1


def test_generation_rows_show_answer_citations_failed_rules_and_judge():
    html = render_report(make_generation_run())

    row = find(r'<tr id="q-g-002">.*?</tr>', html)

    assert "<pre>It takes `shadowBias`.</pre>" in row
    assert "<td>citation_legal</td>" in row
    assert "grounding 2" in row and "hallucination" in row and "invented a parameter" in row
    assert "judge flagged" in row


# -- missing values ------------------------------------------------------------------------------------


def test_a_run_with_almost_nothing_still_renders():
    html = render_report({"id": 3, "kind": "generation", "judge": None, "metrics": None, "counts": None,
                          "gates": None, "layers": None, "results": [], "baseline": None, "verdict": None,
                          "golden_set": None, "index_versions": None, "started_at": None, "finished_at": None})

    assert "Evaluation run #3" in html
    assert "NO VERDICT" in html
    assert "judge not configured — judge metrics not scored" in html
    assert "No questions were scored." in html


def test_an_empty_dict_and_odd_values_do_not_crash():
    odd = make_generation_run(started_at="not a date", metrics={"class_hit": None, "x_count": None})
    odd["results"][0].update(judge={"notes": None}, plan=None, retrieved=None, citations=None, rules=None)
    odd["gates"].append({"metric": "recall", "status": "skipped"})

    assert "<html" in render_report({})
    assert "not a date" in render_report(odd)
    assert "<html" in render_compare({}, {})


# -- comparison ----------------------------------------------------------------------------------------


def make_pair():
    a = make_retrieval_run(
        id=20, verdict="pass", metrics={"class_hit": 0.9, "false_empty": 0.02, "hallucination_count": 1},
        results=[make_result("r-001"), make_result("r-002"), make_result("r-003", passed=False),
                 make_result("r-004")])
    b = make_retrieval_run(
        id=21, verdict="fail",
        metrics={"class_hit": 0.85, "false_empty": 0.0, "hallucination_count": 0, "member_hit": 0.8},
        results=[make_result("r-001"), make_result("r-002", passed=False, question="changed wording"),
                 make_result("r-003"), make_result("r-005", passed=False)])
    return a, b


def test_compare_runs_finds_flips_and_deltas():
    a, b = make_pair()

    comparison = compare_runs(a, b)

    assert comparison["a"] == {"id": 20, "verdict": "pass"} and comparison["b"] == {"id": 21, "verdict": "fail"}
    assert [row["metric"] for row in comparison["metric_deltas"]] == [
        "class_hit", "false_empty", "hallucination_count", "member_hit"]
    deltas = {row["metric"]: row for row in comparison["metric_deltas"]}
    assert deltas["class_hit"]["delta"] == pytest.approx(-0.05)
    assert deltas["false_empty"]["delta"] == pytest.approx(-0.02)
    assert deltas["hallucination_count"] == {"metric": "hallucination_count", "a": 1, "b": 0, "delta": -1}
    assert deltas["member_hit"] == {"metric": "member_hit", "a": None, "b": 0.8, "delta": None}
    assert comparison["flipped_to_fail"] == ["r-002"]
    assert comparison["flipped_to_pass"] == ["r-003"]
    assert comparison["only_in_a"] == ["r-004"]
    assert comparison["only_in_b"] == ["r-005"]


def test_compare_page_colours_deltas_by_which_direction_is_better():
    a, b = make_pair()

    html = render_compare(a, b)

    assert '<td class="number worse">-5.0 pp</td>' in html  # class hit fell
    assert '<td class="number better">-2.0 pp</td>' in html  # false empty fell: lower is better
    assert '<td class="number better">-1</td>' in html  # one hallucination fewer
    assert "changed wording" in html and "How do I cast shadows?" in html
    assert "PASS" in html and "FAIL" in html


def test_compare_runs_with_nothing_in_common_is_empty():
    comparison = compare_runs({"id": 1, "metrics": None, "results": None}, {"id": 2})

    assert comparison["metric_deltas"] == []
    assert comparison["flipped_to_fail"] == comparison["flipped_to_pass"] == []
    assert comparison["only_in_a"] == comparison["only_in_b"] == []


def test_a_count_the_registry_calls_lower_is_better_is_coloured_so_without_a_gate():
    a = make_retrieval_run(id=30, metrics={"unexpected_degraded_count": 3, "low_confidence_model_call_count": 1})
    b = make_retrieval_run(id=31, metrics={"unexpected_degraded_count": 1, "low_confidence_model_call_count": 4})

    html = render_compare(a, b)

    assert '<td class="number better">-2</td>' in html and '<td class="number worse">+3</td>' in html
