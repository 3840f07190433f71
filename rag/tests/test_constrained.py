"""Constrained generation as an engine component: reading the model's indices, the answer text, and the
thinking switch each provider reads."""

from __future__ import annotations

import pytest

from rag.engine.constrained import (HEADER_EN, HEADER_ZH, Candidate, answer_pieces, answer_text, parse_indices,
                                    provider_of, thinking_fields)


@pytest.mark.parametrize(("reply", "expected"), [
    ('{"indices": [2, 1]}', (2, 1)),
    ('```json\n{"indices": [3]}\n```', (3,)),
    ('<think>the third fits</think>{"indices": [3, 3, 1]}', (3, 1)),
    ('{"indices": []}', ()),
    ('{"indices": [1, 2, 3, 4]}', (1, 2)),
])
def test_indices_are_read_deduplicated_and_capped(reply, expected):
    assert parse_indices(reply, count=4, max_items=2 if len(expected) <= 2 else 3) == expected


@pytest.mark.parametrize("reply", ['{"indices": [0]}', '{"indices": [5]}', '{"indices": [1.0]}', '{"indices": [true]}',
                                   '{"indices": "1"}', '[1]', "one", '{"index": [1]}'])
def test_anything_but_candidate_numbers_is_refused(reply):
    with pytest.raises(ValueError):
        parse_indices(reply, count=4, max_items=5)


def test_the_answer_names_the_chosen_candidates_in_the_question_language():
    items = (Candidate("雾（Fog）", "属性 > .far", "…").item, "Fog .near")
    assert answer_text("雾的远处距离？", items) == f"{HEADER_ZH}\n1. 雾（Fog） 属性 > .far\n2. Fog .near"
    assert answer_text("fog far?", items[1:]) == f"{HEADER_EN}\n1. Fog .near"
    assert "".join(answer_pieces(answer_text("fog far?", items))) == answer_text("fog far?", items)


def test_providers_and_their_thinking_fields():
    assert provider_of("https://api.deepseek.com/v1", "deepseek-chat") == "deepseek"
    assert provider_of("http://127.0.0.1:9/v1", "deepseek-v4-flash") == "deepseek"
    assert provider_of("http://vllm:8000/v1", "qwen3") == "openai"
    assert provider_of("http://vllm:8000/v1", "qwen3", "deepseek") == "deepseek"
    assert thinking_fields("deepseek", False) == {"thinking": {"type": "disabled"}}
    assert thinking_fields("deepseek", True) == {"thinking": {"type": "enabled"}}
    assert thinking_fields("openai", False) == {}
    assert thinking_fields("openai", True) == {"chat_template_kwargs": {"enable_thinking": True}}
