"""Render one evaluation run as a self-contained HTML report, and compare two runs.

A report is downloaded and opened offline, so it carries its own CSS and draws its charts as inline SVG;
nothing is fetched. Questions, answers, chunk text and notes may hold markup: templates autoescape, and
the SVG is built with `format_html`, which escapes every value it is given.

Input is a plain dict per run (see the eval run contract); any key may be missing or None.
"""

from __future__ import annotations

import math
from datetime import datetime

from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join

from rag.metrics import lower_is_better as is_lower_better

RETRIEVED_SHOWN = 10
VERDICT_LABELS = {"pass": "PASS", "fail": "FAIL", "not_scored": "NOT SCORED"}
OPERATORS = {">=": "≥", "<=": "≤"}
ATTRIBUTION_LABELS = {
    "not_retrieved": "not retrieved",
    "outside_window": "retrieved outside the scoring window",
    "adopted_but_excluded": "adopted but excluded",
    "plan_error": "plan error",
    "generation_missed": "generation missed it",
    "citation_wrong": "citation wrong",
    "judge_flagged": "judge flagged",
    "expected_class_discarded": "expected class only in discarded chunks",
}
# Fill colours are attributes, not CSS, so a chart copied out of the page keeps them.
STATUS_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "skipped": "#9aa1ab", "not_scored": "#b7892a"}
NEUTRAL_COLOUR = "#3b6ea8"
TRACK_COLOUR = "#e8ebf0"

CHART_WIDTH = 600
CHART_LABEL_WIDTH = 175
CHART_TRACK_WIDTH = 260
CHART_ROW_HEIGHT = 28
CHART_LABEL_CHARACTERS = 24


# -- public ------------------------------------------------------------------------------------------


def render_report(run: dict) -> str:
    """Render one run as a whole HTML document."""
    return render_to_string("evaluation/report.html", report_context(run))


def compare_runs(a: dict, b: dict) -> dict:
    """Return the metric deltas (b minus a) and the questions whose outcome changed between two runs."""
    metrics_a, metrics_b = _mapping(a.get("metrics")), _mapping(b.get("metrics"))
    names = list(metrics_a) + [name for name in metrics_b if name not in metrics_a]
    results_a, results_b = _results_by_id(a), _results_by_id(b)
    both = [item_id for item_id in results_a if item_id in results_b]
    return {
        "a": {"id": a.get("id"), "verdict": a.get("verdict")},
        "b": {"id": b.get("id"), "verdict": b.get("verdict")},
        "metric_deltas": [
            {"metric": name, "a": metrics_a.get(name), "b": metrics_b.get(name),
             "delta": _difference(metrics_a.get(name), metrics_b.get(name))}
            for name in names
        ],
        "flipped_to_fail": [i for i in both if results_a[i].get("passed") and not results_b[i].get("passed")],
        "flipped_to_pass": [i for i in both if not results_a[i].get("passed") and results_b[i].get("passed")],
        "only_in_a": [item_id for item_id in results_a if item_id not in results_b],
        "only_in_b": [item_id for item_id in results_b if item_id not in results_a],
    }


def render_compare(a: dict, b: dict) -> str:
    """Render the comparison of two runs as a whole HTML document."""
    return render_to_string("evaluation/compare.html", compare_context(a, b))


def report_context(run: dict) -> dict:
    """Shape one run for the report template: every value formatted, every chart drawn."""
    kind = run.get("kind") or "retrieval"
    results = _list(run.get("results"))
    gates = _list(run.get("gates"))
    rows = [_question_row(result, kind) for result in results]
    return {
        "header": _header(run),
        "kind": kind,
        "gates": [_gate_row(gate) for gate in gates],
        "gate_chart": _gate_chart(gates),
        "metrics": _metric_rows(run.get("metrics")),
        "breakdown_chart": _rule_chart(results) if kind == "generation" else _layer_chart(run.get("layers")),
        "breakdown_title": "Pass rate per rule" if kind == "generation" else "Class hit per layer",
        "layers": _layer_table(run.get("layers")),
        "baseline": _baseline(run.get("baseline"), {row["item_id"] for row in rows}),
        "failed": [row for row in rows if not row["passed"]],
        "passed_count": sum(1 for row in rows if row["passed"]),
        "rows": rows,
    }


