"""Readers: Sphinx, plain HTML and Markdown at any depth into the document model, and what the chunker,
the catalog and a build make of it. The other generators' readers have their own test modules."""

from pathlib import Path

import pytest

from rag.engine.catalog import Catalog
from rag.engine.chunk import chunk_documents
from rag.engine.docmodel import PAGE_GUIDE, PAGE_INDEX, RawPage
from rag.engine.ingest import read_document, read_folder, skipped_pages
from rag.engine.plan import Planner
from rag.engine.readers import read_page, reader_for

FIXTURES = Path(__file__).parent / "reader_fixtures"
CHROME = ("¶", "[source]", "Navigation", "Quick search", "Table of Contents", "index</a>", "Related Topics")


def sphinx_page(name: str):
    text = (FIXTURES / "sphinx" / name).read_text(encoding="utf-8")
    return read_page(RawPage(name, text, ".html"))


# -- Sphinx ------------------------------------------------------------------------------------------


def test_a_sphinx_page_is_recognised_from_its_markup():
    page = RawPage("local.html", (FIXTURES / "sphinx" / "werkzeug-local.html").read_text(encoding="utf-8"), ".html")

    assert reader_for(page).name == "sphinx"


def test_a_sphinx_page_documents_its_module_and_each_object_is_a_section_with_its_id():
    page = sphinx_page("werkzeug-local.html")

    assert (page.title, page.symbol, page.generator) == ("Context Locals", "werkzeug.local", "sphinx")
    pop = next(s for s in page.sections if s.anchor == "werkzeug.local.LocalStack.pop")
    assert (pop.member, pop.owner, pop.kind, pop.symbol) == ("pop", "LocalStack", "method", "werkzeug.local.LocalStack.pop")
    assert pop.markdown.startswith(f"### {pop.signature}") and pop.signature.startswith("pop()")
    assert pop.headings[-2:] == ("LocalStack", pop.signature)


def test_a_sphinx_class_is_an_overview_section_and_its_members_belong_to_it():
    page = sphinx_page("jinja2-sandbox.html")

    environment = next(s for s in page.sections if s.anchor == "jinja2.sandbox.SandboxedEnvironment")
    members = [s for s in page.sections if s.owner == "SandboxedEnvironment" and s.member]
    assert (environment.kind, environment.member, environment.owner) == ("class", "", "SandboxedEnvironment")
    assert {"call_binop", "call_unop", "is_safe_attribute"} <= {s.member for s in members}


def test_a_module_level_function_belongs_to_the_page_module():
    page = sphinx_page("werkzeug-local.html")

    release = next(s for s in page.sections if s.member == "release_local")

    assert (release.owner, release.kind) == ("", "function")


def test_sphinx_sections_carry_no_page_chrome():
    for name in ("werkzeug-local.html", "jinja2-sandbox.html"):
        page = sphinx_page(name)

        text = "\n".join(s.markdown for s in page.sections)
        assert not [mark for mark in CHROME if mark in text], name
        assert "Navigation" not in {h for s in page.sections for h in s.headings}


def test_prose_is_cut_at_its_headings_and_code_stays_fenced():
    page = sphinx_page("werkzeug-local.html")

    prose = [s for s in page.sections if s.kind == "topic" and s.headings]
    assert "Proxy Objects" in {s.headings[-1] for s in prose}
    assert any("```" in s.markdown for s in page.sections)


def test_a_sphinx_index_page_is_skipped_with_its_reason():
    page = sphinx_page("click-genindex.html")

    assert (page.kind, page.skipped) == (PAGE_INDEX, "index or search page")


