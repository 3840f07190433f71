"""Property-based tests (hypothesis) of the inputs no caller controls: the question validator, the `rag` command
line and the ingest of Markdown and HTML. Any input gives a result or the interface's own error with a stable
code, never another exception. Every test is bounded and derandomized, so CI runs the same examples each time."""

from __future__ import annotations

import io
import json
import math
import sys
import time
import unicodedata

import pytest
from django.core.management import CommandError
from django.db import transaction
from hypothesis import HealthCheck, given, settings, strategies as st

from infra.errors import ServiceError
from rag.engine.chunk import chunk_documents
from rag.engine.ingest import IngestError, read_folder
from rag.management.commands.rag import Command
from rag.models import Document, IndexVersion, KnowledgeBase
from rag.services.questions import validated_question
from rag.services.records import MAX_QUESTION_CHARS

BOUNDED = settings(max_examples=150, derandomize=True, deadline=None, database=None)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
# Characters that show nothing: white space, controls (Cc) and format characters (Cf: U+200B, U+FEFF, U+2060, …).
INVISIBLE = st.characters(categories=["Zs", "Zl", "Zp", "Cc", "Cf"]) | st.sampled_from(" \t\r\n\x0b\x0c\x85")


def is_visible(character: str) -> bool:
    return not character.isspace() and unicodedata.category(character) not in ("Cc", "Cf")


# -- the question validator ------------------------------------------------------------------------------------


@BOUNDED
@given(st.text(max_size=MAX_QUESTION_CHARS + 50) | JSON_VALUES)
def test_any_value_is_a_valid_question_or_a_service_error_with_a_stable_code(value):
    try:
        question = validated_question(value)
    except ServiceError as exc:
        assert exc.code in ("invalid_question", "question_too_long")
    else:
        assert question == value
        assert len(question) <= MAX_QUESTION_CHARS and "\x00" not in question
        assert any(is_visible(c) for c in question), f"accepted a question that shows nothing: {question!r}"


@BOUNDED
@given(st.text(INVISIBLE, min_size=1, max_size=40))
def test_a_question_of_only_blank_zero_width_and_control_characters_is_invalid(question):
    with pytest.raises(ServiceError) as raised:
        validated_question(question)

    assert raised.value.code == "invalid_question"


@pytest.mark.parametrize("question", ["   ", "\t\n", "\u200b", "\ufeff", "\u2060", "\u200b\u200c\u200d \ufeff",
                                      "\x01\x02", "\x7f", "\x00", "\x1b\x07"])
def test_blank_zero_width_and_control_only_questions_are_invalid(question):
    with pytest.raises(ServiceError) as raised:
        validated_question(question)

    assert raised.value.code == "invalid_question"


@BOUNDED
@given(st.text(max_size=30), st.text(max_size=30))
def test_a_question_holding_a_nul_anywhere_is_invalid(before, after):
    with pytest.raises(ServiceError) as raised:
        validated_question(before + "\x00" + after)

    assert raised.value.code == "invalid_question"


# -- the `rag` command line ------------------------------------------------------------------------------------

ACTIONS = ["status", "search", "context", "read", "reindex", "ask", "vectors"]
OPTIONS = ["--kb", "--json", "--top-k", "--mode", "--exclude", "--no-record", "--source", "--language",
           "--if-changed", "--gate", "--background", "-h", "--verbosity", "-v", "--no-color", "--bogus", "-x", "--"]
VALUES = ["sdk", "0", "-1", "5", "51", "9" * 30, "x", "hybrid", "bm25", "vector", "nope", "", " ", "-", "../x",
          "\udcff", "Object3D", "Mesh.md", "如何 添加"]
ARGUMENT = st.sampled_from(ACTIONS) | st.sampled_from(OPTIONS) | st.sampled_from(VALUES) | st.text(max_size=12)
ARGV = st.lists(ARGUMENT, max_size=7)


def run_command_line(monkeypatch, argv: list[str]) -> tuple[int, str, str]:
    """Run `manage.py rag <argv>` in this process, as the command line does: (exit status, stdout, stderr), the
    streams being those of a UTF-8 terminal (stdout strict, stderr escaping what it cannot encode)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    with monkeypatch.context() as patch:  # in the test's body: pytest's capture resets sys.stdout after setup
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", err)
        try:
            Command().run_from_argv(["manage.py", "rag", *argv])
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
    return status, out.buffer.getvalue().decode(), err.buffer.getvalue().decode()


@pytest.fixture
def parse_only(monkeypatch):
    """The command line parsed, nothing run: each parse's options are kept in the list this yields."""
    parsed: list[dict] = []
    monkeypatch.setattr(Command, "execute", lambda self, *args, **options: parsed.append(options))
    return parsed


