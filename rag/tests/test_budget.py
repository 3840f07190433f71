"""Issue 33: evidence packed into a token budget (rag.engine.budget), with the character counter (no model)."""

from __future__ import annotations

from rag.engine.budget import (BudgetPacker, CharacterTokenCounter, Position, blocks_of, cursor_for,
                               position_of)

SECTION = ("### .render ( scene ) : undefined\n\nDraws the scene once. It clears the canvas first. Then it draws "
           "every object.\n\n```js\nviewer.render(scene);\n\nviewer.render(other);\n```\n\nA last paragraph.")
RANKED = [("a", SECTION), ("b", "### .b\n\nShort one."), ("c", "### .c\n\nAnother one.")]
COUNTER = CharacterTokenCounter()


def test_blocks_keep_a_code_block_whole_even_with_blank_lines_inside():
    blocks = blocks_of(SECTION)
    assert [is_code for _, is_code in blocks] == [False, False, True, False]
    assert blocks[2][0] == "```js\nviewer.render(scene);\n\nviewer.render(other);\n```"


def test_a_budget_is_kept_cut_at_sentences_and_a_code_block_that_does_not_fit_is_named_not_split():
    for budget in (40, 60, 80, 120):
        packed = BudgetPacker(COUNTER).run(RANKED, budget)
        assert packed.tokens <= budget
        assert sum(COUNTER.count(piece.text) for piece in packed.items) <= budget
        assert all(piece.text.count("```") in (0, 2) for piece in packed.items)
    cut = BudgetPacker(COUNTER).run(RANKED, 40)
    assert cut.items[0].text.endswith("Draws the scene once.") and not cut.items[0].complete
    named = BudgetPacker(COUNTER).run(RANKED, 60)
    assert named.items[0].dropped_code == ("```js …",)


def test_pages_from_the_cursor_cover_every_section_in_order():
    packer, start, seen = BudgetPacker(COUNTER), Position(), []
    for _ in range(20):
        packed = packer.run(RANKED, 45, start)
        seen += [piece.chunk_id for piece in packed.items]
        if packed.next is None:
            break
        start = packed.next
    assert list(dict.fromkeys(seen)) == ["a", "b", "c"]


def test_a_budget_smaller_than_one_sentence_still_moves_on():
    long_sentence = "word " * 200
    packed = BudgetPacker(COUNTER).run([("x", long_sentence), ("y", "Short.")], 30)
    assert packed.items[0].text.endswith("…") and packed.next == Position(1, 0)


def test_a_cursor_names_its_position_only_for_its_own_call():
    cursor = cursor_for(Position(3, 2), scope="kb\n\nquestion")
    assert position_of(cursor, scope="kb\n\nquestion") == Position(3, 2)
    assert position_of(cursor, scope="kb\n\nanother question") is None
    assert position_of("not a cursor", scope="kb\n\nquestion") is None