def test_sphinx_bases_line_gives_the_catalog_its_ancestors(tmp_path):
    (tmp_path / "api.html").write_text(
        '<html><head><meta name="generator" content="Sphinx 7.2"></head><body><div class="body" role="main">'
        '<h1>API</h1><span id="module-pkg"></span>'
        '<dl class="py class"><dt class="sig sig-object py" id="pkg.Base"><em>class</em> pkg.Base()</dt>'
        '<dd><p>The base.</p></dd></dl>'
        '<dl class="py class"><dt class="sig sig-object py" id="pkg.Child"><em>class</em> pkg.Child(x)</dt>'
        '<dd><p>Bases: <code class="xref py py-class docutils literal"><span class="pre">pkg.core.Base</span></code></p>'
        '<p>A child of the base.</p>'
        '<dl class="py method"><dt class="sig sig-object py" id="pkg.Child.run"><span class="sig-name descname">'
        '<span class="pre">run</span></span>()</dt><dd><p>Run it.</p></dd></dl></dd></dl></div></body></html>',
        encoding="utf-8")

    catalog = Catalog.from_chunks(chunk_documents(read_folder(tmp_path)))

    assert catalog.ancestors("Child") == ["Base"]
    assert catalog.classes["Child"]["members"] == ["run"]
    assert catalog.owner_of("run", "Child") == "Child"


# -- plain HTML ----------------------------------------------------------------------------------------


def test_plain_html_is_read_from_its_main_content_without_navigation_header_or_footer():
    html = ("<html><head><title>Widgets | Docs</title></head><body><nav>Home Products</nav><header>Site</header>"
            "<main><h1>Widgets</h1><p>Widgets hold things.</p><h2>open()</h2><p>Opens the widget.</p>"
            "<h2>Usage</h2><p>Call it first.</p></main><footer>© 2026 Example</footer></body></html>")

    page = read_page(RawPage("widgets.html", html, ".html"))

    assert (page.title, page.symbol, page.generator) == ("Widgets", "Widgets", "html")
    assert [(s.member, s.headings) for s in page.sections] == [("", ()), ("open", ("open()",)), ("", ("Usage",))]
    text = "\n".join(s.markdown for s in page.sections)
    assert "Home" not in text and "©" not in text


def test_html_deeper_than_the_parser_follows_is_read_as_text():
    html = "<h1>Deep</h1>" + "<div>" * 3000 + "the innermost words" + "</div>" * 3000

    page = read_page(RawPage("deep.html", html, ".html"))

    assert "the innermost words" in "\n".join(s.markdown for s in page.sections)


# -- Markdown at any depth -------------------------------------------------------------------------------


def test_a_markdown_site_page_without_h3_is_cut_at_its_own_headings():
    body = ("# Sessions\n\nHow sessions work.\n\n## Installation\n\nRun pip install.\n\n"
            "## `Session.get(url)`\n\nSend a GET request.\n\n#### Parameters\n\n- url: where\n\n## max_retries\n\n"
            "How many times to retry a failed request.\n")

    page = read_page(RawPage("sessions.md", body, ".md"))

    assert page.kind == "api"
    assert [(s.member, s.headings, s.anchor) for s in page.sections] == [
        ("", (), ""), ("", ("Installation",), "installation"), ("get", ("`Session.get(url)`",), "sessiongeturl"),
        ("get", ("`Session.get(url)`", "Parameters"), "parameters"), ("max_retries", ("max_retries",), "max_retries")]


def test_a_heading_the_page_writes_as_code_is_a_member_and_its_prose_subsections_document_it():
    body = ("# Requests\n\n## Installation\n\nRun pip install.\n\n## Request\n\n```python\nrequest = Request(scope)\n```\n\n"
            "#### Body\n\nAwait `request.json()` for the parsed body.\n\n## Usage\n\nSee above.\n")

    page = read_page(RawPage("requests.md", body, ".md"))

    assert [(s.member, s.headings[-1] if s.headings else "") for s in page.sections] == [
        ("", ""), ("", "Installation"), ("Request", "Request"), ("Request", "Body"), ("", "Usage")]


def test_a_member_heading_in_backticks_is_read_as_its_member():
    body = "# Early hints\n\nIntro.\n\n### `Request.send_early_hints`\n\nSend a 103 response.\n"

    page = read_page(RawPage("early-hints.md", body, ".md"))

    assert [s.member for s in page.sections] == ["", "send_early_hints"]


