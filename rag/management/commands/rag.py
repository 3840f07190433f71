"""`python manage.py rag status|search|context|read|reindex`, with `--json` in the shapes of seed 000."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from infra import live
from infra.errors import ServiceError
from rag.models import Channel, KnowledgeBase
from rag.services.knowledge import (
    PAGE_CHANGES,
    building_message,
    index_build,
    index_build_queue,
    index_building,
    index_unchanged_version,
    kb_ensure,
    kb_get,
    read_source,
    source_as_dict,
    vectors_export,
)
from rag.services import LIMITS, QuestionRequest, question_answer, question_search
from rag.services.release import index_build_gated
from rag.services.sdk import (kb_serving, sdk_changes, sdk_version_ensure, sdk_versions_diff, sdk_versions_listed,
                              split_kb)
from rag.services.budgets import (PAGED_CANDIDATES, call_scope, checked_max_tokens, citations_within,
                                  evidence_within, page_within, start_of)
from rag.shapes import (cited_chunks, citation_as_dict, context_text, hit_as_dict, sdk_version_as_dict, search_as_dict,
                        sources_of)

ARGUMENTS_ERROR = "invalid_arguments"
NOT_MIGRATED = ServiceError("database_not_migrated", "The database has no tables yet: run `python manage.py "
                                                     "migrate` first (`make run` does it).")


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a line every 10% otherwise."""

    def __init__(self, label: str, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.last = -1
        self.started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if total <= 0 or (done >= total and self.last >= 100):  # the build's later phases repeat the end: shown once
            return
        percent = int(done * 100 / total)
        if self.tty:
            filled = percent // 4
            rate = done / max(time.monotonic() - self.started, 1e-6)
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (25 - filled)}] {done}/{total} ({rate:.1f}/s)")
            if done >= total:
                self.stream.write("\n")
        elif percent // 10 != self.last // 10 or done >= total:
            self.stream.write(f"{self.label}: {done}/{total} ({percent}%)\n")
        self.last = percent
        self.stream.flush()