@settings(BOUNDED, max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=ARGV)
def test_any_argv_parses_or_exits_2_with_a_message_never_a_traceback(parse_only, monkeypatch, argv):
    status, out, err = run_command_line(monkeypatch, argv)

    assert status in (0, 2), (argv, status)
    if status == 2 and "--json" in argv:
        error = json.loads(out)
        assert (error["ok"], error["code"]) == (False, "invalid_arguments") and error["error"], out
    elif status == 2:
        assert "error:" in err, err
    elif "-h" not in argv:
        assert parse_only[-1]["action"] in ACTIONS


def test_an_argument_error_in_json_mode_is_a_json_error_with_exit_status_2(parse_only, monkeypatch):
    status, out, err = run_command_line(monkeypatch, ["search", "--json", "--top-k", "many", "a question"])

    assert status == 2
    assert json.loads(out) == {"ok": False, "code": "invalid_arguments",
                               "error": "argument --top-k: invalid int value: 'many'"}


def test_an_argument_error_called_from_code_is_a_command_error():
    from django.core.management import call_command

    with pytest.raises(CommandError, match="invalid int value"):
        call_command("rag", "search", "--json", "--top-k", "many", "a question")


SAFE_ACTIONS = ["status", "search", "context", "read", "ask"]  # reindex and vectors write: parsed above, not run
RUN_ARGV = st.tuples(st.sampled_from(SAFE_ACTIONS), st.lists(ARGUMENT.filter(lambda a: a not in ACTIONS + ["-h"]),
                                                              max_size=5))


@pytest.mark.django_db
@settings(BOUNDED, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=RUN_ARGV)
def test_any_argv_run_on_a_built_kb_answers_or_fails_with_a_code_never_a_traceback(built_kb, monkeypatch,
                                                                                   argv):
    action, rest = argv
    monkeypatch.setattr(sys, "stdin", io.StringIO("Object3D\n\x00\n"))  # `search -` reads questions from stdin
    monkeypatch.setattr("django.core.management.base.connections.close_all", lambda: None)  # the test's connection
    stored = stored_rows()

    with transaction.atomic():  # each example's request records are rolled back
        status, out, err = run_command_line(monkeypatch, [action, *rest])
        transaction.set_rollback(True)

    assert status in (0, 1, 2), (argv, status)
    if "--json" in rest and "-" not in rest[-1:] and out.strip():
        for line in out.splitlines():
            assert "ok" in json.loads(line), out
    if status == 1 and "--json" not in rest:
        assert "CommandError:" in err, err
    assert stored_rows() == stored


def stored_rows() -> tuple:
    return (list(KnowledgeBase.objects.values_list("slug", "active_version_id")),
            list(Document.objects.values_list("path", "content_hash")),
            list(IndexVersion.objects.values_list("name", "status")))


# -- ingest ----------------------------------------------------------------------------------------------------


def assert_storable(text: str) -> None:
    """PostgreSQL refuses NUL in text and JSON, and nothing encodes a lone surrogate as UTF-8."""
    assert isinstance(text, str) and "\x00" not in text
    text.encode("utf-8")


def ingest(folder) -> list:
    """read_folder and chunk_documents over folder, every stored field checked; [] for an IngestError."""
    try:
        documents = read_folder(folder)
    except IngestError:
        return []
    for document in documents:
        for text in (document.path, document.title, document.text):
            assert_storable(text)
        assert_storable(json.dumps(document.meta, ensure_ascii=False, allow_nan=False))
    chunks = chunk_documents(documents)
    for chunk in chunks:
        for text in (chunk.text, chunk.title, chunk.chunk_id, chunk.source, *chunk.heading_path):
            assert_storable(text)
    return chunks


def fresh_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("kb")


LINES = st.sampled_from([
    "# Title", "## Section", "### .add ( object : Object3D ) : this", "### " + "m" * 10_000, "# " + "H" * 10_000,
    "```", "```js", "~~~", "    ```", "---", "title: x", "labels: {level: [a, b]}", "x: .nan", 'y: "\\0\\ud800"',
    "a: &a [*a]", "[" * 2000, "body text with words", "\x00", "\ufeff\u200b", "\udcff", "src/core/Object3D.js",
    "x" * 30_000, "<div>", "</div>", "- item", "| a | b |", "> note", "",
]) | st.text(max_size=40)
MARKDOWN = st.lists(LINES, max_size=40).map("\n".join)