def test_mkdocs_admonitions_and_tabs_and_docusaurus_admonitions_become_plain_markdown():
    body = ('# Guide\n\n!!! warning "Careful"\n    Do not do this.\n\n=== "Python"\n    ```python\n    run()\n    ```\n\n'
            ":::tip Remember\nSave first.\n:::\n")

    page = read_page(RawPage("guide.md", body, ".md"))

    text = page.sections[0].markdown
    assert "> **Warning: Careful**\n> Do not do this." in text
    assert "**Python**\n```python\nrun()\n```" in text
    assert "> **Tip: Remember**" in text and ":::" not in text


def test_a_site_page_whose_h3_headings_are_prose_is_cut_at_every_heading():
    body = ("# Requests\n\nIntro.\n\n## Using requests\n\nHow to.\n\n### Common patterns\n\nPatterns.\n\n"
            "#### Headers\n\nHeader text.\n\n## CORSMiddleware\n\nAdds CORS headers.\n\n"
            "::: starlette.requests.Request\n    options:\n      show_source: false\n")

    page = read_page(RawPage("requests.md", body, ".md"))

    assert [(s.member, s.headings[-1] if s.headings else "") for s in page.sections] == [
        ("", ""), ("", "Using requests"), ("", "Common patterns"), ("", "Headers"), ("CORSMiddleware", "CORSMiddleware")]
    assert page.sections[-1].markdown.endswith("`starlette.requests.Request`")
    assert "show_source" not in page.sections[-1].markdown


def test_the_reference_shape_keeps_its_h3_members_and_h2_groups():
    body = "# 雾（Fog）\n\n雾会让远处变淡。\n\n## 属性\n\n### .near : Float\n\n默认值为 1。\n"

    page = read_page(RawPage("Fog.md", body, ".md"))

    assert (page.symbol, page.alias) == ("Fog", "雾")
    assert [(s.member, s.headings) for s in page.sections] == [("", ()), ("near", ("属性", ".near : Float"))]


def test_a_page_that_yields_nothing_is_listed_with_its_reason(tmp_path):
    (tmp_path / "genindex.html").write_bytes((FIXTURES / "sphinx" / "click-genindex.html").read_bytes())
    (tmp_path / "empty.md").write_text("", encoding="utf-8")
    (tmp_path / "Page.md").write_text("# Page\n\nSome text.\n", encoding="utf-8")

    documents = read_folder(tmp_path)

    assert skipped_pages(documents) == [{"path": "empty.md", "reason": "no text"},
                                        {"path": "genindex.html", "reason": "index or search page"}]
    assert {c.source for c in chunk_documents(documents)} == {"Page.md"}


def test_a_guide_page_keeps_its_short_sections():
    intro = "Intro text here, long enough to make the page longer than one chunk. " * 12
    document = read_document("guide.md", f"# Guide\n\n{intro}\n\n## Install\n\nRun it.\n", suffix=".md")

    chunks = chunk_documents([document])

    assert document.page.kind == PAGE_GUIDE
    assert list(dict.fromkeys(c.heading_path for c in chunks)) == [("Guide",), ("Guide", "Install")]
    assert chunks[-1].text == "## Install\n\nRun it."


# -- planning on such catalogs ---------------------------------------------------------------------------


@pytest.fixture
def python_catalog(tmp_path):
    (tmp_path / "api.md").write_text(
        "# click\n\n## get_current_context()\n\nReturn the current context.\n\n"
        "## echo(message)\n\nPrint a message.\n", encoding="utf-8")
    return Catalog.from_chunks(chunk_documents(read_folder(tmp_path)))


def test_a_snake_case_member_in_english_prose_is_read_as_that_member(python_catalog):
    plan = Planner(python_catalog).run("how do I call get_current_context from a helper function")

    assert plan.members == ("get_current_context",)


def test_a_page_named_by_a_plain_word_in_english_prose_is_a_hint_and_as_code_a_class(python_catalog):
    planner = Planner(python_catalog)

    prose = planner.run("how do I test a click command that writes files")
    code = planner.run("what does click.echo print to")

    assert (prose.classes, prose.hinted_classes) == ((), ("click",))
    assert code.classes == ("click",)


