"""Evidence within an agent's token budget (issue 33), the same for every face that takes `max_tokens`: the
search's ranked sections (the adopted evidence first, then the next candidates) packed into the budget by
rag.engine.budget, and a cursor that continues from where a response stopped."""

from __future__ import annotations

from infra.errors import ServiceError
from rag.engine.budget import (DEFAULT_MAX_TOKENS, MAX_RESPONSE_TOKENS, MIN_BUDGET, Budgeted, Position,
                               cursor_for, position_of)
from rag.pipeline import get_engine

__all__ = ["DEFAULT_MAX_TOKENS", "MAX_RESPONSE_TOKENS", "MAX_TOKENS_LIMIT", "MIN_BUDGET", "PAGED_CANDIDATES", "Position",
           "call_scope", "checked_max_tokens", "citations_within", "evidence_within", "page_within", "start_of"]

MAX_TOKENS_LIMIT = 100_000  # above MAX_RESPONSE_TOKENS only when asked for
PAGED_CANDIDATES = 50  # ranked sections a cursor can page through


def checked_max_tokens(value, default: int = DEFAULT_MAX_TOKENS) -> int:
    if value is None:
        return default
    if type(value) is not int or not MIN_BUDGET <= value <= MAX_TOKENS_LIMIT:
        raise ServiceError("invalid_max_tokens", f"max_tokens must be an integer from {MIN_BUDGET} to "
                                                 f"{MAX_TOKENS_LIMIT} (responses stay under {MAX_RESPONSE_TOKENS} "
                                                 "unless asked).")
    return value


def call_scope(*, question, kb, sdk_version) -> str:
    """What a cursor is bound to: the question as asked, and the knowledge base and SDK version it names."""
    return f"{kb}\n{sdk_version}\n{question}"


def start_of(cursor, scope: str) -> Position:
    """Where a response starts: the top, or the position a cursor of this same call names; raise invalid_cursor
    for any other cursor (checked before the question is asked)."""
    if cursor is None:
        return Position()
    position = position_of(cursor, scope=scope) if isinstance(cursor, str) and len(cursor) < 200 else None
    if position is None:
        raise ServiceError("invalid_cursor", "cursor is not one this call gave: continue with the same question, "
                                             "knowledge base and version.")
    return position


def page_within(*, kb: str, source: str, sdk_version=None, max_tokens=None, cursor=None) -> dict:
    """A page, or one section of it (`page#anchor`, a result's `link`), within a token budget, with a cursor for the
    rest: what MCP's read tool returns. The knowledge base may be an SDK (read in `sdk_version`, default latest)."""
    from rag.services.knowledge import read_source
    from rag.services.sdk import kb_serving

    budget = checked_max_tokens(max_tokens)
    served = kb_serving(kb, sdk_version)
    scope = f"read\n{served.kb}\n{source}"
    start = start_of(cursor, scope)
    text = read_source(kb=served.kb, source=source)
    packed = get_engine().packer.run([(str(source), text)], budget, start)
    piece = packed.items[0] if packed.items else None
    return {"kb": served.kb, "sdk_version": served.sdk_version or None, "source": source,
            "text": piece.text if piece else "", "complete": bool(piece and piece.complete),
            "dropped_code_blocks": list(piece.dropped_code) if piece else [], "tokens": packed.tokens,
            "max_tokens": budget,
            "cursor": cursor_for(packed.next, scope=scope) if packed.next is not None else None}


def citations_within(answer_text: str, citations: list[dict], *, max_tokens: int) -> tuple[list[dict], int]:
    """An answer's cited sections (`text` of each citation) packed into what `max_tokens` leaves after the answer
    itself, in citation order; each says whether it is `complete` and which code blocks it left out. Returns them
    and the tokens the answer and its citations hold."""
    engine = get_engine()
    counter = engine.token_counter
    answer_tokens = counter.count(answer_text)
    room = max(max_tokens - answer_tokens, 0)
    ranked = [(str(n), citation["text"]) for n, citation in enumerate(citations)]
    packed = engine.packer.run(ranked, room) if room >= MIN_BUDGET // 4 else None
    pieces = {int(piece.chunk_id): piece for piece in packed.items} if packed is not None else {}
    shaped = []
    for n, citation in enumerate(citations):
        piece = pieces.get(n)
        shaped.append({**citation, "text": piece.text if piece else "", "complete": bool(piece and piece.complete),
                       "dropped_code_blocks": list(piece.dropped_code) if piece else []})
    return shaped, answer_tokens + (packed.tokens if packed is not None else 0)


def evidence_within(outcome, *, max_tokens: int, start: Position, scope: str, per_response: int | None = None
                    ) -> tuple[Budgeted, str | None]:
    """The search's ranked sections packed into `max_tokens` from `start` on (at most `per_response` of them),
    and the cursor of the next response (None when nothing is left)."""
    # Nothing adopted (small talk, out of catalog, no evidence): nothing to page through either.
    ranked = [(hit.chunk.chunk_id, hit.chunk.text) for hit in (outcome.candidates or outcome.result.hits)
              ] if outcome.result.hits else []
    if per_response is not None:
        ranked_window = ranked[:start.item + per_response]
    else:
        ranked_window = ranked
    packed = get_engine().packer.run(ranked_window, max_tokens, start)
    following = packed.next
    if following is None and len(ranked_window) < len(ranked):
        following = Position(len(ranked_window), 0)
    left_out = tuple(chunk_id for chunk_id, _ in ranked[following.item:]) if following is not None else ()
    packed = Budgeted(items=packed.items, tokens=packed.tokens, max_tokens=max_tokens, left_out=left_out,
                      next=following)
    return packed, cursor_for(following, scope=scope) if following is not None else None
