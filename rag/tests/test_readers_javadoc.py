"""The Javadoc reader (E1) on real pages of four javadoc layouts (JDK 17, JDK 11, JDK 8, JDK 1.4): a class page
becomes its overview and one section per member detail, with the generator's id as anchor; summary tables and
page chrome go; a package page is a guide; usage, tree and index pages yield nothing."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from rag.engine.catalog import inheritance_of
from rag.engine.docmodel import PAGE_API, PAGE_GUIDE, PAGE_INDEX, DocPage, RawPage
from rag.engine.readers import read_page, reader_for

FIXTURES = Path(__file__).parent / "reader_fixtures" / "javadoc"
PAGES = sorted(path.name for path in FIXTURES.glob("*.html"))
CLASS_PAGES = ["lang3-CloneFailedException.html", "io-IOCase.html", "avalon-Version.html", "resolver-PublicId.html"]
CHROME = ("Skip navigation", "START OF", "END OF", "JavaScript is disabled", "Method Summary", "Constructor Summary",
          "Enum Constant Summary", "Methods inherited from", "Method Detail", "Constructor Detail", "Summary:",
          "Detail:", "Fields | Constructors", "Nested |", "SEARCH:", "All Classes", "PREV CLASS", "FRAMES", "Copyright",
          "All Rights Reserved", "Overview", "Deprecated</a>", "<!--", "navbar")


def raw(name: str) -> RawPage:
    # The path says nothing about the generator: detection reads the page.
    return RawPage(path=f"docs/{name}", text=(FIXTURES / name).read_text(encoding="utf-8"), suffix=".html")


def read(name: str) -> DocPage:
    return read_page(raw(name))


def members(page: DocPage, name: str) -> list:
    return [section for section in page.sections if section.member == name]


@pytest.mark.parametrize("name", PAGES)
def test_every_javadoc_page_is_claimed_by_the_javadoc_reader(name):
    assert reader_for(raw(name)).name == "javadoc"
    assert read(name).generator == "javadoc"


def test_a_page_without_the_generator_tag_is_recognised_by_its_markup():
    generator = '<meta name="generator" content="javadoc/ClassWriterImpl">'
    text = raw("lang3-CloneFailedException.html").text.replace(generator, "")
    assert "generator" not in text
    assert reader_for(RawPage("x.html", text, ".html")).name == "javadoc"


def test_a_plain_html_page_is_not_taken_for_javadoc():
    text = "<html><head><title>Notes</title></head><body><h1>Notes</h1><p>See package-summary.html.</p></body></html>"
    assert reader_for(RawPage("api/org/x/package-summary.html", text, ".html")).name != "javadoc"


@pytest.mark.parametrize("name, title, symbol, kind, qualified", [
    ("lang3-CloneFailedException.html", "Class CloneFailedException", "CloneFailedException", "class",
     "org.apache.commons.lang3.exception.CloneFailedException"),
    ("io-IOCase.html", "Enum IOCase", "IOCase", "enum", "org.apache.commons.io.IOCase"),
    ("avalon-Version.html", "Class Version", "Version", "class", "org.apache.avalon.framework.Version"),
    ("resolver-PublicId.html", "Class PublicId", "PublicId", "class", "org.apache.xml.resolver.helpers.PublicId"),
])
def test_a_class_page_is_an_api_page_named_by_its_class_and_opens_with_its_overview(name, title, symbol, kind,
                                                                                    qualified):
    page = read(name)
    assert (page.title, page.symbol, page.kind, page.skipped) == (title, symbol, PAGE_API, "")
    overview = page.sections[0]
    assert (overview.kind, overview.member, overview.owner, overview.symbol) == (kind, "", symbol, qualified)
    assert f"```java\n{overview.signature}\n```" in overview.markdown
    assert all(section.owner == symbol for section in page.sections)


def test_the_overview_holds_the_description_the_declaration_and_the_implemented_interfaces():
    overview = read("lang3-CloneFailedException.html").sections[0]
    assert overview.anchor == "class-description"
    assert overview.signature == "public class CloneFailedException extends RuntimeException"
    assert "All Implemented Interfaces: Serializable" in overview.markdown.splitlines()
    assert "Exception thrown when a clone cannot be created." in overview.markdown
    assert "**Since:** 3.0" in overview.markdown


@pytest.mark.parametrize("name, line, ancestors", [
    ("lang3-CloneFailedException.html", "Inheritance: Object → Throwable → Exception → RuntimeException",
     ["RuntimeException", "Exception", "Throwable", "Object"]),
    ("io-IOCase.html", "Inheritance: Object → Enum", ["Enum", "Object"]),
    ("avalon-Version.html", "Inheritance: Object", ["Object"]),
    ("resolver-PublicId.html", "Inheritance: Object", ["Object"]),
])
def test_the_overview_says_what_the_class_inherits_in_a_line_the_catalog_reads(name, line, ancestors):
    page = read(name)
    overview = page.sections[0].markdown
    assert overview.splitlines()[0] == line
    assert inheritance_of(overview, page.symbol) == ancestors


@pytest.mark.parametrize("name, anchor, member, kind, signature, symbol", [
    ("lang3-CloneFailedException.html", "<init>(java.lang.String)", "CloneFailedException", "constructor",
     "public CloneFailedException(String message)",
     "org.apache.commons.lang3.exception.CloneFailedException.CloneFailedException(java.lang.String)"),
    ("io-IOCase.html", "checkIndexOf(java.lang.String,int,java.lang.String)", "checkIndexOf", "method",
     "public int checkIndexOf(java.lang.String str, int strStartIndex, java.lang.String search)",
     "org.apache.commons.io.IOCase.checkIndexOf(java.lang.String,int,java.lang.String)"),
    ("io-IOCase.html", "SYSTEM", "SYSTEM", "enum constant", "public static final IOCase SYSTEM",
     "org.apache.commons.io.IOCase.SYSTEM"),
    ("avalon-Version.html", "getVersion-java.lang.String-", "getVersion", "method",
     "public static Version getVersion(java.lang.String version) throws java.lang.NumberFormatException, "
     "java.lang.IllegalArgumentException", "org.apache.avalon.framework.Version.getVersion(java.lang.String)"),
    ("resolver-PublicId.html", "normalize(java.lang.String)", "normalize", "method",
     "public static java.lang.String normalize(java.lang.String publicId)",
     "org.apache.xml.resolver.helpers.PublicId.normalize(java.lang.String)"),
])
def test_each_member_detail_becomes_a_section_with_the_generators_anchor_signature_and_kind(
        name, anchor, member, kind, signature, symbol):
    section = next(s for s in read(name).sections if s.anchor == anchor)
    assert (section.member, section.kind, section.signature, section.symbol) == (member, kind, signature, symbol)
    assert section.markdown.startswith(f"### {signature}\n\n")
    assert f'="{html.escape(anchor, quote=False)}"' in raw(name).text  # the page's own id (or name) for it


def test_a_members_description_and_tags_are_clean_markdown():
    check = members(read("io-IOCase.html"), "checkIndexOf")[0].markdown
    assert "Checks if one string contains another starting at a specific index" in check
    assert "**Parameters:**\n\n- `str` - the string to check" in check
    assert "**Returns:** the first index of the search String, -1 if no match or `null` string input" in check
    assert "**Throws:** `java.lang.NullPointerException` - if either string is null" in check
    version = members(read("avalon-Version.html"), "getVersion")[0].markdown
    assert "**Throws:**\n\n- `java.lang.NumberFormatException` - if an error occurs" in version
    assert "**Since:** 4.1" in version
    normalize = members(read("resolver-PublicId.html"), "normalize")[0].markdown
    assert "- Leading and trailing whitespace is removed." in normalize
    assert "**Returns:** The normalized identifier." in normalize


def test_code_in_a_description_stays_one_java_code_block():
    values = members(read("io-IOCase.html"), "values")[0].markdown
    # The page indents the loop's body with `&nbsp;   `: a space in the code block.
    assert "```java\nfor (IOCase c : IOCase.values())\n    System.out.println(c);\n```" in values


@pytest.mark.parametrize("name, member, anchors", [
    ("io-IOCase.html", "isCaseSensitive", ["isCaseSensitive(org.apache.commons.io.IOCase)", "isCaseSensitive()"]),
    ("avalon-Version.html", "equals", ["equals-org.apache.avalon.framework.Version-", "equals-java.lang.Object-"]),
    ("lang3-CloneFailedException.html", "CloneFailedException",
     ["<init>(java.lang.String)", "<init>(java.lang.Throwable)", "<init>(java.lang.String,java.lang.Throwable)"]),
])
def test_overloads_stay_separate_sections_with_their_own_anchors(name, member, anchors):
    assert [section.anchor for section in members(read(name), member)] == anchors


def test_only_the_details_make_members_not_the_summary_tables_or_the_inherited_lists():
    page = read("io-IOCase.html")
    assert [s.member for s in page.sections[1:]] == [
        "SENSITIVE", "INSENSITIVE", "SYSTEM", "values", "valueOf", "isCaseSensitive", "forName", "getName",
        "isCaseSensitive", "checkCompareTo", "checkEquals", "checkStartsWith", "checkEndsWith", "checkIndexOf",
        "checkRegionMatches", "toString"]
    assert not members(page, "ordinal") and not members(page, "hashCode")  # inherited from Enum and Object
    assert len(read("lang3-CloneFailedException.html").sections) == 1 + raw(
        "lang3-CloneFailedException.html").text.count('<section class="detail"')


@pytest.mark.parametrize("name", PAGES)
def test_no_section_carries_navigation_summaries_comments_or_the_footer(name):
    for section in read(name).sections:
        for chrome in CHROME:
            assert chrome not in section.markdown, (name, section.anchor, chrome)


def test_a_package_page_is_a_guide_with_its_description():
    page = read("io-function-package-summary.html")
    assert (page.title, page.symbol, page.kind, page.skipped) == (
        "Package org.apache.commons.io.function", "org.apache.commons.io.function", PAGE_GUIDE, "")
    assert [s.markdown for s in page.sections] == [
        "This package defines IO-only related functional interfaces for lambda expressions and method references."]


def test_a_usage_page_is_an_index_that_yields_nothing():
    page = read("lang3-class-use-CloneFailedException.html")
    assert (page.kind, page.skipped, page.sections) == (PAGE_INDEX, "usage index", ())
    assert page.title == "Uses of Class org.apache.commons.lang3.exception.CloneFailedException"
