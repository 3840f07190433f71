"""Evidence completion (issue 29): sections the answer needs, followed by the documents' structure, on a small
index of an invented SDK written here."""

from __future__ import annotations

import pytest

from rag.engine.complete import STRUCTURE, Completer
from rag.engine.compose import read_intent
from rag.engine.embed import QueryVectorCache
from rag.engine.generate import ExtractiveGenerator
from rag.engine.index import VersionReader
from rag.engine.ingest import read_folder
from rag.engine.chunk import chunk_documents
from rag.engine.plan import Planner
from rag.engine.search import Searcher
from rag.engine.types import Hit, SearchOptions

PAGES = {
    "Lens.md": """# Lens

A lens that projects the stage onto the screen.

## Properties

Note that after changing any of these properties you have to call .refreshProjection for the change to take effect.

### .zoom : Float

Magnification of the lens. Default is **1.5**.

### .depth : Float

How far the lens sees, in metres. Default is **400**.

## Methods

### .refreshProjection () : undefined

Recomputes the projection from the properties above.
""",
    "Sprite.md": """# Sprite

A flat picture that always faces the viewer.

## Methods

### .getOpacity () : Float

Returns how opaque the sprite is.

### .setOpacity ( value : Float ) : this

Sets how opaque the sprite is, from 0 (transparent) to 1.

### .flip () : this

Mirrors the picture.
""",
    "Lamp.md": """# Lamp

> Inheritance: Glow

A light bulb on the stage.

## Properties

### .halo : LampHalo

The halo drawn around the lamp, see LampHalo.

### .power : Float

Brightness in watts. Default is **60**.
""",
    "LampHalo.md": """# LampHalo

> Inheritance: Halo

The halo of a Lamp.

## Properties

### .spread : Float

How far the halo spreads. Default is **2**.
""",
    "Dial.md": """# Dial

A knob the viewer turns.

## Properties

### .friction : Float

How hard the dial is to turn. Default is **0.2**.

### .coast : Boolean

Set to true to let the dial keep turning after it is let go, whatever its friction. Default is **false**.

### .coastTime : Float

How long the dial keeps turning if .coast is set to true, in seconds. Default is **0.5**.
""",
    "Frame.md": """# Frame

A rectangle that bounds a group of shapes.

## Methods

### .setFromMiddleAndExtent ( middle : Point, extent : Point ) : this

Places the frame so that its middle point and its extent (width and height) are the ones given.

### .getMiddle ( target : Point ) : Point

Returns the middle point of the frame.

### .getExtent ( target : Point ) : Point

Returns the width and height of the frame.
""",
    "Halo.md": """# Halo

The base class of halos.

## Properties

### .textureSize : Number

Width and height of the halo texture in pixels; larger values give a sharper halo resolution. Default is **256**.

### .blur : Float

How soft the halo edge is. Default is **1**.

## Code Example

```js
const halo = new Halo();
halo.blur = 2;
```
""",
}


@pytest.fixture(scope="module")
def reader(tmp_path_factory, real_embedder) -> VersionReader:
    from conftest import make_store

    folder = tmp_path_factory.mktemp("complete")
    for name, text in PAGES.items():
        (folder / "docs").mkdir(exist_ok=True)
        (folder / "docs" / name).write_text(text, encoding="utf-8")
    store = make_store(folder)
    store.build("sdk", "v1", chunk_documents(read_folder(folder / "docs")), real_embedder)
    return VersionReader.open(store, "sdk", "v1")


def hit_of(reader, class_name: str, member: str) -> Hit:
    return Hit(chunk=reader.chunks[reader.section_position(class_name, member)], score=0.03, source="rrf", rank=1)


def complete(reader, question: str, *leading: Hit):
    plan = Planner(reader.catalog).run(question)
    return plan, Completer().run(reader, plan, tuple(leading), reader.tokenize(question), read_intent(question))


def test_the_note_of_a_members_group_that_requires_a_call_is_added(reader):
    _, hits = complete(reader, "How do I change the zoom of a Lens?", hit_of(reader, "Lens", "zoom"))

    added = [h for h in hits if h.source == STRUCTURE]
    assert len(added) == 1 and not added[0].chunk.member  # the page is short: the note shares its first chunk
    assert "## Properties\n\nNote that after changing any of these properties" in added[0].chunk.text


