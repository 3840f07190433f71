"""The extractive composer (issue 29): each intent kind answered from the structure of the evidence, refusals,
and citations numbered in the order the answer gives them. Fixtures: an invented SDK written here."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from rag.engine.compose import Composer, getters_of, read_intent, read_section, refers_to, setter_of
from rag.engine.generate import CITATION_RE, ExtractiveGenerator
from rag.engine.types import Chunk, Hit, Plan


def hit(class_name: str, member: str, text: str, *, group: str = "Properties", cosine: float = 0.9) -> Hit:
    heading = text.splitlines()[0].lstrip("# ") if text.startswith("#") else ""
    chunk = Chunk(chunk_id=f"{class_name}-{member or group}", source=f"{class_name}.md", title=class_name,
                  class_name=class_name, class_alias="", member=member,
                  heading_path=(class_name, group, heading) if heading else (class_name, group), chunk_index=1, part=0,
                  text=text)
    return Hit(chunk=chunk, score=0.03, source="rrf", raw_score=cosine)


def plan(question: str, classes=(), members=(), inherited=()) -> Plan:
    return Plan(question=question, corrected_question=question, kind="doc", classes=tuple(classes),
                members=tuple(members), inherited=tuple(inherited))


def answer(question: str, hits: list[Hit], **named):
    return ExtractiveGenerator().run(question, plan(question, **named), hits)


LENS_ZOOM = hit("Lens", "zoom", "### .zoom : Float\n\nMagnification of the lens. Default is **1.5**.\n\n"
                "After changing it you must call .refreshProjection() for the change to take effect.")
LENS_DEPTH = hit("Lens", "depth", "### .depth : Float\n\nHow far the lens sees, in metres. Default is **400**.")
LENS_CLOSE = hit("Lens", "close", "### .close : Float\n\nThe closest distance the lens renders. Default is **0.2**.\n\n"
                 "Zero is not a valid value: it must be greater than 0.")
SPRITE_GET = hit("Sprite", "getOpacity", "### .getOpacity () : Float\n\nReturns the opacity of the sprite.",
                 group="Methods")
SPRITE_SET = hit("Sprite", "setOpacity", "### .setOpacity ( value : Float ) : this\n\n"
                 "Sets the opacity of the sprite, from 0 (transparent) to 1.", group="Methods")
SPRITE_OVERVIEW = hit("Sprite", "", "# Sprite\n\nA flat picture that always faces the viewer.\n\n```js\n"
                      "const sprite = new Sprite(picture);\nsprite.setOpacity(0.5);\nstage.add(sprite);\n```",
                      group="Sprite")
TILE_WRAP = hit("Tile", "wrap", "### .wrap : Number\n\nHow the picture repeats across the tile.\n\n"
                "- ClampWrap: the edge pixel is stretched.\n- RepeatWrap: the picture repeats.\n- MirrorWrap: it repeats, "
                "mirrored.\n\nDefault is ClampWrap.")
BASE_VISIBLE = hit("Node", "visible", "### .visible : Boolean\n\nWhether the node is drawn. Default is **true**.")


@pytest.mark.parametrize("question, kinds", [
    ("What is the default zoom of Lens?", {"value"}),
    ("Lens 的 zoom 默认值是多少？", {"value"}),
    ("How do I change the opacity of a Sprite?", {"howto", "change"}),
    ("怎么设置 Sprite 的透明度？", {"howto", "change"}),
    ("Why does my zoom change have no effect?", {"why", "change"}),
    ("close 能设成 0 吗？", {"whether"}),
    ("Which values can Tile.wrap take?", {"options"}),
    ("What parameters does setOpacity take?", {"signature"}),
    ("给个 Sprite 的代码示例", {"code"}),
    ("getOpacity 和 opacity 有什么区别？", {"compare"}),
])
def test_the_intent_is_read_from_the_questions_words(question, kinds):
    assert kinds <= set(read_intent(question).kinds())


def test_a_value_question_states_the_value_its_section_gives():
    result = answer("What is the default zoom of Lens?", [LENS_DEPTH, LENS_ZOOM], classes=["Lens"], members=["zoom"])

    assert result.text.startswith("**Lens.zoom** — `.zoom : Float` [1]")
    assert "Default is **1.5**." in result.text


def test_every_member_asked_gets_its_own_value():
    question = "Lens 的 zoom、depth 和 close 默认分别是多少？"
    result = answer(question, [LENS_ZOOM, LENS_DEPTH, LENS_CLOSE], classes=["Lens"], members=["zoom", "depth", "close"])

    for value in ("1.5", "400", "0.2"):
        assert value in result.text
    assert [c.number for c in result.citations] == [1, 2, 3]


def test_the_follow_up_a_section_requires_is_part_of_the_answer():
    result = answer("How do I change the zoom of a Lens?", [LENS_ZOOM], classes=["Lens"], members=["zoom"])

    assert "you must call .refreshProjection()" in result.text
    assert "Default is **1.5**." in result.text


def test_a_question_to_change_something_leads_with_the_setter_not_the_getter():
    result = answer("How do I set the opacity of a Sprite?", [SPRITE_GET, SPRITE_SET], classes=["Sprite"])

    assert result.text.startswith("**Sprite.setOpacity**")
    assert result.citations[0].chunk_id == SPRITE_SET.chunk.chunk_id and result.citations[0].number == 1


def test_a_question_to_read_something_keeps_the_getter():
    result = answer("How do I get the opacity of a Sprite?", [SPRITE_GET, SPRITE_SET], classes=["Sprite"])

    assert result.text.startswith("**Sprite.getOpacity**")


def test_a_how_to_question_keeps_a_short_code_example_of_the_class_answered():
    result = answer("怎么设置 Sprite 的透明度？", [SPRITE_SET, SPRITE_OVERVIEW], classes=["Sprite"])

    assert result.text.startswith("**Sprite.setOpacity**")
    assert "```js\nconst sprite = new Sprite(picture);" in result.text


def test_a_yes_or_no_question_keeps_the_sentence_that_rules_it_out():
    result = answer("Can close of a Lens be 0?", [LENS_CLOSE, LENS_DEPTH], classes=["Lens"], members=["close"])

    assert "Zero is not a valid value" in result.text


def test_an_options_question_lists_the_options_the_section_gives():
    result = answer("Which values can Tile wrap take?", [TILE_WRAP], classes=["Tile"], members=["wrap"])

    assert all(option in result.text for option in ("ClampWrap", "RepeatWrap", "MirrorWrap"))


def test_each_class_a_question_names_gets_its_best_section():
    question = "How do I make a Lens zoom and a Sprite fade?"
    result = answer(question, [LENS_ZOOM, LENS_DEPTH, SPRITE_SET], classes=["Lens", "Sprite"])

    assert "**Lens.zoom**" in result.text and "**Sprite.setOpacity**" in result.text


def test_an_inherited_member_is_answered_from_the_page_that_documents_it():
    question = "Is a Lens visible by default?"
    result = answer(question, [LENS_DEPTH, BASE_VISIBLE], classes=["Lens", "Node"], members=["visible"],
                    inherited=[("visible", "Node")])

    assert "Lens inherits `visible`" in result.text
    assert "**Node.visible**" in result.text and "Default is **true**." in result.text


def test_evidence_that_does_not_cover_the_question_is_named_as_related_not_as_an_answer():
    question = "How do I sync several players over the network?"
    result = answer(question, [LENS_DEPTH, SPRITE_OVERVIEW])

    assert result.text.startswith("The documentation does not cover this.")
    assert "Related sections (not an answer): Lens.depth, Sprite" in result.text
    assert (result.citations, result.confidence, result.reason) == ((), "none", "not_covered")
    assert not CITATION_RE.search(result.text)


def test_the_refusal_speaks_the_questions_language():
    result = answer("多人联机时怎么同步大家的操作？", [LENS_DEPTH])

    assert result.text.startswith("文档中没有找到回答这个问题的内容。")
    assert "相关内容（不是答案）：Lens.depth" in result.text


def test_citation_numbers_run_1_to_n_in_the_order_the_answer_cites_them():
    question = "What is the default zoom of Lens, and how far does it see?"
    hits = [LENS_CLOSE, LENS_DEPTH, SPRITE_SET, LENS_ZOOM]
    result = answer(question, hits, classes=["Lens"], members=["zoom"])

    numbers = [int(n) for n in CITATION_RE.findall(result.text)]
    assert numbers[0] == 1
    assert sorted(set(numbers)) == list(range(1, len(set(numbers)) + 1))
    assert [c.number for c in result.citations] == list(range(1, len(result.citations) + 1))
    cited = {c.number: c.chunk_id for c in result.citations}
    assert cited[1] == LENS_ZOOM.chunk.chunk_id


def test_the_setter_of_a_getter_or_property():
    assert [setter_of(m) for m in ("getPixelRatio", "isEnabled", "pixelRatio")] == \
        ["setPixelRatio", "setEnabled", "setPixelRatio"]


def test_the_getters_a_setter_points_at():
    assert getters_of("setPixelRatio") == ("getPixelRatio",)
    assert getters_of("setFromCenterAndSize") == ("getCenter", "getSize")
    assert getters_of("setFromAxisAngle") == ("getAxisAngle",)
    assert getters_of("settle") == getters_of("opacity") == getters_of("getSize") == ()


def test_the_composer_never_cites_a_section_it_does_not_quote():
    result = Composer().run("What is the default zoom of Lens?", plan("q", classes=["Lens"], members=["zoom"]),
                            [LENS_ZOOM, SPRITE_OVERVIEW])

    quoted = {int(n) for n in re.findall(r"\[(\d+)\]", result.text)}
    assert quoted == {c.number for c in result.citations}


def test_a_pasted_error_is_answered_from_the_searchs_order_not_refused():
    question = "lens.Exception: RefreshError: projection is stale"
    stale = hit("Lens", "refreshProjection", "### .refreshProjection () : undefined\n\n"
                "Recomputes the view matrix after a change.", group="Methods")  # shares no word with the error
    result = ExtractiveGenerator().run(question, Plan(question=question, corrected_question=question, kind="doc",
                                                      pasted_error=True), [stale, LENS_DEPTH])

    assert result.reason != "not_covered" and result.text.startswith("**Lens.refreshProjection**")


def test_a_how_to_answer_leads_with_the_section_that_shows_what_to_run():
    describes = hit("Keys", "key_format", "### key_format\n\nA test issues a key for the service and checks it.")
    shows = hit("Cli", "key_command", "### key_command\n\n`tool key create` issues a key for the service.")
    question = "How do I issue a key for the service?"

    result = answer(question, [describes, shows])

    assert result.text.startswith("**Cli.key_command**")


def test_a_question_asking_a_value_leads_with_a_section_that_states_one():
    wordy = hit("Archive", "listing", "### .listing\n\nThe archive listing shows each stored snapshot version, its "
                "snapshot time and whether the stored files changed since.", group="Pages")
    stating = hit("Archive", "retention", "### .retention\n\nThe newest versions are kept: 7 by default.", group="Pages")
    question = "How many stored snapshot versions are kept?"

    answer = Composer().run(question, plan(question), [wordy, stating], confidence="medium")

    assert answer.text.index("Archive.retention") < answer.text.index("Archive.listing")



# A constructor documented by its options list, its options' lines mentioning the class and the words of creating
# one more than the option asked about does.
STAGE_NEW = hit("Stage", "Stage", "### Stage ( options : Object )\n\noptions - (optional) how a new Stage draws. "
                "A Stage created without options uses sensible defaults.\n\n"
                + "\n\n".join(f"{name} - {what}. Default is **{value}**." for name, what, value in (
                    ("canvas", "the canvas a new Stage draws into when it is created", "a new canvas"),
                    ("context", "the drawing context a Stage is created on", "null"),
                    ("precision", "the shader precision of a new Stage", "high"),
                    ("alpha", "whether the Stage canvas is created with an alpha channel", "false"),
                    ("dither", "whether to dither colours", "false"),
                    ("stencil", "whether the Stage keeps a stencil buffer", "true"))), group="Constructor")


def test_an_option_the_question_names_is_answered_by_its_own_item():
    # Room for two facts, one chosen by the question's words: the options named take both places.
    generator = ExtractiveGenerator(composer=Composer(max_sentences=1, max_facts=2))
    question = "When a Stage is created, are dither and alpha on by default?"
    result = generator.run(question, plan(question, classes=["Stage"], members=["Stage"]), [STAGE_NEW])

    assert "dither - whether to dither colours. Default is **false**." in result.text
    assert "alpha - whether the Stage canvas is created with an alpha channel" in result.text


@pytest.mark.parametrize("text, refers", [
    (".specular高亮的程度，越高的值越闪亮。默认值为 **30**。", True),  # Chinese prose right after the name
    ("如果 .specular。", True),
    ("See .specularMap for the texture.", False),  # another member whose name begins the same
    ("the specular colour", False),  # a plain word, not `.member`
])
def test_a_section_refers_to_a_member_it_writes_as_dot_name_even_in_chinese_prose(text, refers):
    # Python's \w matches Han characters: an identifier boundary must be ASCII, or "specular高亮" hides the name.
    shininess = hit("Phong", "shininess", f"### .shininess : Float\n\n{text}").chunk
    specular = hit("Phong", "specular", "### .specular : Color\n\nThe highlight colour.").chunk

    assert refers_to(shininess, specular) is refers



def example(*lines: str) -> tuple[str, ...]:
    text = "### .fill ( colour : Color ) : this\n\nFills the board with one colour.\n\n```js\n" + "\n".join(lines) + "\n```"
    return read_section(hit("Board", "fill", text, group="Methods").chunk).code


def test_a_long_code_example_is_shown_up_to_the_statement_that_uses_the_member_answered():
    before, after = [f"const a{n} = {n};" for n in range(6)], [f"const b{n} = {n};" for n in range(14)]
    shown = Composer().shown_code(example(*before, "board.fill( red );", *after), {"fill"})
    assert shown[-3:] == ("board.fill( red );", "…", "```") and shown[1:7] == tuple(before)

    # A comment naming the member describes the statement after it: the example ends with that statement.
    shown = Composer().shown_code(example(*before, "// fill it red", "", "board.paint( red );", *after), {"fill"})
    assert shown[-3:] == ("board.paint( red );", "…", "```")

    late = [f"const c{n} = {n};" for n in range(16)]  # the member's line would be the 17th line of code
    assert Composer().shown_code(example(*late, "board.fill( red );"), {"fill"}) == ()


def test_a_code_examples_blank_lines_do_not_count_against_its_length():
    spaced = "\n\n".join(f"const a{n} = {n};" for n in range(15)).splitlines()  # 15 lines of code, 29 in all
    code = example(*spaced, "board.render();")

    assert Composer().shown_code(code, set()) == code


def test_a_member_ranked_above_a_constructor_the_question_only_alludes_to_is_answered_first():
    question = "Can I raise the number of tiles of a Grid beyond what I passed to the constructor?"
    hits = [hit("Grid", "tiles", "### .tiles : Integer\n\nThe number of tiles. It can be lowered at runtime; for more"
                " tiles than the constructor was given, create a new Grid.", group="Properties"),
            hit("Grid", "Grid", "### Grid ( tiles : Integer )\n\ntiles - the number of tiles.", group="Constructor"),
            hit("Grid", "clear", "### .clear () : this\n\nEmpties every tile.", group="Methods")]

    text = answer(question, hits, classes=["Grid"], members=["Grid"]).text

    assert text.index("**Grid.tiles**") < text.index("**Grid**") and "create a new Grid" in text


def test_a_section_of_another_class_is_answered_in_full_only_when_it_names_the_class_asked_about():
    question = "Why does my DashPen draw solid lines, and what is its default dash length?"
    hits = [hit("DashPen", "dash", "### .dash : Float\n\nThe length of a dash. Default is **3**."),
            hit("Stroke", "measure", "### .measure () : this\n\nComputes the lengths DashPen needs to draw dashes;"
                " without them lines are solid.", group="Methods"),
            hit("Audio", "loop", "### .loop : Boolean\n\nWhether the sound plays again, solid or not. Default is"
                " **false**.")]

    text = answer(question, hits, classes=["DashPen"]).text

    assert "**Stroke.measure**" in text  # its text names DashPen: it is about the class asked about
    assert "**Audio.loop**" not in text  # shares a word, names no class asked about: at most quoted


@pytest.mark.parametrize("question", ["What are the limitations of a GlowLight?", "GlowLight 使用时有哪些限制？"])
def test_asked_for_limitations_the_answer_gives_what_the_docs_rule_out_or_require(question):
    overview = ("# GlowLight\n\nA light that glows from a flat panel, like a bright window.\n\nNotes:\n\n"
                "- Shadows are not supported.\n- Only works with the Standard and Physical materials.\n"
                "- You have to call GlowLib.init() first.\n")
    hits = [hit("GlowLight", "GlowLight", "### GlowLight ( colour : Integer, width : Float )\n\ncolour - the colour."
                " width - the width of the panel. Default is 10.", group="Constructor"),
            hit("GlowLight", "", overview, group="")]

    text = answer(question, hits, classes=["GlowLight"]).text

    assert "not supported" in text and "Only works with the Standard" in text and "GlowLib.init()" in text
    assert read_intent(question).limits and not read_intent("What is the default width of a GlowLight?").limits


def test_a_long_sections_parts_make_one_block_and_a_quote_never_repeats_what_the_answer_gives():
    first = hit("Pen", "stroke", "### .stroke () : this\n\nDraws the current path. Zero-length dashes are drawn as round"
                " dots when the cap is round.", group="Methods")
    second = hit("Pen", "stroke", "Zero-length dashes are drawn as round dots when the cap is round. See .setDash for"
                 " the dash pattern.", group="Methods")
    second = Hit(chunk=replace(second.chunk, chunk_id="Pen-stroke-1", part=1, heading_path=first.chunk.heading_path),
                 score=0.02, source="rrf", raw_score=0.8)

    text = answer("How do I draw round dots in a dash pattern with a Pen?", [first, second], classes=["Pen"]).text

    assert text.count("**Pen.stroke**") == 1  # the second part is not a block of its own
    assert text.count("Zero-length dashes are drawn as round dots") == 1 and "See .setDash" in text


def test_a_later_part_of_a_section_is_not_labelled_with_its_sub_heading():
    part = hit("Pen", "stroke", "#### Parameters\n\nwidth - how wide the stroke is. Default is 2.", group="Methods")
    part = Hit(chunk=replace(part.chunk, part=1), score=0.03, source="rrf", raw_score=0.9)

    text = answer("What is the default stroke width of a Pen?", [part], classes=["Pen"]).text

    assert text.startswith("**Pen.stroke** [1]") and "Parameters" not in text and "Default is 2" in text
