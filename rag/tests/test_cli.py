"""`manage.py rag ...`: the JSON shapes of seed 000 plus our added keys, errors, batch mode, safe `read`."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.core.management import CommandError, call_command

from rag.models import RequestRecord
from rag.tests.conftest import documented_example, make_kb
from rag.tests.live import manage

pytestmark = pytest.mark.django_db

# The keys seed 000 promises, then the keys we add.
STATUS_KEYS = {"ok", "command", "project_root", "notes_dir", "index_dir", "db_exists", "nodes_file_exists",
               "deepseek_api_key_configured", "deepseek_model", "markdown_note_count", "index_node_count"}
STATUS_ADDED = {"kb", "kb_exists", "active_version", "embedding_model", "lancedb_uri", "knowledge_bases", "live"}
SEARCH_KEYS = {"ok", "command", "question", "mode", "top_k", "results"}
SEARCH_ADDED = {"kb", "version", "sdk_version", "version_notes", "built_at", "source_revision", "plan", "excluded",
                "timings_ms", "request_id"}
RESULT_KEYS = {"source", "title", "heading_path", "chunk_index", "score", "raw_score", "metadata", "content"}
RESULT_ADDED = {"chunk_id", "class_name", "member", "anchor", "link"}
CONTEXT_KEYS = {"ok", "command", "question", "mode", "top_k", "context", "sources"}
CONTEXT_ADDED = {"kb", "version", "sdk_version", "version_notes", "plan", "request_id"}
READ_KEYS = {"ok", "command", "source", "content"}
READ_ADDED = {"kb"}
REINDEX_KEYS = {"ok", "command", "synced_notes", "indexed_nodes", "duration_seconds"}
REINDEX_ADDED = {"kb", "version", "chunks_embedded", "chunks_reused", "unchanged", "pages_skipped", "source", "pages",
                 "sdk_version", "sdk_changes"}
ERROR_KEYS = {"ok", "error"}
ERROR_ADDED = {"code"}


def run_rag(*args: str) -> str:
    out = io.StringIO()
    call_command("rag", *args, stdout=out)
    return out.getvalue()


def run_json(*args: str) -> dict:
    return json.loads(run_rag(*args, "--json"))


def run_json_failure(*args: str) -> dict:
    out = io.StringIO()
    with pytest.raises(SystemExit) as raised:
        call_command("rag", *args, "--json", stdout=out)
    assert raised.value.code == 1
    return json.loads(out.getvalue())


# -- ask --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_documented_ask_example_has_the_fields_ask_returns(built_kb, language):
    example = documented_example(f"{language}/cli.md", "ask_json_example")

    payload = run_json("ask", "PerspectiveCamera 的 fov 默认值", "--kb", "sdk")

    assert list(payload) == list(example)
    assert set(payload["citations"][0]) == set(example["citations"][0])
    assert set(payload["usage"]) == set(example["usage"]) and set(example["plan"]) <= set(payload["plan"])
    assert (payload["mode"], payload["answer_mode"], payload["confidence"]) == ("hybrid", "extractive", "high")


# -- status ------------------------------------------------------------------------------------------


def test_status_json_has_the_seed_shape(built_kb):
    payload = run_json("status", "--kb", "sdk")

    assert set(payload) == STATUS_KEYS | STATUS_ADDED
    assert (payload["ok"], payload["command"], payload["kb"], payload["kb_exists"]) == (True, "status", "sdk", True)
    assert payload["notes_dir"] == built_kb.source_dir
    assert payload["nodes_file_exists"] is True
    assert payload["markdown_note_count"] == 9
    assert payload["index_node_count"] == built_kb.active_version.chunk_count
    assert payload["active_version"] == built_kb.active_version.name
    assert isinstance(payload["db_exists"], bool) and isinstance(payload["deepseek_api_key_configured"], bool)
    assert payload["knowledge_bases"] == [{"slug": "sdk", "active_version": built_kb.active_version.name,
                                           "documents": 9, "chunks": built_kb.active_version.chunk_count,
                                           "building": None,
                                           "source": {"kind": "folder", "location": built_kb.source_dir,
                                                      "folder": built_kb.source_dir, "revision": "",
                                                      "synced_at": None}}]
    assert set(payload["live"]) == {"in_flight", "gauges", "processes"}


def test_status_of_a_missing_knowledge_base_reports_nothing_built(db):
    payload = run_json("status", "--kb", "sdk")

    assert set(payload) == STATUS_KEYS | STATUS_ADDED
    assert (payload["kb_exists"], payload["nodes_file_exists"], payload["index_node_count"]) == (False, False, 0)
    assert payload["knowledge_bases"] == []


def test_status_prints_a_human_summary(built_kb):
    text = run_rag("status", "--kb", "sdk")

    assert "kb sdk" in text and built_kb.active_version.name in text


# -- search and context ------------------------------------------------------------------------------


def test_search_json_has_the_seed_shape_plus_chunk_class_member_plan_and_timings(built_kb):
    payload = run_json("search", "--kb", "sdk", "PerspectiveCamera 的 fov 默认是多少")

    first = payload["results"][0]
    assert set(payload) == SEARCH_KEYS | SEARCH_ADDED
    assert (payload["ok"], payload["command"], payload["mode"], payload["top_k"]) == (True, "search", "hybrid", 5)
    assert (payload["question"], payload["kb"]) == ("PerspectiveCamera 的 fov 默认是多少", "sdk")
    assert payload["version"] == built_kb.active_version.name
    assert len(payload["results"]) == 5
    assert all(set(r) == RESULT_KEYS | RESULT_ADDED for r in payload["results"])
    assert (first["class_name"], first["member"]) == ("PerspectiveCamera", "fov")
    assert first["source"] == "PerspectiveCamera.md"
    assert (first["title"], first["heading_path"]) == ("透视相机（PerspectiveCamera）", "属性 > .fov : Float")
    assert first["metadata"] == {"h1": "透视相机（PerspectiveCamera）", "h2": "属性", "h3": ".fov : Float",
                                 "kb": "sdk", "version": payload["version"], "part": 0}
    assert first["content"].startswith("### .fov : Float")
    assert (first["anchor"], first["link"]) == ("fov-float", "PerspectiveCamera.md#fov-float")
    assert isinstance(first["score"], float) and isinstance(first["raw_score"], float)
    assert payload["plan"]["classes"] == ["PerspectiveCamera"] and payload["plan"]["kind"] == "doc"
    assert {"plan", "total"} <= set(payload["timings_ms"])


def test_search_options_reach_the_engine(built_kb):
    first = run_json("search", "--kb", "sdk", "PerspectiveCamera 的 fov")["results"][0]["chunk_id"]

    payload = run_json("search", "--kb", "sdk", "PerspectiveCamera 的 fov", "--top-k", "2", "--mode", "bm25",
                       "--exclude", first)

    assert (payload["top_k"], payload["mode"], payload["excluded"]) == (2, "bm25", [first])
    assert len(payload["results"]) == 2
    assert first not in [r["chunk_id"] for r in payload["results"]]


def test_a_chitchat_search_returns_no_results(built_kb):
    payload = run_json("search", "--kb", "sdk", "今天中午吃什么好")

    assert (payload["ok"], payload["results"], payload["plan"]["kind"]) == (True, [], "chitchat")


def test_search_prints_a_human_summary(built_kb):
    text = run_rag("search", "--kb", "sdk", "PerspectiveCamera 的 fov 默认是多少")

    assert "[1] PerspectiveCamera.fov" in text


def test_context_json_has_the_seed_shape(built_kb):
    payload = run_json("context", "--kb", "sdk", "Raycaster 的 intersectObjects 返回什么")

    assert set(payload) == CONTEXT_KEYS | CONTEXT_ADDED
    assert (payload["ok"], payload["command"], payload["top_k"]) == (True, "context", 5)
    assert payload["context"].startswith("[1] 来源: 光线投射Raycaster · ")
    assert "\n文件: Raycaster.md\n标题: 光线投射Raycaster\n标题路径: " in payload["context"]
    assert "\n\n---\n" in payload["context"]
    assert payload["sources"][0] == "Raycaster.md"
    assert len(payload["sources"]) == len(set(payload["sources"]))


def test_batch_search_prints_one_json_object_per_line_in_order(built_kb, monkeypatch):
    questions = ["PerspectiveCamera 的 fov", "今天中午吃什么好", "雾" * 2001, "Fog 的颜色"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(questions[:2]) + "\n\n" + "\n".join(questions[2:]) + "\n"))

    lines = run_rag("search", "--kb", "sdk", "-").splitlines()

    payloads = [json.loads(line) for line in lines]
    assert [p["question"] for p in payloads] == questions
    assert [p["ok"] for p in payloads] == [True, True, False, True]
    assert payloads[2] == {"ok": False, "command": "search", "question": questions[2],
                           "error": payloads[2]["error"], "code": "question_too_long"}
    assert all(set(p) == SEARCH_KEYS | SEARCH_ADDED for p in payloads if p["ok"])
    assert payloads[3]["results"][0]["class_name"] == "Fog"


# -- read --------------------------------------------------------------------------------------------


def test_read_json_returns_the_page(built_kb, corpus_copy):
    payload = run_json("read", "--kb", "sdk", "PerspectiveCamera.md")

    assert set(payload) == READ_KEYS | READ_ADDED
    assert (payload["ok"], payload["command"], payload["source"]) == (True, "read", "PerspectiveCamera.md")
    assert payload["content"] == (corpus_copy / "PerspectiveCamera.md").read_text(encoding="utf-8")


def test_read_gives_an_html_page_as_clean_markdown_and_one_section_by_its_anchor(built_kb):
    page = run_json("read", "--kb", "sdk", "html/Light.html")["content"]
    section = run_json("read", "--kb", "sdk", "PerspectiveCamera.md#fov-float")["content"]

    assert page.startswith("# 光源（Light）\n") and "<" not in page and "首页" not in page
    assert section.startswith("### .fov : Float") and "### .near" not in section


def test_read_of_an_anchor_the_page_does_not_have_is_section_not_found(built_kb):
    payload = run_json_failure("read", "--kb", "sdk", "PerspectiveCamera.md#no-such-section")

    assert payload["code"] == "section_not_found"


def test_read_refuses_paths_leading_outside_the_knowledge_base(corpus_copy, tmp_path):
    make_kb(corpus_copy)
    (tmp_path / "secret.md").write_text("# 机密\n", encoding="utf-8")
    os.symlink(tmp_path / "secret.md", corpus_copy / "Secret.md")

    refusals = [run_json_failure("read", "--kb", "sdk", source)
                for source in ("../secret.md", "html/../../secret.md", str(corpus_copy / "Fog.md"), "Secret.md")]

    assert all(r["ok"] is False and r["code"] == "source_outside_kb" for r in refusals)
    assert not any("机密" in json.dumps(r, ensure_ascii=False) for r in refusals)


def test_read_of_a_missing_page_is_not_found(corpus_copy):
    make_kb(corpus_copy)

    assert run_json_failure("read", "--kb", "sdk", "Nope.md")["code"] == "source_not_found"


# -- reindex -----------------------------------------------------------------------------------------


def test_reindex_json_creates_builds_and_reports(db, corpus_copy):
    payload = run_json("reindex", "--kb", "sdk", "--source", str(corpus_copy))

    assert set(payload) == REINDEX_KEYS | REINDEX_ADDED
    assert (payload["ok"], payload["command"], payload["kb"], payload["unchanged"]) == (True, "reindex", "sdk", False)
    assert payload["synced_notes"] == 9
    assert payload["indexed_nodes"] == payload["chunks_embedded"] + payload["chunks_reused"] > 0
    assert isinstance(payload["duration_seconds"], float)
    assert payload["pages"] == {"added": 9, "changed": 0, "removed": 0, "renamed": 0, "unchanged": 0}
    assert payload["source"]["kind"] == "folder" and payload["source"]["location"] == str(corpus_copy.resolve())
    assert run_json("status", "--kb", "sdk")["active_version"] == payload["version"]


def test_vectors_on_a_fresh_data_folder_creates_the_default_knowledge_base(db, corpus_copy, settings):
    settings.RAG_DEFAULT_KB, settings.RAG_DEFAULT_KB_SOURCE = "docs", str(corpus_copy)

    payload = run_json("vectors", "--kb", "docs")
    unknown = run_json_failure("vectors", "--kb", "elsewhere")

    assert payload["ok"] and payload["vectors"] > 0 and payload["file"].startswith(str(corpus_copy / ".rag-vectors"))
    assert unknown["code"] == "kb_not_found"


def test_reindex_if_changed_skips_an_unchanged_source(built_kb):
    payload = run_json("reindex", "--kb", "sdk", "--if-changed")

    assert set(payload) == REINDEX_KEYS | REINDEX_ADDED
    assert payload["unchanged"] is True and payload["pages"]["unchanged"] == 9
    assert payload["version"] == built_kb.active_version.name
    assert (payload["chunks_embedded"], payload["chunks_reused"]) == (0, payload["indexed_nodes"])


def test_reindex_prints_a_human_summary(built_kb):
    text = run_rag("reindex", "--kb", "sdk")

    assert "sdk: version " in text and "0 embedded" in text


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, code",
    [
        (("search", "--kb", "nope", "Fog"), "kb_not_found"),
        (("search", "--kb", "sdk", "Fog", "--top-k", "0"), "invalid_top_k"),
        (("search", "--kb", "sdk", "   "), "invalid_question"),
        (("context", "--kb", "nope", "Fog"), "kb_not_found"),
        (("reindex", "--kb", "nope"), "kb_not_found"),
        (("reindex", "--kb", "sdk", "--source", "/no/such/folder"), "source_not_found"),
    ],
)
def test_json_errors_have_the_seed_shape(built_kb, args, code):
    payload = run_json_failure(*args)

    assert set(payload) == ERROR_KEYS | ERROR_ADDED
    assert (payload["ok"], payload["code"]) == (False, code)
    assert payload["error"]


def test_errors_without_json_raise_a_command_error(db):
    with pytest.raises(CommandError, match="kb_not_found"):
        run_rag("search", "--kb", "nope", "Fog")


# -- recording and a database that was never migrated ------------------------------------------------------


def test_every_question_of_the_cli_is_recorded_on_its_channel(built_kb):
    payload = run_json("search", "PerspectiveCamera 的 fov", "--kb", "sdk", "--top-k", "3")

    record = RequestRecord.objects.get(request_id=payload["request_id"])
    assert (record.channel, record.kind, record.outcome) == ("cli", "search", "ok")
    assert [a["chunk_id"] for a in record.adopted] == [r["chunk_id"] for r in payload["results"]]


def test_a_batch_asked_not_to_record_leaves_no_record(built_kb, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Fog 的颜色\nPerspectiveCamera 的 fov\n"))

    lines = [json.loads(line) for line in run_rag("search", "-", "--kb", "sdk", "--json", "--no-record").splitlines()]

    assert [line["ok"] for line in lines] == [True, True]
    assert not RequestRecord.objects.exists()


def test_a_failed_cli_question_is_recorded_with_its_code(built_kb):
    run_json_failure("search", "Fog", "--kb", "sdk", "--top-k", "99")

    assert RequestRecord.objects.get().error_code == "invalid_top_k"


@pytest.mark.parametrize("command", [["search", "Fog 的颜色"], ["status"], ["read", "Fog.md"]])
def test_a_database_never_migrated_is_a_clear_json_error(tmp_path, command):
    """A fresh data directory: no traceback, the seed's error shape, a code and exit status 1."""
    done = manage("rag", *command, "--json", RAG_DATA_DIR=str(tmp_path / "fresh"), DATABASE_URL="")

    payload = json.loads(done.stdout)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert payload == {"ok": False, "code": "database_not_migrated", "error": payload["error"]}
    assert "manage.py migrate" in payload["error"]