def compare_context(a: dict, b: dict) -> dict:
    """Shape two runs and their differences for the comparison template."""
    comparison = compare_runs(a, b)
    # Where a fall is an improvement: the registry's direction (rag.metrics), and any metric gated with "<=".
    lower_is_better = {row["metric"] for row in comparison["metric_deltas"] if is_lower_better(row["metric"])} \
        | _gated_below(a) | _gated_below(b)
    results_a, results_b = _results_by_id(a), _results_by_id(b)
    return {
        "a": _header(a),
        "b": _header(b),
        "comparison": comparison,
        "deltas": [_delta_row(row, lower_is_better) for row in comparison["metric_deltas"]],
        "gates": _gate_pairs(_list(a.get("gates")), _list(b.get("gates"))),
        "flipped_to_fail": [_flip_row(i, results_a, results_b) for i in comparison["flipped_to_fail"]],
        "flipped_to_pass": [_flip_row(i, results_a, results_b) for i in comparison["flipped_to_pass"]],
        "only_in_a": [_flip_row(i, results_a, results_b) for i in comparison["only_in_a"]],
        "only_in_b": [_flip_row(i, results_a, results_b) for i in comparison["only_in_b"]],
    }


# -- formatting --------------------------------------------------------------------------------------


def is_count(metric: str) -> bool:
    """Tell whether a metric is a count (an integer) rather than a rate (a fraction 0..1)."""
    return str(metric).endswith("_count")


def format_value(metric: str, value) -> str:
    """Format a metric value: counts as integers, rates as percentages with one decimal, None as a dash."""
    if not _is_number(value):
        return "—"
    if is_count(metric):
        return str(round(value))
    return f"{value * 100:.1f}%"


def format_delta(metric: str, delta) -> str:
    """Format a change: counts as signed integers, rates in percentage points."""
    if not _is_number(delta):
        return "—"
    if is_count(metric):
        return f"{round(delta):+d}"
    return f"{delta * 100:+.1f} pp"


def attribution_label(code: str) -> str:
    """Name a failure's attribution code in words."""
    return ATTRIBUTION_LABELS.get(code, str(code).replace("_", " "))


def question_anchor(item_id) -> str:
    """Make a row anchor `q-<item_id>` that is a safe, unique fragment for any item id.

    Letters, digits, "-" and "." stay; every other character (including "_", so that no two ids
    collide) becomes "_<hex code point>_".
    """
    return "q-" + "".join(
        character if character.isascii() and (character.isalnum() or character in "-.") else f"_{ord(character):x}_"
        for character in str(item_id)
    )


def _format_time(value) -> str:
    if not value:
        return "—"
    try:
        return datetime.fromisoformat(str(value)).isoformat(sep=" ", timespec="seconds")
    except ValueError:
        return str(value)


def _duration(started, finished) -> str:
    try:
        seconds = (datetime.fromisoformat(str(finished)) - datetime.fromisoformat(str(started))).total_seconds()
    except (TypeError, ValueError):
        return ""
    if seconds < 0:
        return ""
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def _format_threshold(gate: dict) -> str:
    operator = OPERATORS.get(gate.get("op"), gate.get("op") or "")
    return f"{operator} {format_value(gate.get('metric') or '', gate.get('threshold'))}".strip()


def _format_score(value) -> str:
    return f"{value:.3f}" if _is_number(value) else "—"


# -- sections ----------------------------------------------------------------------------------------


def _header(run: dict) -> dict:
    golden_set = _mapping(run.get("golden_set"))
    judge = run.get("judge")
    verdict = run.get("verdict")
    run_id = "?" if run.get("id") is None else run.get("id")
    set_version = "?" if golden_set.get("version") is None else golden_set.get("version")
    if judge:
        judge_text = (f"{judge.get('model') or 'unknown model'} · prompt {judge.get('prompt_version') or '—'}"
                      f" · {judge.get('repeats') or 1} repeat(s)")
    else:
        judge_text = "judge not configured — judge metrics not scored"
    return {
        "id": run.get("id"),
        "title": f"Evaluation run #{run_id} — {golden_set.get('name') or 'unnamed golden set'} v{set_version}",
        "kind": run.get("kind") or "—",
        "kb": run.get("kb") or "all knowledge bases",
        "versions": [f"{kb}@{name}" for kb, name in _mapping(run.get("index_versions")).items()],
        "candidate": bool(run.get("candidate")),
        "status": run.get("status") or "—",
        "verdict": verdict or "none",
        "verdict_label": VERDICT_LABELS.get(verdict, "NO VERDICT"),
        "error": run.get("error") or "",
        "started": _format_time(run.get("started_at")),
        "finished": _format_time(run.get("finished_at")),
        "duration": _duration(run.get("started_at"), run.get("finished_at")),
        "commit": run.get("commit") or "—",
        "judge_configured": bool(judge),
        "judge": judge_text,
        "counts": [(name, count) for name, count in _mapping(run.get("counts")).items()],
    }


