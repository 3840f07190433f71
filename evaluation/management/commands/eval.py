"""`manage.py eval import|export|list|run|baseline`: golden sets and evaluation runs from the shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evaluation.models import EvalRun, GoldenSet
from evaluation.services.golden import golden_export, golden_import, golden_matches, golden_set_latest
from evaluation.services.runs import eval_run_create, eval_run_execute
from infra.errors import ServiceError
from rag.models import KnowledgeBase
from rag.services.knowledge import index_build, index_unchanged_version, kb_ensure

SET_FILES = {"retrieval": "retrieval.jsonl", "generation": "generation.jsonl"}


class Command(BaseCommand):
    help = "Import and export golden sets, run evaluations, measure the baseline on a golden folder and corpus."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        imp = commands.add_parser("import", help="Import a JSON Lines file as the next version of a set")
        imp.add_argument("file")
        imp.add_argument("--name", required=True)
        imp.add_argument("--kind", required=True, choices=["retrieval", "generation"])
        exp = commands.add_parser("export", help="Print a set as JSON Lines")
        exp.add_argument("--name", required=True)
        exp.add_argument("--version", type=int, default=None, help="default: the latest")
        commands.add_parser("list", help="List golden sets and recent runs")
        run = commands.add_parser("run", help="Run a golden set now, in this process, and print its gates")
        run.add_argument("--name", required=True, help="golden set name (its latest version)")
        run.add_argument("--kb", default="", help="only this knowledge base's questions")
        run.add_argument("--index-version", default="", help="a ready version of --kb instead of the active one")
        run.add_argument("--sdk-version", default="", help="ask an SDK's questions about this SDK version "
                                                          "(default: its latest)")
        base = commands.add_parser("baseline", help="Index a corpus folder, import a golden folder, run both sets")
        base.add_argument("--golden", required=True, help="folder with retrieval.jsonl and generation.jsonl")
        base.add_argument("--corpus", required=True, help="folder with one subfolder per knowledge base")
        base.add_argument("--prefix", default="dev", help="golden set names: <prefix>-retrieval, <prefix>-generation")
        for sub in (run, base):
            sub.add_argument("--json", action="store_true")

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except ServiceError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def _import(self, *, file, name, kind, **_):
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file} is not a file.")
        golden_set = golden_import(name=name, kind=kind, text=path.read_text(encoding="utf-8"),
                                   note=f"imported from {path.name}")
        self.stdout.write(f"{golden_set}: {golden_set.items.count()} questions")

    def _export(self, *, name, version, **_):
        golden_set = (GoldenSet.objects.filter(name=name, version=version).first() if version
                      else golden_set_latest(name))
        if golden_set is None:
            raise CommandError(f"No version {version} of {name}.")
        self.stdout.write(golden_export(golden_set), ending="")

    def _list(self, **_):
        for golden_set in GoldenSet.objects.all():
            self.stdout.write(f"{golden_set.name}\tv{golden_set.version}\t{golden_set.kind}\t"
                              f"{golden_set.items.count()} questions")
        for run in EvalRun.objects.select_related("golden_set")[:20]:
            self.stdout.write(f"run #{run.pk}\t{run.golden_set}\t{run.status}\t{run.verdict or '-'}\t"
                              f"{run.done}/{run.total}\t{run.report_path}")

    def _run(self, *, name, kb, index_version, sdk_version="", json: bool = False, **_):
        run = eval_run_create(golden_set=golden_set_latest(name), kb=kb, index_version=index_version,
                              sdk_version=sdk_version)
        run = eval_run_execute(run.pk, progress=self._progress(json))
        self._print_runs([run], json)
        if run.verdict != "pass":
            sys.exit(1)

    def _baseline(self, *, golden, corpus, prefix, json: bool = False, **_):
        golden, corpus = Path(golden), Path(corpus)
        if not golden.is_dir():
            raise CommandError(f"{golden} does not exist or is not a folder. Give --golden a folder holding "
                               f"retrieval.jsonl and/or generation.jsonl; the sets shipped about the bundled docs "
                               f"are in evaluation/golden/docs (imported by migrate as docs-retrieval and "
                               f"docs-generation: run them with `eval run --name docs-retrieval`).")
        if not corpus.is_dir():
            raise CommandError(f"{corpus} does not exist or is not a folder (one subfolder per knowledge base).")
        runs = []
        for kind, filename in SET_FILES.items():
            path = golden / filename
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8")
            name = f"{prefix}-{kind}"
            latest = GoldenSet.objects.filter(name=name).order_by("-version").first()
            golden_set = latest if latest and golden_matches(latest, text) else \
                golden_import(name=name, kind=kind, text=text, note=f"imported from {path}")
            for slug in sorted(set(golden_set.items.values_list("kb", flat=True))):
                self._ensure_index(slug, corpus / slug, json)
            run = eval_run_create(golden_set=golden_set)
            runs.append(eval_run_execute(run.pk, progress=self._progress(json)))
        if not runs:
            raise CommandError(f"{golden} holds neither retrieval.jsonl nor generation.jsonl.")
        self._print_runs(runs, json)

    def _ensure_index(self, slug: str, source: Path, quiet: bool) -> None:
        if not source.is_dir():
            raise CommandError(f"The corpus has no folder {source} for knowledge base {slug}.")
        kb = kb_ensure(slug=slug, source_dir=str(source))
        if KnowledgeBase.objects.get(pk=kb.pk).active_version_id and index_unchanged_version(kb):
            return
        if not quiet:
            self.stderr.write(f"indexing {slug} from {source} …")
        index_build(kb)

    def _progress(self, quiet: bool):
        def report(done, total, item):
            if not quiet:
                self.stderr.write(f"\r{done}/{total} {item.item_id}    ", ending="")
        return report

    def _print_runs(self, runs: list[EvalRun], as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps([{"id": r.pk, "golden_set": str(r.golden_set), "verdict": r.verdict,
                                           "index_versions": r.index_versions, "metrics": r.metrics,
                                           "counts": r.counts, "gates": r.gates, "report": r.report_path,
                                           "commit": r.commit} for r in runs], ensure_ascii=False, indent=1))
            return
        self.stderr.write("")
        for run in runs:
            self.stdout.write(f"\nrun #{run.pk} · {run.golden_set} · {run.index_versions} · commit {run.commit or '?'}"
                              f" · verdict {run.verdict.upper()}")
            self.stdout.write(f"{'metric':32s} {'value':>9s} {'gate':>10s}  status")
            for gate in run.gates:
                value = gate["value"]
                shown = "—" if value is None else (f"{value:.1%}" if isinstance(value, float) else str(value))
                threshold = gate["threshold"]
                limit = f"{gate['op']} {threshold:.0%}" if isinstance(threshold, float) else f"{gate['op']} {threshold}"
                self.stdout.write(f"{gate['metric']:32s} {shown:>9s} {limit:>10s}  {gate['status']}"
                                  + (f" ({gate['note']})" if gate.get("note") else ""))
            self.stdout.write(f"report: {run.report_path}")