@settings(BOUNDED, max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["page.md", "page.html", "page.markdown", "page.htm"]), content=st.binary(max_size=3000))
def test_random_bytes_as_a_page_make_chunks_never_an_exception(tmp_path_factory, name, content):
    folder = fresh_folder(tmp_path_factory)
    (folder / name).write_bytes(content)

    ingest(folder)


@settings(BOUNDED, max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["page.md", "page.html"]), text=MARKDOWN,
       encoding=st.sampled_from(["utf-8", "utf-16", "latin-1"]))
def test_any_markdown_or_html_makes_chunks_never_an_exception(tmp_path_factory, name, text, encoding):
    folder = fresh_folder(tmp_path_factory)
    (folder / name).write_bytes(text.encode(encoding, "surrogateescape" if encoding == "utf-8" else "replace"))

    ingest(folder)


def test_thousands_of_headings_and_huge_ones_are_chunked(tmp_path):
    (tmp_path / "many.md").write_text("# Many\n\n" + "".join(f"### member{n}\n\nWhat member {n} does.\n\n"
                                                             for n in range(3000)))
    (tmp_path / "huge.md").write_text("# " + "H" * 10_000 + "\n\n### " + "m" * 10_000 + "\n\nThe body.\n")

    chunks = ingest(tmp_path)

    assert len([c for c in chunks if c.source == "many.md"]) == 3000
    assert {c.member for c in chunks if c.source == "huge.md"} == {"m" * 10_000}


def test_an_unclosed_code_fence_is_chunked_as_code_to_the_end(tmp_path):
    (tmp_path / "fence.md").write_text("# Fence\n\n```js\n" + "scene.add(mesh);\n" * 300)

    chunks = ingest(tmp_path)

    assert len(chunks) > 1 and all(c.text.startswith("```") for c in chunks[1:])  # each piece reopens the fence


@pytest.mark.parametrize("depth", [150, 5000])
def test_deeply_nested_html_is_read_as_text(tmp_path, depth):
    (tmp_path / "deep.html").write_text("<h1>Deep</h1>" + "<div><span>" * depth + "the innermost words"
                                        + "</span></div>" * depth)

    chunks = ingest(tmp_path)

    assert "the innermost words" in " ".join(c.text for c in chunks)


def test_nul_characters_in_a_page_are_stored_as_replacement_characters(tmp_path):
    (tmp_path / "nul.md").write_bytes(b"# Ti\x00tle\n\nA body with a \x00 NUL in it, long enough to keep.\n")

    [document] = read_folder(tmp_path)
    chunks = ingest(tmp_path)

    assert document.title == "Ti\ufffdtle" and "\x00" not in document.text
    assert chunks and "\ufffd NUL" in chunks[0].text


def test_a_file_name_that_is_not_utf8_keeps_its_bytes_as_escapes(tmp_path):
    (tmp_path / "caf\udce9.md").write_text("# Café\n\nThe café page, in a Latin-1 file name.\n",
                                             encoding="utf-8")  # b"caf\xe9.md" on disk

    chunks = ingest(tmp_path)

    assert {c.source for c in chunks} == {"caf\\xe9.md"}


@pytest.mark.parametrize("front_matter, meta", [
    ("a: &a [*a]", {}),  # an alias to itself
    ("deep: " + "[" * 3000 + "]" * 3000, {}),  # deeper than the stack
    ("x: .nan\ny: -.inf", {"x": "nan", "y": "-inf"}),  # not JSON
    ('title: "a\\0b"\nnote: "\\ud800"', {"title": "a\ufffdb", "note": "\ufffd"}),
])
def test_front_matter_the_database_would_refuse_is_made_storable_or_dropped(tmp_path, front_matter, meta):
    (tmp_path / "page.md").write_text(f"---\n{front_matter}\n---\n# Page\n\nThe body of the page.\n")

    [document] = read_folder(tmp_path)
    ingest(tmp_path)

    assert document.meta == meta


def test_a_very_long_line_is_chunked_in_linear_time(tmp_path):
    (tmp_path / "long.md").write_text("# Long\n\n" + "x" * 20_000 + "\n")  # a minified line, say
    (tmp_path / "big.md").write_text("# Big\n\n" + "A line of words.\n" * 20_000)

    started = time.perf_counter()
    chunks = ingest(tmp_path)

    assert time.perf_counter() - started < 5  # 20 s before: a quadratic regular expression and list scans
    assert math.ceil(20_000 / 800) <= len([c for c in chunks if c.source == "long.md"])