def _gate_row(gate: dict) -> dict:
    metric = gate.get("metric") or "?"
    status = gate.get("status") or "not_scored"
    return {
        "metric": metric,
        "value": format_value(metric, gate.get("value")),
        "threshold": _format_threshold(gate),
        "status": status,
        "status_label": status.replace("_", " "),
        "note": gate.get("note") or "",
    }


def _metric_rows(metrics) -> list[dict]:
    return [{"metric": name, "value": format_value(name, value)} for name, value in _mapping(metrics).items()]


def _layer_table(layers) -> dict:
    """Lay out the per-layer table with the union of metric names as columns, in first-seen order."""
    layers = _list(layers)
    columns = []
    for layer in layers:
        columns += [name for name in _mapping(layer.get("metrics")) if name not in columns]
    rows = [
        {"layer": layer.get("layer") or "—", "questions": layer.get("questions"),
         "cells": [format_value(name, _mapping(layer.get("metrics")).get(name)) for name in columns]}
        for layer in layers
    ]
    return {"columns": columns, "rows": rows}


def _baseline(baseline, known_ids: set) -> dict | None:
    if not baseline:
        return None
    newly_failing = _list(baseline.get("newly_failing"))
    limit = baseline.get("max_newly_failing")
    return {
        "run_id": baseline.get("run_id"),
        "status": baseline.get("status") or "not_scored",
        "limit": limit,
        "exceeded": _is_number(limit) and len(newly_failing) > limit,
        "newly_failing": [_id_link(item_id, known_ids) for item_id in newly_failing],
        "newly_passing": [_id_link(item_id, known_ids) for item_id in _list(baseline.get("newly_passing"))],
    }


def _id_link(item_id, known_ids: set) -> dict:
    """Link to a question's row only when this report has that row."""
    return {"item_id": item_id, "anchor": question_anchor(item_id) if item_id in known_ids else ""}


def _question_row(result: dict, kind: str) -> dict:
    excluded = set(_list(result.get("excluded")))
    retrieved = [_chunk_row(chunk, excluded) for chunk in _list(result.get("retrieved"))]
    attribution = result.get("attribution") or ""
    row = {
        "item_id": result.get("item_id", ""),
        "anchor": question_anchor(result.get("item_id", "")),
        "question": result.get("question") or "",
        "layer": result.get("layer") or "—",
        "kb": result.get("kb") or "",
        "answerable": result.get("answerable", True),
        "negative_kind": result.get("negative_kind") or "",
        "expected_classes": _list(result.get("expected_classes")),
        "expected_members": _list(result.get("expected_members")),
        "passed": bool(result.get("passed")),
        "attribution": attribution,
        "attribution_label": attribution_label(attribution) if attribution else "",
        "attribution_detail": result.get("attribution_detail") or "",
        "plan": _plan(result.get("plan")),
        "retrieved_shown": retrieved[:RETRIEVED_SHOWN],
        "retrieved_more": retrieved[RETRIEVED_SHOWN:],
        "flaky": bool(result.get("flaky")),
        "request_id": result.get("request_id") or "",
    }
    if kind == "generation":
        row.update({
            "answer": result.get("answer") or "",
            "confidence": result.get("confidence") or "—",
            "citations": _list(result.get("citations")),
            "failed_rules": [name for name, passed in _mapping(result.get("rules")).items() if passed is False],
            "judge": _judge_scores(result.get("judge")),
        })
    return row


def _chunk_row(chunk: dict, excluded: set) -> dict:
    class_name, member = chunk.get("class_name") or "", chunk.get("member") or ""
    return {
        "rank": chunk.get("rank", "—"),
        "chunk_id": chunk.get("chunk_id") or "",
        "label": f"{class_name}.{member}" if member else (class_name or "—"),
        "source": chunk.get("source") or "",
        "score": _format_score(chunk.get("score")),
        "adopted": bool(chunk.get("adopted")),
        "excluded": chunk.get("chunk_id") in excluded,
    }