class Command(BaseCommand):
    help = "Search, read and reindex knowledge bases (status, search, context, read, reindex, ask)."
    # Agents run one command per question: skip Django's system checks, which import every URL module
    # (DRF, drf-spectacular, Daphne's server) and which this command's answers do not depend on.
    requires_system_checks: list = []

    def run_from_argv(self, argv):
        self.json_arguments = "--json" in argv[2:]
        super().run_from_argv(argv)

    def add_arguments(self, parser):
        self._errors_as_json(parser)
        sub = parser.add_subparsers(dest="action", required=True)
        for name in ("status", "search", "context", "read", "reindex", "ask", "vectors", "versions"):
            p = sub.add_parser(name, help=f"rag {name}")
            self._errors_as_json(p)
            p.add_argument("--kb", default=None, help="knowledge base slug (default: RAG_DEFAULT_KB)")
            p.add_argument("--json", action="store_true", help="print JSON for programs and agents")
            if name in ("search", "context", "read", "reindex", "ask"):
                p.add_argument("--sdk-version", default=None,
                               help="the SDK version (2.0, latest, an alias) of a knowledge base that holds several; "
                                    "with reindex, the version to build (added with --source)")
            if name == "versions":
                p.add_argument("--diff", nargs=2, metavar=("OLDER", "NEWER"), default=None,
                               help="list what changed between two versions (classes and members added, removed, "
                                    "renamed, new signatures)")
            if name in ("search", "context", "ask"):
                p.add_argument("question", help="the question" + ("; '-' reads one question per line from stdin"
                                                                   if name == "search" else ""))
                p.add_argument("--top-k", type=int, default=None, help=f"results for a single-class question (1-{LIMITS.top_k}, default 5)")
                if name != "ask":
                    p.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "bm25"])
                p.add_argument("--exclude", action="append", default=[], help="a chunk id to leave out (repeatable)")
                if name != "ask":
                    p.add_argument("--max-tokens", type=int, default=None,
                                   help="pack the results into this many tokens (100-100000), cut at block and "
                                        "sentence boundaries; the JSON gives a cursor for the rest")
                    p.add_argument("--cursor", default=None, help="continue from the cursor a budgeted call gave")
                else:
                    p.add_argument("--max-tokens", type=int, default=None,
                                   help="also give each citation's text, the answer and the texts within this many "
                                        "tokens (100-100000); `rag read <link> --max-tokens` reads a cited section on")
                p.add_argument("--no-record", action="store_true",
                               help="leave no request record (batch runs); every question is recorded by default")
            if name == "read":
                p.add_argument("source", help="page path relative to the knowledge base (page#anchor: one section)")
                p.add_argument("--max-tokens", type=int, default=None,
                               help="read at most this many tokens (100-100000); the JSON gives a cursor to read on")
                p.add_argument("--cursor", default=None, help="read on from the cursor a budgeted read gave")
            if name == "reindex":
                p.add_argument("--source", default=None,
                               help="source folder, or a git repository git+file|https|ssh://…[@ref][#path=folder] "
                                    "(creates the knowledge base if needed)")
                p.add_argument("--language", default=None, help="zh, en or mixed (when creating)")
                p.add_argument("--if-changed", action="store_true", help="skip the build when nothing changed")
                p.add_argument("--gate", action="store_true",
                               help="activate the new version only if the golden sets for this kb pass on it")
                p.add_argument("--sdk-alias", action="append", default=None,
                               help="with --sdk-version: another name the version answers to (repeatable; "
                                    "`latest` takes that alias from the newest release)")
                p.add_argument("--background", action="store_true",
                               help="hand the build to the Celery worker and return at once (questions get "
                                    "`index_building` with its progress until the first version is active)")

    def handle(self, *args, **options):
        action = options["action"]
        self.as_json = options["json"]
        kb = options["kb"] or settings.RAG_DEFAULT_KB
        try:
            if action == "search" and options["question"] == "-":
                return self._batch(kb, options)
            payload = getattr(self, f"_{action}")(kb, options)
        except ServiceError as exc:
            self._fail(exc.message, exc.code)
        except DatabaseError as exc:
            if not _migrated():
                self._fail(NOT_MIGRATED.message, NOT_MIGRATED.code)
            raise exc
        self._emit(action, payload)

    def _errors_as_json(self, parser) -> None:
        """With `--json` on the command line, an argument error is printed as seed 000's error object (code
        `invalid_arguments`) on stdout instead of argparse's usage text; the exit status stays argparse's 2."""
        usual = parser.error

        def error(message: str):
            if parser.called_from_command_line and getattr(self, "json_arguments", False):
                self.stdout.write(printable(json.dumps({"ok": False, "error": message, "code": ARGUMENTS_ERROR},
                                                       ensure_ascii=False)))
                sys.exit(2)
            usual(message)

        parser.error = error

    # -- output --------------------------------------------------------------------------------------

    def _emit(self, action: str, payload: dict) -> None:
        if self.as_json:
            self.stdout.write(printable(json.dumps({"ok": True, "command": action, **payload}, ensure_ascii=False)))
        else:
            self.stdout.write(printable(getattr(self, f"_human_{action}")(payload)))

    def _fail(self, message: str, code: str) -> None:
        if self.as_json:
            self.stdout.write(printable(json.dumps({"ok": False, "error": message, "code": code}, ensure_ascii=False)))
            sys.exit(1)
        raise CommandError(f"{message} [{code}]")

    # -- commands ------------------------------------------------------------------------------------

    def _status(self, kb: str, options) -> dict:
        config = settings.RAG_ENGINE
        knowledge_base = KnowledgeBase.objects.select_related("active_version").filter(slug=kb).first()
        active = knowledge_base.active_version if knowledge_base else None
        from rag.pipeline import get_engine

        index_exists = bool(active) and get_engine().store.exists(kb, active.name)
        database = settings.DATABASES["default"]
        db_exists = Path(database["NAME"]).exists() if database["ENGINE"].endswith("sqlite3") else True
        return {
            "project_root": str(settings.BASE_DIR),
            "notes_dir": knowledge_base.source_dir if knowledge_base else "",
            "index_dir": config["INDEX_DIR"],
            "db_exists": db_exists,
            "nodes_file_exists": index_exists,
            "deepseek_api_key_configured": bool(config["GENERATION_BASE_URL"]),
            "deepseek_model": config["GENERATION_MODEL"],
            "markdown_note_count": knowledge_base.documents.count() if knowledge_base else 0,
            "index_node_count": active.chunk_count if active else 0,
            "kb": kb,
            "kb_exists": knowledge_base is not None,
            "active_version": active.name if active else None,
            "embedding_model": active.model_id if active else None,
            "lancedb_uri": config["LANCEDB_URI"],
            "knowledge_bases": [
                {"slug": k.slug, "active_version": k.active_version.name if k.active_version else None,
                 "documents": k.documents.count(),
                 "chunks": k.active_version.chunk_count if k.active_version else 0,
                 "building": _building(k), "source": source_as_dict(k)}
                for k in KnowledgeBase.objects.select_related("active_version")
            ],
            "live": live.snapshot(),  # requests in flight per channel and open MCP sessions, over all processes
        }

    def _request(self, kb: str, options, question: str) -> QuestionRequest:
        budgeted = options.get("max_tokens") is not None or options.get("cursor") is not None
        return QuestionRequest(question=question, kb=kb, sdk_version=options["sdk_version"], channel=Channel.CLI,
                               top_k=options["top_k"], candidates=PAGED_CANDIDATES if budgeted else None,
                               cache=budgeted,
                               mode=options.get("mode", "hybrid"), exclude=options["exclude"],
                               record=not options["no_record"])

    def _budget(self, kb: str, options):
        """With --max-tokens or --cursor: the budget, the start and the cursor's scope, checked before asking."""
        if options.get("max_tokens") is None and options.get("cursor") is None:
            return None
        scope = call_scope(question=options["question"], kb=kb, sdk_version=options["sdk_version"])
        return checked_max_tokens(options["max_tokens"]), start_of(options["cursor"], scope), scope

    def _packed(self, outcome, options, budget) -> tuple[list, dict]:
        """The budgeted pieces (rank, hit, text) and the budget's fields of the JSON."""
        max_tokens, start, scope = budget
        packed, following = evidence_within(outcome, max_tokens=max_tokens, start=start, scope=scope,
                                            per_response=options["top_k"] or 5)
        hits = {hit.chunk.chunk_id: hit for hit in (*outcome.candidates, *outcome.result.hits)}
        pieces = [(piece.item + 1, hits[piece.chunk_id], piece.text, piece) for piece in packed.items]
        return pieces, {"tokens": packed.tokens, "max_tokens": max_tokens, "left_out": list(packed.left_out),
                        "cursor": following}

    def _search(self, kb: str, options) -> dict:
        budget = self._budget(kb, options)
        outcome = question_search(self._request(kb, options, options["question"]))
        payload = {**search_as_dict(outcome, top_k=options["top_k"]), "request_id": outcome.request_id}
        if budget is not None:
            pieces, fields = self._packed(outcome, options, budget)
            payload["results"] = [{**hit_as_dict(hit, kb=outcome.kb, version=outcome.version), "rank": rank,
                                   "content": text, "complete": piece.complete,
                                   "dropped_code_blocks": list(piece.dropped_code)}
                                  for rank, hit, text, piece in pieces]
            payload.update(fields)
        return payload

    def _batch(self, kb: str, options) -> None:
        """Answer one question per stdin line with one JSON object per line, in order."""
        for line in sys.stdin:
            question = line.rstrip("\n")
            if not question.strip():
                continue
            try:
                outcome = question_search(self._request(kb, options, question))
                payload = {"ok": True, "command": "search", **search_as_dict(outcome, top_k=options["top_k"]),
                           "request_id": outcome.request_id}
            except ServiceError as exc:
                payload = {"ok": False, "command": "search", "question": question, "error": exc.message,
                           "code": exc.code}
            except DatabaseError:
                if _migrated():
                    raise
                self._fail(NOT_MIGRATED.message, NOT_MIGRATED.code)
            self.stdout.write(printable(json.dumps(payload, ensure_ascii=False)))
            self.stdout.flush()

    def _context(self, kb: str, options) -> dict:
        budget = self._budget(kb, options)
        outcome = question_search(self._request(kb, options, options["question"]))
        pieces, fields = self._packed(outcome, options, budget) if budget is not None else (None, {})
        return {
            **fields,
            "question": outcome.question,
            "mode": outcome.result.mode,
            "top_k": options["top_k"] or 5,
            "context": context_text(outcome, [piece[:3] for piece in pieces] if pieces is not None else None),
            "sources": sources_of(outcome),
            "kb": outcome.kb,
            "version": outcome.version,
            **sdk_version_as_dict(outcome),
            "plan": outcome.result.plan.as_dict(),
            "request_id": outcome.request_id,
        }

    def _ask(self, kb: str, options) -> dict:
        budget = checked_max_tokens(options["max_tokens"]) if options["max_tokens"] is not None else None
        outcome = question_answer(self._request(kb, options, options["question"]))
        answer = outcome.answer
        budgeted = {}
        if budget is not None:  # the cited sections' texts, packed into what the answer leaves of the budget
            cited, tokens = citations_within(answer.text, cited_chunks(outcome), max_tokens=budget)
            budgeted = {"cited_texts": [{key: c[key] for key in ("number", "chunk_id", "link", "text", "complete",
                                                                  "dropped_code_blocks")} for c in cited],
                        "tokens": tokens, "max_tokens": budget}
        return {
            "question": outcome.question,
            "mode": outcome.result.mode,
            "top_k": options["top_k"] or 5,
            "answer": answer.text,
            "sources": list(dict.fromkeys(c.source for c in answer.citations)) or sources_of(outcome),
            "citations": [citation_as_dict(c) for c in answer.citations],
            "confidence": answer.confidence,
            "degraded": answer.degraded,
            "answer_mode": answer.mode,
            "reason": answer.reason,
            "usage": answer.usage.as_dict(),
            "kb": outcome.kb,
            "version": outcome.version,
            **sdk_version_as_dict(outcome),
            "plan": outcome.result.plan.as_dict(),
            "request_id": outcome.request_id,
            **budgeted,
        }

    def _human_ask(self, p: dict) -> str:
        badge = f"[{p['answer_mode']} · confidence {p['confidence']}{' · degraded' if p['degraded'] else ''}]"
        cites = "\n".join(f"[{c['number']}] {c['source']} · {c['heading_path']}" for c in p["citations"])
        return f"{badge}\n\n{p['answer']}\n\n{cites}".rstrip()

    def _vectors(self, kb: str, options) -> dict:
        # As for reindex, the default knowledge base is created on first use, so a fresh data folder can
        # write the pack of docs/ without building an index first.
        if kb == settings.RAG_DEFAULT_KB and not KnowledgeBase.objects.filter(slug=kb).exists():
            knowledge_base = kb_ensure(slug=kb, source_dir=settings.RAG_DEFAULT_KB_SOURCE)
        else:
            knowledge_base = kb_get(kb)
        path, count, embedded = vectors_export(knowledge_base, progress=Progress("embedding"))
        return {"kb": kb, "file": str(path), "vectors": count, "embedded": embedded}

    def _human_vectors(self, p: dict) -> str:
        return f"{p['kb']}: {p['vectors']} vectors ({p['embedded']} embedded now) written to {p['file']}"

    def _read(self, kb: str, options) -> dict:
        if options["max_tokens"] is not None or options["cursor"] is not None:
            read = page_within(kb=kb, source=options["source"], sdk_version=options["sdk_version"],
                               max_tokens=options["max_tokens"], cursor=options["cursor"])
            return {"source": options["source"], "content": read["text"], "kb": read["kb"],
                    **{key: read[key] for key in ("complete", "dropped_code_blocks", "tokens", "max_tokens", "cursor")}}
        kb = kb_serving(kb, options["sdk_version"]).kb
        return {"source": options["source"], "content": read_source(kb=kb, source=options["source"]), "kb": kb}

    def _versions(self, kb: str, options) -> dict:
        if options["diff"]:
            return {"kb": kb, "diff": sdk_versions_diff(kb, *options["diff"]).as_dict()}
        return sdk_versions_listed(kb)

    def _human_versions(self, p: dict) -> str:
        if "diff" in p:
            diff = p["diff"]
            lines = [f"{p['kb']}: {diff['older']} -> {diff['newer']}"]
            for key in ("classes_added", "classes_removed", "added", "removed"):
                lines += [f"  {key.replace('_', ' ')}: {name}" for name in diff[key]]
            lines += [f"  {key.replace('_', ' ')}: {a} -> {b}" for key in ("classes_renamed", "renamed")
                      for a, b in diff[key]]
            lines += [f"  signature changed: {c['member']}: {c['before']} -> {c['after']}"
                      for c in diff["signature_changed"]]
            return "\n".join(lines)
        if not p["versions"]:
            return f"{p['kb']} has no SDK versions."
        lines = [f"{p['kb']} (default {p['default']})"]
        for v in p["versions"]:
            aliases = f" [{', '.join(v['aliases'])}]" if v["aliases"] else ""
            changes = "" if not v["changes"] else " · " + ", ".join(f"{k.replace('_', ' ')} {n}"
                                                                     for k, n in v["changes"].items() if n)
            lines.append(f"  {v['version']}{aliases}: index {v['index_version'] or '(none)'}{changes}")
        return "\n".join(lines)

    def _reindex(self, kb: str, options) -> dict:
        started = time.perf_counter()
        source = options["source"]
        if source is None and kb == settings.RAG_DEFAULT_KB and not KnowledgeBase.objects.filter(slug=kb).exists():
            source = settings.RAG_DEFAULT_KB_SOURCE
        sdk, written = split_kb(kb)
        if options["sdk_version"] is not None or written is not None:
            if written is not None and options["sdk_version"] not in (None, written):
                raise ServiceError("invalid_sdk_version", f"--kb names version {written} and --sdk-version "
                                                          f"{options['sdk_version']}.")
            knowledge_base = sdk_version_ensure(sdk=sdk, version=written or options["sdk_version"], source=source,
                                                language=options["language"], aliases=options["sdk_alias"])
            kb = knowledge_base.slug
        else:
            knowledge_base = kb_ensure(slug=kb, source_dir=source, language=options["language"])
        version = None
        unchanged = False
        if options["if_changed"]:
            version = index_unchanged_version(knowledge_base, sync_progress=Progress("fetching pages"))
            unchanged = version is not None
        gate = None
        if version is None and options["background"]:
            if options["gate"]:
                raise ServiceError("invalid_options", "--background and --gate cannot be combined.")
            queued = index_building(knowledge_base) or index_build_queue(knowledge_base)
            return {"kb": kb, "version": queued.name, "queued": True, "unchanged": False,
                    "duration_seconds": round(time.perf_counter() - started, 3)}
        if version is None and options["gate"]:
            gate = self._gated_build(knowledge_base)
            version = gate.version
        elif version is None:  # after --if-changed, its check synced the source already
            version = index_build(knowledge_base, progress=Progress("embedding"),
                                  sync_progress=Progress("fetching pages"), sync=not options["if_changed"])
        payload = {
            "synced_notes": version.document_count,
            "indexed_nodes": version.chunk_count,
            "duration_seconds": round(time.perf_counter() - started, 3),
            "kb": kb,
            "version": version.name,
            "chunks_embedded": 0 if unchanged else version.chunks_embedded,
            "chunks_reused": version.chunk_count if unchanged else version.chunks_reused,
            "unchanged": unchanged,
            "pages_skipped": version.pages_skipped,
            "source": source_as_dict(knowledge_base),
            # an SDK version: which, and what changed in its API since the version before it
            "sdk_version": knowledge_base.sdk_version or None,
            "sdk_changes": sdk_changes(knowledge_base),
            # how the pages changed since the version active before (`unchanged` above says whether anything did)
            "pages": ({**dict.fromkeys(PAGE_CHANGES, 0), "unchanged": version.document_count} if unchanged
                      else {key: version.page_changes.get(key, 0) for key in PAGE_CHANGES}),
        }
        if gate is not None:
            payload["activated"] = gate.activated
            payload["gate"] = {"runs": gate.runs, "failed_gates": gate.failed_gates}
            if not gate.activated:
                failed = ", ".join(f"{g['metric']} ({g['status']})" for g in gate.failed_gates)
                message = f"the gate failed ({failed}); version {version.name} was built but not activated"
                if self.as_json:
                    self.stdout.write(printable(json.dumps({"ok": False, "command": "reindex", "error": message,
                                                            "code": "gate_failed", **payload}, ensure_ascii=False)))
                    sys.exit(1)
                raise CommandError(message + "\n" + self._human_gate(payload))
        return payload

    def _gated_build(self, knowledge_base):
        # The release gate belongs to the evaluation app, which installs it; this is its command-line entry.
        def run_progress(done, total, item):
            if not self.as_json:
                self.stderr.write(f"\rgate: {done}/{total} questions", ending="")

        return index_build_gated(knowledge_base, progress=Progress("embedding"), run_progress=run_progress)

    def _human_gate(self, p: dict) -> str:
        lines = [f"gate run #{r['id']} {r['golden_set']}: {r['verdict']} · report {r['report']}" for r in p["gate"]["runs"]]
        lines += [f"  {g['metric']}: {g['value']} {g['op']} {g['threshold']} → {g['status']} {g.get('note', '')}"
                  for g in p["gate"]["failed_gates"]]
        return "\n".join(lines)

    # -- human-readable output ----------------------------------------------------------------------

    def _human_status(self, p: dict) -> str:
        lines = [f"project   {p['project_root']}", f"index     {p['index_dir']}",
                 f"generation {'configured: ' + p['deepseek_model'] if p['deepseek_api_key_configured'] else 'not configured (extractive answers)'}"]
        for k in p["knowledge_bases"]:
            lines.append(f"kb {k['slug']:<16} version {k['active_version'] or '-':<26} {k['documents']} docs, {k['chunks']} chunks")
            if k["source"]["kind"] == "git":
                lines.append(f"   source {k['source']['location']} at {(k['source']['revision'] or '-')[:12]}, "
                             f"synced {k['source']['synced_at'] or 'never'}")
            if k["building"]:
                lines.append(f"   building {k['building']['version']}: {k['building']['message']}")
        if not p["knowledge_bases"]:
            lines.append("no knowledge base yet: run `python manage.py rag reindex`")
        running = p["live"]
        in_flight = ", ".join(f"{channel} {n}" for channel, n in sorted(running["in_flight"].items())) or "none"
        lines.append(f"live      {running['processes']} process(es) · in flight: {in_flight} · "
                     f"open MCP sessions: {running['gauges'].get('mcp_sessions', 0)}")
        return "\n".join(lines)

    def _human_search(self, p: dict) -> str:
        plan = p["plan"]
        head = f"{p['kb']}@{p['version']} · {plan['kind']}"
        if plan["classes"]:
            head += " · classes " + ", ".join(plan["classes"])
        if plan["corrections"]:
            head += " · corrected " + ", ".join(f"{c['from']}→{c['to']}" for c in plan["corrections"])
        lines = [head, f"{p['timings_ms'].get('total', 0):.1f} ms"]
        if not p["results"]:
            lines.append(plan["reason"] or "no results")
        for n, r in enumerate(p["results"], start=1):
            lines.append(f"\n[{n}] {r['class_name']}{'.' + r['member'] if r['member'] else ''}  ({r['source']}, score {r['score']:.4f})")
            lines.append("    " + r["heading_path"])
            lines.extend("    " + line for line in r["content"].splitlines()[:8])
        return "\n".join(lines)

    def _human_context(self, p: dict) -> str:
        return p["context"] or "(no evidence)"

    def _human_read(self, p: dict) -> str:
        return p["content"]

    def _human_reindex(self, p: dict) -> str:
        if p["unchanged"]:
            return f"{p['kb']}: nothing changed, version {p['version']} stays active"
        if p.get("queued"):
            return (f"{p['kb']}: version {p['version']} is being built by the worker; questions are answered once it "
                    f"is active (`rag status` shows it)")
        if "gate" in p:
            return (f"{p['kb']}: version {p['version']} passed the gate and is active · {p['indexed_nodes']} chunks\n"
                    + self._human_gate(p))
        line = (f"{p['kb']}: version {p['version']} active · {p['synced_notes']} documents · {p['indexed_nodes']} chunks "
                f"({p['chunks_embedded']} embedded, {p['chunks_reused']} reused) in {p['duration_seconds']:.1f} s")
        if p["source"]["kind"] == "git":
            line += f"\nsource {p['source']['location']} at {p['source']['revision'][:12]}"
        line += "\npages: " + ", ".join(f"{p['pages'][key]} {key}" for key in PAGE_CHANGES)
        skipped = p.get("pages_skipped") or []
        if skipped:
            reasons = Counter(page["reason"] for page in skipped)
            line += f"\n{len(skipped)} pages skipped: " + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())
        return line


def printable(text: str) -> str:
    """Text any UTF-8 stdout can take: a lone surrogate (an argument that was not UTF-8, echoed back) is written as
    its `\\udcNN` escape, which inside a JSON string is that same character."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _building(kb: KnowledgeBase) -> dict | None:
    version = index_building(kb)
    if version is None:
        return None
    return {"version": version.name, "done": version.progress_done, "total": version.progress_total,
            "message": building_message(kb, version)}


def _migrated() -> bool:
    """Whether the database holds this app's tables (a fresh data directory that was never migrated does not)."""
    from django.db import connection

    try:
        return KnowledgeBase._meta.db_table in connection.introspection.table_names()
    except DatabaseError:
        return False