def test_a_budgeted_search_and_context_keep_their_budget_and_page_with_a_cursor(built_kb):
    question = "WebGLRenderer shadowMap 怎么开启阴影？"
    first = run_json("search", "--kb", "sdk", question, "--max-tokens", "250")
    assert first["tokens"] <= 250 and first["max_tokens"] == 250 and first["cursor"]
    second = run_json("search", "--kb", "sdk", question, "--max-tokens", "250", "--cursor", first["cursor"])
    assert second["results"] and second["results"][0]["rank"] >= first["results"][-1]["rank"]
    context = run_json("context", "--kb", "sdk", question, "--max-tokens", "250")
    assert context["tokens"] <= 250 and context["context"].startswith("[1] ") and context["cursor"] == first["cursor"]
    assert run_json_failure("search", "--kb", "sdk", question, "--cursor", "bm90IG91cnM")["code"] == "invalid_cursor"
    assert run_json_failure("search", "--kb", "sdk", question, "--max-tokens", "10")["code"] == "invalid_max_tokens"
    plain = run_json("search", "--kb", "sdk", question)
    assert "cursor" not in plain  # without a budget the seed's shape is unchanged


def test_a_budgeted_read_reads_on_with_its_cursor_to_the_end(built_kb):
    parts = [run_json("read", "--kb", "sdk", "WebGLRenderer.md", "--max-tokens", "200")]
    while parts[-1]["cursor"] and len(parts) < 60:
        parts.append(run_json("read", "--kb", "sdk", "WebGLRenderer.md", "--max-tokens", "200",
                              "--cursor", parts[-1]["cursor"]))
    assert len(parts) > 2 and parts[-1]["cursor"] is None and all(part["tokens"] <= 200 for part in parts)
    assert all(part["content"].count("```") % 2 == 0 for part in parts)


def test_a_budgeted_ask_gives_its_cited_texts_within_the_budget(built_kb):
    question = "WebGLRenderer shadowMap 怎么开启阴影？"
    wide = run_json("ask", "--kb", "sdk", question, "--max-tokens", "4000")
    tight = run_json("ask", "--kb", "sdk", question, "--max-tokens", "150")

    assert wide["citations"] and len(wide["cited_texts"]) == len(wide["citations"])
    assert wide["tokens"] <= 4000 and all(c["text"] for c in wide["cited_texts"])
    assert tight["answer"] == wide["answer"] and tight["max_tokens"] == 150
    # The answer is kept whole; the cited texts take what it leaves, cut at boundaries and marked incomplete.
    assert sum(len(c["text"]) for c in tight["cited_texts"]) < sum(len(c["text"]) for c in wide["cited_texts"])
    assert not all(c["complete"] for c in tight["cited_texts"])
    assert run_json_failure("ask", "--kb", "sdk", question, "--max-tokens", "10")["code"] == "invalid_max_tokens"
    assert "cited_texts" not in run_json("ask", "--kb", "sdk", question)  # the seed's shape without a budget