def _plan(plan) -> dict | None:
    if not plan:
        return None
    return {
        "kind": plan.get("kind") or "—",
        "classes": _list(plan.get("classes")),
        "corrections": [f"{c.get('from', '?')} → {c.get('to', '?')}" for c in _list(plan.get("corrections"))],
    }


def _judge_scores(judge) -> dict | None:
    if not judge:
        return None
    return {
        "scores": [(label, "—" if judge.get(key) is None else judge.get(key)) for label, key in
                   (("grounding", "grounding"), ("answering", "answering"),
                    ("citation", "citation_alignment"), ("API", "api_usage"))],
        "hallucination": bool(judge.get("hallucination")),
        "passed": judge.get("passed"),
        "correct": judge.get("correct"),
        "notes": judge.get("notes") or "",
    }


def _gated_below(run: dict) -> set:
    return {gate.get("metric") for gate in _list(run.get("gates")) if gate.get("op") == "<="}


def _delta_row(row: dict, lower_is_better: set) -> dict:
    metric, delta = row["metric"], row["delta"]
    if not _is_number(delta):
        direction = ""
    elif delta == 0:
        direction = "same"
    else:
        direction = "better" if (delta < 0) == (metric in lower_is_better) else "worse"
    return {
        "metric": metric,
        "a": format_value(metric, row["a"]),
        "b": format_value(metric, row["b"]),
        "delta": format_delta(metric, delta),
        "direction": direction,
        "lower_is_better": metric in lower_is_better,
    }


def _gate_pairs(gates_a: list, gates_b: list) -> list[dict]:
    """Put each gated metric's row from both runs side by side, in the order of a then new ones."""
    by_metric_a = {gate.get("metric"): _gate_row(gate) for gate in gates_a}
    by_metric_b = {gate.get("metric"): _gate_row(gate) for gate in gates_b}
    metrics = list(by_metric_a) + [metric for metric in by_metric_b if metric not in by_metric_a]
    return [{"metric": metric, "a": by_metric_a.get(metric), "b": by_metric_b.get(metric)} for metric in metrics]


def _flip_row(item_id, results_a: dict, results_b: dict) -> dict:
    result_a, result_b = results_a.get(item_id, {}), results_b.get(item_id, {})
    return {
        "item_id": item_id,
        "layer": result_b.get("layer") or result_a.get("layer") or "—",
        "question_a": result_a.get("question"),
        "question_b": result_b.get("question"),
        "attribution_a": attribution_label(result_a["attribution"]) if result_a.get("attribution") else "",
        "attribution_b": attribution_label(result_b["attribution"]) if result_b.get("attribution") else "",
    }


# -- charts ------------------------------------------------------------------------------------------


def _gate_chart(gates: list):
    """Draw each gated metric's value against its threshold, coloured by the gate's status."""
    bars = []
    for gate in gates:
        metric, value, threshold = gate.get("metric") or "?", gate.get("value"), gate.get("threshold")
        status = gate.get("status") or "not_scored"
        scale = _count_scale(value, threshold) if is_count(metric) else 1.0
        shown = format_value(metric, value) if _is_number(value) else status.replace("_", " ")
        bars.append({
            "key": metric,
            "label": metric,
            "fraction": value / scale if _is_number(value) else None,
            "threshold": threshold / scale if _is_number(threshold) else None,
            "colour": STATUS_COLOURS.get(status, NEUTRAL_COLOUR),
            "css": f"gate-{status}",
            "text": f"{shown} ({_format_threshold(gate)})",
            "title": f"{metric}: {shown}, needs {_format_threshold(gate)}, {status.replace('_', ' ')}"
                     + (f" — {gate['note']}" if gate.get("note") else "")
                     + (f" (bar scaled 0–{scale:g})" if is_count(metric) else ""),
        })
    return _bar_chart(bars, chart_id="gate-chart", title="Gated metrics against their thresholds")


def _count_scale(value, threshold) -> float:
    """Scale a count bar so that both its value and its threshold fit with some room to spare."""
    largest = max(value if _is_number(value) else 0, threshold if _is_number(threshold) else 0, 1)
    return float(math.ceil(largest * 1.25))