def test_the_setter_of_a_leading_getter_is_added_when_the_question_changes_something(reader):
    _, hits = complete(reader, "How do I set how opaque a Sprite is?", hit_of(reader, "Sprite", "getOpacity"))

    assert [h.chunk.member for h in hits] == ["getOpacity", "setOpacity"]
    assert hits[1].source == STRUCTURE and hits[1].rank == 2


def test_no_setter_is_added_when_the_question_reads_something(reader):
    _, hits = complete(reader, "How do I get how opaque a Sprite is?", hit_of(reader, "Sprite", "getOpacity"))

    assert [h.chunk.member for h in hits] == ["getOpacity"]


def test_a_typed_property_is_followed_to_the_member_of_its_class_or_ancestor_the_question_points_at(reader):
    _, hits = complete(reader, "How do I get a sharper halo resolution for a Lamp?", hit_of(reader, "Lamp", "halo"))

    assert (hits[-1].chunk.class_name, hits[-1].chunk.member, hits[-1].source) == ("Halo", "textureSize", STRUCTURE)


def test_the_answer_gives_the_follow_up_and_the_followed_member(reader, real_embedder):
    searcher = Searcher(reader=reader, queries=QueryVectorCache(real_embedder), planner=Planner(reader.catalog))

    zoom = searcher.run("How do I change the zoom of a Lens?", SearchOptions(complete=True))
    halo = searcher.run("How do I get a sharper halo resolution for a Lamp?", SearchOptions(complete=True))
    plain = searcher.run("How do I change the zoom of a Lens?", SearchOptions(top_k=2))

    assert len(plain.hits) == 2 and all(h.source != STRUCTURE for h in plain.hits)  # a search keeps its top_k

    zoom_answer = ExtractiveGenerator().run(zoom.plan.corrected_question, zoom.plan, list(zoom.hits))
    assert "Default is **1.5**" in zoom_answer.text and "call .refreshProjection" in zoom_answer.text
    halo_answer = ExtractiveGenerator().run(halo.plan.corrected_question, halo.plan, list(halo.hits))
    assert "**Halo.textureSize**" in halo_answer.text and "256" in halo_answer.text


def test_the_leading_classs_code_example_is_added_when_the_question_asks_for_one(reader):
    _, hits = complete(reader, "Give me a code example for Sprite opacity", hit_of(reader, "Sprite", "setOpacity"))

    assert [h.source for h in hits] == ["rrf"]  # the Sprite page has no code: nothing to add


def test_a_code_example_is_added_from_the_leading_class(reader):
    _, hits = complete(reader, "Show an example of a Halo blur", hit_of(reader, "Halo", "blur"))

    added = [h for h in hits if h.source == STRUCTURE]
    assert len(added) == 1 and added[0].chunk.class_name == "Halo" and "```" in added[0].chunk.text


def test_a_setting_that_names_the_leading_member_is_added_and_answered(reader):
    question = "The Dial stops at once though coast is on: why?"
    plan, hits = complete(reader, question, hit_of(reader, "Dial", "coast"))

    added = [h.chunk.member for h in hits if h.source == STRUCTURE]
    assert added == ["coastTime"]  # its section names `.coast`; friction's does not
    answer = ExtractiveGenerator().run(question, plan, list(hits))
    assert "**Dial.coastTime**" in answer.text and "0.5" in answer.text


def test_a_member_named_only_in_prose_is_not_a_dependent(reader):
    # `.coast`'s section says "friction" as a word, not `.friction`: it does not depend on it.
    _, hits = complete(reader, "How hard is the dial to turn?", hit_of(reader, "Dial", "friction"))

    assert [h for h in hits if h.source == STRUCTURE] == []


def test_the_getters_of_a_leading_setter_are_added_and_answered_when_the_question_reads(reader):
    question = "How do I get the middle point and the extent of a Frame?"
    plan, hits = complete(reader, question, hit_of(reader, "Frame", "setFromMiddleAndExtent"))

    assert [h.chunk.member for h in hits if h.source == STRUCTURE] == ["getMiddle", "getExtent"]
    answer = ExtractiveGenerator().run(question, plan, list(hits))
    assert answer.text.startswith("**Frame.getMiddle**") and "**Frame.getExtent**" in answer.text
    assert "**Frame.setFromMiddleAndExtent**" not in answer.text  # the setter gave way to them


def test_no_getter_is_added_when_the_question_changes_something(reader):
    _, hits = complete(reader, "How do I set the middle point of a Frame?", hit_of(reader, "Frame", "setFromMiddleAndExtent"))

    assert [h for h in hits if h.source == STRUCTURE] == []