def test_a_member_written_as_code_on_a_class_that_lacks_it_brings_the_page_that_documents_it(tmp_path):
    (tmp_path / "Response.md").write_text("# Response\n\n### .status : int\n\nThe status code.\n", encoding="utf-8")
    (tmp_path / "exceptions.md").write_text("# exceptions\n\n### abort( status )\n\nRaise an HTTP error.\n",
                                            encoding="utf-8")
    (tmp_path / "Template.md").write_text("# Template\n\n### .render_async()\n\nRender asynchronously.\n",
                                          encoding="utf-8")
    planner = Planner(Catalog.from_chunks(chunk_documents(read_folder(tmp_path))))

    called = planner.run("Can abort() take a Response object instead of a status code?")
    misspelt = planner.run("Templte.render_async needs what setting?")

    assert called.classes == ("Response", "exceptions") and called.members == ("abort",)
    assert misspelt.classes == ("Template",) and ("Templte", "Template") in misspelt.corrections


def test_a_question_writing_the_catalogs_own_members_beside_an_unknown_name_is_about_these_docs(python_catalog):
    planner = Planner(python_catalog)

    beside = planner.run("On HiDPI screens should get_current_context be called first?")
    on_it = planner.run("How do I call HiDPIScreen.get_current_context?")

    assert (beside.kind, beside.members) == ("doc", ("get_current_context",))
    assert on_it.kind == "out_of_catalog"


def test_a_misspelt_name_the_docs_write_is_a_typo_not_an_unknown_api(tmp_path):
    (tmp_path / "templates.md").write_text(
        "# Templates\n\nCreate `templates = Jinja2Templates(directory='templates')` once.\n", encoding="utf-8")
    planner = Planner(Catalog.from_chunks(chunk_documents(read_folder(tmp_path))))

    typo = planner.run("Jinja2Templtes 里怎么加 context processor？")
    missing = planner.run("How do I use the MakoTemplates loader?")

    assert typo.kind == "doc" and ("Jinja2Templtes", "jinja2templates") in typo.corrections
    assert missing.kind == "out_of_catalog"


def test_a_misspelt_snake_case_member_is_corrected_when_no_class_is_named(python_catalog):
    plan = Planner(python_catalog).run("what does get_curent_context return when there is none")

    assert plan.members == ("get_current_context",)
    assert ("get_curent_context", "get_current_context") in plan.corrections


# -- the chitchat gate's calibration by language ---------------------------------------------------------


def test_the_gate_compares_a_question_with_the_probes_of_its_own_language():
    from rag.engine.probes import offtopic_similarity

    manifest = {"offtopic_similarity": 0.86, "offtopic_similarity_by_language": {"en": 0.86, "zh": 0.79}}

    assert offtopic_similarity(manifest, "click 怎么给命令加一个必填选项？") == 0.79
    assert offtopic_similarity(manifest, "How do I make an option required?") == 0.86
    assert offtopic_similarity({"offtopic_similarity": 0.8}, "任何问题") == 0.8  # a version built before


def test_a_knowledge_base_without_members_builds_and_records_its_language(tmp_path, tmp_store, real_embedder):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\nInstall it first.\n\n## Usage\n\nRun it.\n",
                                                encoding="utf-8")
    chunks = chunk_documents(read_folder(tmp_path / "docs"))

    tmp_store.build("kb", "v1", chunks, real_embedder)

    manifest = tmp_store.load_manifest("kb", "v1")
    assert not any(c.member for c in chunks)
    assert manifest["language"] == "en"
    assert set(manifest["offtopic_similarity_by_language"]) == {"en", "zh"}


def test_a_question_in_the_corpus_language_is_the_same_language_and_versions_before_say_nothing():
    from rag.engine.probes import language_gap, same_language

    manifest = {"language": "en", "offtopic_similarity_by_language": {"en": 0.86, "zh": 0.81}}

    assert same_language(manifest, "How do I add an option?") and not same_language(manifest, "怎么加一个选项？")
    assert language_gap(manifest, "怎么加一个选项？") == pytest.approx(0.05)
    assert same_language({}, "怎么加一个选项？") and language_gap({}, "怎么加一个选项？") == 0.0