def _layer_chart(layers):
    """Draw the class hit of each layer, so a weak question style is not hidden by the overall rate."""
    bars = []
    for layer in _list(layers):
        name, value = layer.get("layer") or "—", _mapping(layer.get("metrics")).get("class_hit")
        label = f"{name} ({layer.get('questions', '?')})"
        bars.append({"key": name, "label": label, "fraction": value if _is_number(value) else None,
                     "threshold": None, "colour": NEUTRAL_COLOUR, "css": "layer",
                     "text": format_value("class_hit", value),
                     "title": f"{name}: class hit {format_value('class_hit', value)} over "
                              f"{layer.get('questions', '?')} questions"})
    return _bar_chart(bars, chart_id="breakdown-chart", title="Class hit per layer")


def _rule_chart(results: list):
    """Draw each generation rule's pass rate over the questions it applied to (None: not applicable)."""
    tallies: dict[str, list[int]] = {}
    for result in results:
        for rule, passed in _mapping(result.get("rules")).items():
            if passed is not None:
                tally = tallies.setdefault(rule, [0, 0])
                tally[0] += 1 if passed else 0
                tally[1] += 1
    bars = []
    for rule, (passed, total) in tallies.items():
        rate = passed / total
        bars.append({"key": rule, "label": rule, "fraction": rate, "threshold": None,
                     "colour": STATUS_COLOURS["pass"] if passed == total else STATUS_COLOURS["fail"],
                     "css": "rule", "text": f"{rate * 100:.1f}% ({passed}/{total})",
                     "title": f"{rule}: {passed} of {total} applicable questions passed"})
    return _bar_chart(bars, chart_id="breakdown-chart", title="Pass rate per rule")


def _bar_chart(bars: list[dict], *, chart_id: str, title: str):
    """Draw horizontal bars as inline SVG: label, track, bar, optional threshold line, value text.

    Each bar gives `fraction` of the track (None: no bar drawn beyond zero width) and optionally
    `threshold` as a fraction too. Returns None when there is nothing to draw.
    """
    if not bars:
        return None
    height = CHART_ROW_HEIGHT * len(bars) + 8
    rows = format_html_join("", "{}", ((_bar_row(bar, index),) for index, bar in enumerate(bars)))
    return format_html(
        '<svg id="{}" class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}"><title>{}</title>{}</svg>',
        chart_id, CHART_WIDTH, height, title, title, rows,
    )


def _bar_row(bar: dict, index: int):
    top = 4 + index * CHART_ROW_HEIGHT
    middle = top + CHART_ROW_HEIGHT / 2
    fraction = min(max(bar["fraction"] or 0.0, 0.0), 1.0)
    label = bar["label"]
    if len(label) > CHART_LABEL_CHARACTERS:
        label = label[: CHART_LABEL_CHARACTERS - 1] + "…"
    threshold = ""
    if bar["threshold"] is not None:
        x = CHART_LABEL_WIDTH + min(max(bar["threshold"], 0.0), 1.0) * CHART_TRACK_WIDTH
        threshold = format_html(
            '<line class="threshold" x1="{}" x2="{}" y1="{}" y2="{}" stroke="#1d2430" stroke-width="2"/>',
            f"{x:.1f}", f"{x:.1f}", top + 3, top + CHART_ROW_HEIGHT - 3,
        )
    return format_html(
        '<g><title>{}</title>'
        '<text x="{}" y="{}" text-anchor="end" dominant-baseline="middle" font-size="13">{}</text>'
        '<rect x="{}" y="{}" width="{}" height="16" fill="{}"/>'
        '<rect class="bar {}" data-key="{}" x="{}" y="{}" width="{}" height="16" fill="{}"/>'
        '{}<text x="{}" y="{}" dominant-baseline="middle" font-size="13">{}</text></g>',
        bar["title"],
        CHART_LABEL_WIDTH - 8, f"{middle:.1f}", label,
        CHART_LABEL_WIDTH, top + 6, CHART_TRACK_WIDTH, TRACK_COLOUR,
        bar["css"], bar["key"], CHART_LABEL_WIDTH, top + 6, f"{fraction * CHART_TRACK_WIDTH:.1f}", bar["colour"],
        threshold, CHART_LABEL_WIDTH + CHART_TRACK_WIDTH + 8, f"{middle:.1f}", bar["text"],
    )


# -- small helpers -----------------------------------------------------------------------------------


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _difference(a, b):
    return b - a if _is_number(a) and _is_number(b) else None


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else []


def _results_by_id(run: dict) -> dict:
    return {result.get("item_id"): result for result in _list(run.get("results"))}
