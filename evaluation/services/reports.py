"""Reports: each finished run is written as one self-contained HTML file under $RAG_DATA_DIR/eval/reports/."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from evaluation.models import EvalRun
from evaluation.report import render_report
from evaluation.selectors import run_as_report


def reports_dir() -> Path:
    """Return the reports folder, creating it if needed."""
    folder = Path(settings.DATA_DIR) / "eval" / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_report(run: EvalRun) -> Path:
    """Write a run's HTML report and record its path on the run."""
    path = reports_dir() / f"run-{run.pk}.html"
    path.write_text(render_report(run_as_report(run)), encoding="utf-8")
    EvalRun.objects.filter(pk=run.pk).update(report_path=str(path))
    return path
