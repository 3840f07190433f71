"""Ingest (E1) and chunking (E2): class names from titles, members from `###`, splitting with overlap."""

from __future__ import annotations

import os
import re

import pytest

from rag.engine.chunk import (
    Chunker,
    chunk_documents,
    class_alias_of,
    class_name_of,
    member_of,
    page_summary,
    split_text,
)
from rag.engine.ingest import IngestError, html_to_markdown, read_folder
from rag.engine.text import sha1
from rag.engine.types import SourceDocument

FENCE = re.compile(r"^\s{0,3}```", re.MULTILINE)


def make_document(text: str, path: str = "Page.md") -> SourceDocument:
    return SourceDocument(path=path, title=path.rsplit(".", 1)[0], text=text, content_hash=sha1(text))


def make_prose(lines: int, width: int = 30) -> str:
    """Numbered lines of distinct prose, each `width` characters long."""
    return "\n".join(f"第{n:03d}行：" + "说明文字" * (width // 4) for n in range(lines))


def make_code(lines: int, width: int = 40) -> str:
    """A fenced block of `lines` distinct lines, each exactly `width` characters long."""
    body = "\n".join(f"v{n:03d} = " + "a" * (width - 7) for n in range(lines))
    return f"```js\n{body}\n```"


def fences_balanced(piece: str) -> bool:
    return len(FENCE.findall(piece)) % 2 == 0


def chunks_of(fixture_corpus, path: str):
    document = next(d for d in read_folder(fixture_corpus) if d.path == path)
    return Chunker().run(document)


# -- class names, aliases and members ----------------------------------------------------------------


@pytest.mark.parametrize(
    "title, class_name, alias",
    [
        ("透视相机（PerspectiveCamera）", "PerspectiveCamera", "透视相机"),
        ("透视相机(PerspectiveCamera)", "PerspectiveCamera", "透视相机"),
        ("光线投射Raycaster", "Raycaster", "光线投射"),
        ("WebGL渲染器（WebGLRenderer）", "WebGLRenderer", "WebGL渲染器"),
        ("多细节层次（LOD，Levels of Detail）", "LOD", "多细节层次"),
        ("Color", "Color", ""),
        ("快速入门", "快速入门", ""),
    ],
)
def test_class_name_and_alias_come_from_the_page_title(title, class_name, alias):
    assert (class_name_of(title), class_alias_of(title, class_name_of(title))) == (class_name, alias)


@pytest.mark.parametrize(
    "heading, member",
    [
        (".setPixelRatio ( value : number ) : undefined", "setPixelRatio"),
        (".fov : Float", "fov"),
        (".updateProjectionMatrix () : undefined", "updateProjectionMatrix"),
        (".shadowMap.enabled : Boolean", "enabled"),
        ("PerspectiveCamera( fov : Number, aspect : Number )", "PerspectiveCamera"),
        ("PerspectiveCamera ( fov : Number )", "PerspectiveCamera"),
        ("search_stdin（批量提问）", "search_stdin"),
        ("RAG_DATA_DIR：数据目录", "RAG_DATA_DIR"),
        ("示例", ""),
        ("1. 安装", ""),
        ("Example usage", ""),
        ("", ""),
    ],
)
def test_member_is_the_identifier_of_a_member_heading(heading, member):
    assert member_of(heading) == member


# -- chunking pages ----------------------------------------------------------------------------------


def test_text_before_the_first_member_heading_is_a_chunk_of_its_own(fixture_corpus):
    chunks = chunks_of(fixture_corpus, "PerspectiveCamera.md")

    preamble = chunks[0]

    assert (preamble.member, preamble.heading_path, preamble.part) == ("", ("透视相机（PerspectiveCamera）",), 0)
    assert "> 分类：相机" in preamble.text
    assert "透视相机按照人眼的方式观察场景" in preamble.text
    assert "### " not in preamble.text


def test_each_member_heading_becomes_a_chunk_with_its_heading_path(fixture_corpus):
    chunks = chunks_of(fixture_corpus, "PerspectiveCamera.md")

    by_member = {c.member: c for c in chunks}

    assert [c.member for c in chunks] == [
        "", "PerspectiveCamera", "fov", "aspect", "near", "far", "zoom", "updateProjectionMatrix", "setFocalLength",
    ]
    assert by_member["fov"].heading_path == ("透视相机（PerspectiveCamera）", "属性", ".fov : Float")
    assert by_member["fov"].text.startswith("### .fov : Float")
    assert "默认值为 50" in by_member["fov"].text
    assert "```js\ncamera.aspect" in by_member["updateProjectionMatrix"].text
    assert {(c.class_name, c.class_alias) for c in chunks} == {("PerspectiveCamera", "透视相机")}


def test_chunk_positions_and_ids_are_unique_and_stable(fixture_corpus):
    first = chunks_of(fixture_corpus, "OrbitControls.md")

    second = chunks_of(fixture_corpus, "OrbitControls.md")

    assert [c.chunk_id for c in first] == [c.chunk_id for c in second]
    assert len({c.chunk_id for c in first}) == len(first)
    assert [c.chunk_index for c in first] == list(range(len(first)))


def test_a_page_without_member_headings_shorter_than_a_chunk_is_one_chunk():
    document = make_document("# 快速入门\n\n先安装依赖。\n\n## 安装\n\n运行安装命令即可。\n")

    chunks = Chunker().run(document)

    assert len(chunks) == 1
    assert (chunks[0].class_name, chunks[0].member) == ("快速入门", "")
    assert "运行安装命令即可" in chunks[0].text


def test_a_longer_page_without_member_headings_is_cut_at_its_own_headings():
    document = make_document("# 快速入门\n\n先安装依赖。\n\n## 安装\n\n" + "运行安装命令即可。" * 100 + "\n\n## 配置\n\n写好配置文件。\n")

    chunks = Chunker().run(document)

    assert list(dict.fromkeys(c.heading_path for c in chunks)) == [("快速入门",), ("快速入门", "安装"), ("快速入门", "配置")]
    assert chunks[-1].text == "## 配置\n\n写好配置文件。"


def test_a_release_notes_page_is_read_as_one_by_its_version_headings():
    releases = "".join(f"## {v} (May {n}, 2026)\n\n" + f"Fixed `Session.get` in {v}. " * 40 + "\n\n"
                       for n, v in enumerate(("2.1.0", "2.0.1", "2.0.0"), start=1))
    notes = Chunker().run(make_document(f"# Release notes\n\n{releases}", "release-notes.md"))
    history = Chunker().run(make_document("# History\n\n" + "How the project began. " * 40
                                          + "\n\n## 1.0.0\n\nThe first release.\n\n## Later\n\nMore.\n"))

    assert {c.kind for c in notes if c.heading_path[1:]} == {"changelog"}
    assert "changelog" not in {c.kind for c in history}


def test_a_member_heading_in_release_notes_is_a_changelog_entry():
    # Starlette's release notes: `### Fixed` under each version, and now and then `### StaticFiles`, a class the
    # page writes as code; that entry says what changed in StaticFiles, it does not document it.
    releases = "".join(f"## {v} (May {n}, 2026)\n\n### Fixed\n\n" + f"* Fixed `Session.get` in {v}.\n" * 3 + "\n"
                       for n, v in enumerate(("2.1.0", "2.0.1", "2.0.0"), start=1))
    releases += "## 1.9.0 (April 1, 2026)\n\n### StaticFiles\n\n* `StaticFiles` no longer reads files for `HEAD`.\n"
    notes = Chunker().run(make_document(f"# Release notes\n\n{releases}", "release-notes.md"))

    assert [(c.member, c.kind) for c in notes][-1] == ("StaticFiles", "changelog")
    assert {c.kind for c in notes} == {"changelog"}


def test_headings_without_body_make_no_chunk(fixture_chunks):
    headings_only = [c for c in fixture_chunks if all(not line.strip() or line.startswith("#")
                                                       for line in c.text.splitlines())]

    assert headings_only == []


def test_a_long_member_is_split_into_numbered_parts_with_whole_fences(fixture_corpus):
    chunks = chunks_of(fixture_corpus, "WebGLRenderer.md")

    parts = [c for c in chunks if c.member == "shadowMap"]

    assert len(parts) >= 2
    assert [p.part for p in parts] == list(range(len(parts)))
    assert {p.heading_path for p in parts} == {("WebGL渲染器（WebGLRenderer）", "属性", ".shadowMap : WebGLShadowMap")}
    assert all(len(p.text) <= 800 for p in parts)
    assert all(fences_balanced(p.text) for p in parts)
    assert "castShadow" in parts[-1].text


def test_the_fixture_corpus_stays_small(fixture_chunks):
    assert 40 <= len(fixture_chunks) < 80


def test_member_chunks_carry_the_page_summary_in_their_embedding_text(fixture_corpus):
    chunks = chunks_of(fixture_corpus, "Fog.md")

    near = next(c for c in chunks if c.member == "near")

    assert page_summary(chunks[0].text) == "雾会让远处的物体逐渐融入一种颜色，用来表现空气的深度感。雾的浓度随距离线性增加。"
    assert {c.summary for c in chunks} == {page_summary(chunks[0].text)}
    assert near.embedding_text.startswith("雾 Fog | 属性 > .near : Float\n雾会让远处的物体")
    assert near.embedding_text.endswith(near.text)


# -- boilerplate across a corpus ---------------------------------------------------------------------

CLASSES = ["Fog", "FogExp2", "Box3", "Sphere", "Plane", "Ray", "Line3", "Triangle", "Euler", "Quaternion", "Matrix3",
           "Matrix4"]


MEMBER_NOTES = ["浓度随距离线性变化", "浓度按指数增长", "描述一个轴对齐的盒子", "由球心和半径确定", "用法线和常数表示",
                "有起点和方向", "连接两个端点", "由三个顶点组成", "按顺序绕三个轴旋转", "用四个数表示旋转而不会万向锁",
                "是三行三列的矩阵", "常用来保存物体的变换"]


def make_corpus_page(number: int, name: str, *, tail: str) -> SourceDocument:
    """One of a dozen small pages whose own text differs, followed by `tail`."""
    text = (f"# {name}\n\n{name} {MEMBER_NOTES[number]}。\n\n## 属性\n\n"
            f"### .value{number} : Number\n\n这个属性{MEMBER_NOTES[number]}。\n{tail}")
    return make_document(text, path=f"{name}.md")


def test_a_footer_repeated_on_many_pages_is_dropped():
    footer = "\n本页由 SDK 文档组维护，转载请注明出处。\n"
    documents = [make_corpus_page(n, name, tail=footer) for n, name in enumerate(CLASSES)]

    chunks = chunk_documents(documents)

    assert not any("转载请注明出处" in c.text for c in chunks)
    assert sum(1 for c in chunks if c.member.startswith("value")) == len(CLASSES)


def test_a_short_pointer_section_is_dropped():
    pointer = "\n## 参见\n\n参见基类的说明。\n"
    documents = [make_corpus_page(n, name, tail=pointer) for n, name in enumerate(CLASSES)]

    chunks = chunk_documents(documents)

    assert not any("参见" in c.heading_path for c in chunks)


def test_a_templated_last_member_is_not_mistaken_for_a_footer():
    documents = [make_corpus_page(n, name, tail=f"\n## 方法\n\n### .clone () : {name}\n\n返回一个与当前 {name} 参数相同的新对象。\n")
                 for n, name in enumerate(CLASSES)]

    chunks = chunk_documents(documents)

    assert sum(1 for c in chunks if c.member == "clone") == len(CLASSES)


ENGLISH_NOTES = [
    "Call update after you change the target of the orbit camera.",
    "Shadows cost a lot of time when a scene holds many lights.",
    "Textures must be powers of two on some older mobile devices.",
    "Dispose of geometries you no longer need to free graphics memory.",
    "Raycasting against skinned meshes uses the bind pose of the mesh.",
    "Set the pixel ratio before the size to avoid a blurry canvas.",
    "Orbit controls need an update call inside the animation loop too.",
    "Colors are stored in linear space unless you configure it otherwise.",
    "Clock deltas grow very large when the browser tab was hidden.",
    "Lights added after the first frame may force slow shader rebuilds.",
    "The far plane value changes the precision of the depth buffer.",
    "Fog colour should match the background colour of the whole page.",
]


def test_page_specific_english_notes_are_not_taken_for_boilerplate():
    documents = [make_document(f"# Thing{n}\n\nIntro of thing {n}.\n\n## Properties\n\n### .value : Number\n\n"
                               f"The value of thing {n}.\n\n## Notes\n\n{note}\n", path=f"Thing{n}.md")
                 for n, note in enumerate(ENGLISH_NOTES)]

    chunks = chunk_documents(documents)

    assert sum(1 for c in chunks if c.heading_path[1:] == ("Notes",)) == len(ENGLISH_NOTES)


# -- split_text --------------------------------------------------------------------------------------


def test_short_text_is_not_split():
    text = make_prose(5)

    assert split_text(text) == [text]


def test_split_pieces_are_at_most_800_characters():
    text = make_prose(120)

    pieces = split_text(text)

    assert len(pieces) > 3
    assert max(len(p) for p in pieces) <= 800


def test_neighbouring_pieces_overlap_by_about_200_characters():
    text = make_prose(120)

    pieces = split_text(text)

    starts = [text.index(p) for p in pieces]
    overlaps = [starts[i] + len(pieces[i]) - starts[i + 1] for i in range(len(pieces) - 1)]
    assert all(180 <= overlap <= 260 for overlap in overlaps), overlaps
    assert starts[0] == 0 and starts[-1] + len(pieces[-1]) == len(text)


def test_a_code_block_is_not_cut_when_a_boundary_outside_it_exists():
    code = make_code(8)
    text = make_prose(18) + "\n\n" + code + "\n\n" + make_prose(18)

    pieces = split_text(text)

    assert len(pieces) > 1
    assert any(code in p for p in pieces)
    assert all(fences_balanced(p) for p in pieces)
    assert not any(p.startswith("```\n") for p in pieces)  # no piece needed a reopened fence


def test_a_piece_cut_inside_a_giant_code_block_reopens_and_closes_its_fence():
    text = "说明。\n\n" + make_code(80) + "\n\n结尾。"

    pieces = split_text(text)

    assert len(pieces) >= 3
    assert all(fences_balanced(p) for p in pieces)
    assert all(p.startswith("```") for p in pieces[1:])
    assert all(p.endswith("```") for p in pieces[:-1])
    assert pieces[-1].endswith("结尾。")


def test_pieces_cut_inside_a_giant_code_block_are_still_at_most_800_characters():
    text = make_code(80, width=31)

    pieces = split_text(text)

    assert max(len(p) for p in pieces) <= 800


def test_a_long_paragraph_without_line_breaks_is_split_without_adding_code_fences():
    text = "这是一段很长的说明文字，没有换行。" * 120

    pieces = split_text(text)

    assert len(pieces) > 1
    assert not any("```" in p for p in pieces)


# -- HTML pages --------------------------------------------------------------------------------------


def test_html_pages_keep_their_headings_and_code_fences(fixture_corpus):
    html = (fixture_corpus / "html" / "Light.html").read_text(encoding="utf-8")

    markdown = html_to_markdown(html)

    assert markdown.startswith("# 光源（Light）\n")
    assert "\n## 构造器\n" in markdown
    assert "\n### .intensity : Float\n" in markdown
    assert "\n```js\nlight.dispose();\nscene.remove( light );\n```\n" in markdown
    assert "> 分类：光源" in markdown
    assert "tracking" not in markdown  # <script> dropped
    assert "首页" not in markdown  # <nav> dropped


def test_html_deeper_headings_become_members_and_a_missing_h1_comes_from_the_title():
    html = "<html><head><title>雾（Fog）</title></head><body><h4>.near : Float</h4><p>默认值为 1。</p></body></html>"

    markdown = html_to_markdown(html)

    assert markdown == "# 雾（Fog）\n\n### .near : Float\n\n默认值为 1。\n"


def test_an_html_page_chunks_like_a_markdown_page(fixture_corpus):
    chunks = chunks_of(fixture_corpus, "html/Light.html")

    assert [c.member for c in chunks] == ["", "Light", "intensity", "color", "dispose"]
    assert {c.class_name for c in chunks} == {"Light"}


# -- reading a folder --------------------------------------------------------------------------------


def test_read_folder_reads_markdown_and_html_pages_in_order(fixture_corpus):
    documents = read_folder(fixture_corpus)

    paths = [d.path for d in documents]
    assert paths == sorted(paths)
    assert "html/Light.html" in paths and "PerspectiveCamera.md" in paths
    assert {d.path: d.title for d in documents}["Raycaster.md"] == "光线投射Raycaster"


def test_read_folder_skips_hidden_files_and_links_leading_outside(tmp_path):
    root, outside = tmp_path / "kb", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    outside.mkdir()
    (root / "Fog.md").write_text("# 雾（Fog）\n", encoding="utf-8")
    (root / "sub" / "Light.html").write_text("<h1>光源（Light）</h1>", encoding="utf-8")
    (root / "notes.txt").write_text("not a page", encoding="utf-8")
    (root / ".draft.md").write_text("# Draft\n", encoding="utf-8")
    (root / ".git" / "HEAD.md").write_text("# Git\n", encoding="utf-8")
    (outside / "secret.md").write_text("# Secret\n", encoding="utf-8")
    os.symlink(outside / "secret.md", root / "Secret.md")
    os.symlink(outside, root / "linked")
    os.symlink(root / "Fog.md", root / "FogAgain.md")

    documents = read_folder(root)

    assert [d.path for d in documents] == ["Fog.md", "FogAgain.md", "sub/Light.html"]


def test_read_folder_refuses_a_missing_folder(tmp_path):
    with pytest.raises(IngestError):
        read_folder(tmp_path / "missing")


def test_content_hash_is_stable_and_follows_the_raw_file(corpus_copy):
    first = {d.path: d.content_hash for d in read_folder(corpus_copy)}
    again = {d.path: d.content_hash for d in read_folder(corpus_copy)}
    (corpus_copy / "Fog.md").write_text("# 雾（Fog）\n\n改过的说明。\n", encoding="utf-8")

    changed = {d.path: d.content_hash for d in read_folder(corpus_copy)}

    assert first == again
    assert first["html/Light.html"] == sha1((corpus_copy / "html" / "Light.html").read_text(encoding="utf-8"))
    assert {p for p in first if first[p] != changed[p]} == {"Fog.md"}


@pytest.mark.parametrize("text", [
    " ".join(f"word{n} retrieval application" for n in range(200)),  # one long English line, no full stops
    "The gap between two cells, in pixels. " * 60,  # one long line of sentences
    "这是一段很长的中文说明，没有换行也没有空格" * 80,  # Chinese, clauses only
])
def test_a_line_longer_than_a_piece_is_cut_between_words_never_inside_one(text):
    pieces = split_text(text)

    assert len(pieces) > 1 and max(len(p) for p in pieces) <= 800
    words = set(re.findall(r"[A-Za-z0-9]+", text))
    assert all(set(re.findall(r"[A-Za-z0-9]+", p)) <= words for p in pieces)  # no piece starts or ends mid-word
    if "." in text:
        assert all(p.rstrip().endswith(".") for p in pieces[:-1])  # cut after a sentence
    if "，" in text:
        assert all(p.endswith("，") for p in pieces[:-1])  # cut after a clause
