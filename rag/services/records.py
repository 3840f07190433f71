"""The one recording policy (E12): what a request record holds and how its outcome is decided.

Only the question service (`rag.services.questions`) writes request records, once per request, for a
success and for every failure alike; the ops site, alerts and reports read `outcome` instead of deciding
again from the raw fields.
"""

from __future__ import annotations

import math
import re
import uuid
from typing import TYPE_CHECKING

from infra.errors import ServiceError
from rag.models import RequestRecord

if TYPE_CHECKING:
    from rag.engine.types import Answer, SearchResult

SURROGATE_RE = re.compile("[\ud800-\udfff]")
MAX_QUESTION_CHARS = 2000


def _invisible_ranges() -> list[tuple[int, int]]:
    """The code points that show nothing besides white space: control (Cc) and format (Cf: zero-width spaces,
    joiners, the BOM, bidi marks) characters, as ranges. They live in planes 0, 1 and 14 only."""
    import unicodedata

    points = [c for plane in (0, 1, 14) for c in range(plane << 16, (plane + 1) << 16)
              if unicodedata.category(chr(c)) in ("Cc", "Cf")]
    ranges, start = [], points[0]
    for previous, current in zip(points, points[1:] + [None]):
        if current != previous + 1:
            ranges.append((start, previous))
            start = current
    return ranges


_INVISIBLE = _invisible_ranges()
# A question shows at least one character and holds no NUL (questions.validated_question).
VISIBLE_RE = re.compile("[^\\s" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _INVISIBLE) + "]")
# The same rule as an OpenAPI pattern, in the ECMA-262 syntax the schema's readers expect: \uXXXX escapes, so only
# the basic plane's invisible characters (the astral ones are rare format tags; the service still refuses them).
QUESTION_REGEX = ("^[^\\u0000]*[^\\s" + "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in _INVISIBLE if b <= 0xFFFF)
                  + "][^\\u0000]*$")
MAX_KB_CHARS = 64
Outcome = RequestRecord.Outcome


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex


def outcome_of(*, result: SearchResult | None, answer: Answer | None, error_code: str) -> str:
    """Decide how a request ended, the same way for every channel.

    A chitchat question that got its fixed reply was answered as designed: it is not a failure and not an
    empty result. A request that found the first index still building is `not_ready`, not failed. A search is empty when nothing was adopted; an answer when it is "insufficient material".
    """
    if error_code == "cancelled":
        return Outcome.CANCELLED
    if error_code == "index_building":  # the first build is running: not a failure of the service
        return Outcome.NOT_READY
    if error_code:
        return Outcome.FAILED
    if result is not None and result.plan.kind == "chitchat":
        return Outcome.CHITCHAT
    if answer is None:
        return Outcome.OK if result is not None and result.hits else Outcome.EMPTY
    if answer.mode == "chitchat":
        return Outcome.CHITCHAT
    if answer.mode == "empty":
        return Outcome.EMPTY
    if answer.degraded:
        return Outcome.DEGRADED
    if answer.confidence == "low":
        return Outcome.LOW
    return Outcome.OK


def _text(value, limit: int) -> str:
    """A string as stored: cut to size, NUL and lone surrogates (which PostgreSQL refuses in text and JSON)
    replaced."""
    return SURROGATE_RE.sub("\ufffd", value[:limit].replace("\x00", "\ufffd")) if isinstance(value, str) else ""


def _json_safe(value):
    if isinstance(value, str):
        return _text(value, MAX_QUESTION_CHARS)
    if isinstance(value, dict):
        return {_text(str(k), 100): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN and infinities are not JSON: the database refuses them
    return value if value is None or isinstance(value, bool | int | float) else repr(value)[:100]


def _arguments(arguments: dict) -> dict:
    """A caller's raw arguments as recorded: long strings cut, a huge value of another type named only."""
    arguments = _json_safe(arguments)
    if len(str(arguments)) > 4 * MAX_QUESTION_CHARS:
        arguments = {k: v if len(str(v)) <= MAX_QUESTION_CHARS else f"<{type(v).__name__}, too long>"
                     for k, v in arguments.items()}
    return arguments


def request_record_write(*, request_id: str, channel: str, kind: str, question, kb, caller,
                         options: dict | None = None, result: SearchResult | None = None, answer: Answer | None = None,
                         error: ServiceError | None = None, latency_ms: float = 0.0,
                         generate_ms: float | None = None) -> RequestRecord:
    """Store one request: who asked through what, the plan, the top of each route, what was adopted and
    answered, its outcome and its cost. Values that failed validation are stored cut to size, never raw.
    `arguments` hold the caller's raw arguments (an MCP tool call) or, for a face without them, the request
    `options` it set (top_k, mode, rerank, rewrite), so a replay asks the same way."""
    error_code = error.code if error is not None else ""
    fields = {
        "api_key_prefix": caller.key_prefix[:16], "tool": caller.tool[:64],
        "arguments": _arguments(caller.arguments or options or {}), "session_id": caller.session_id[:64],
        "transport": caller.transport[:8], "app": caller.app[:64],
    }
    if result is not None:
        fields.update(
            index_version=result.version,
            plan=result.plan.as_dict(),
            retrieved={**{r.name: [[h.chunk.chunk_id, round(h.score, 5)] for h in r.hits[:20]] for r in result.rankings},
                       "fused": [[h.chunk.chunk_id, round(h.score, 5)] for h in result.fused[:20]]},
            adopted=[{"chunk_id": h.chunk.chunk_id, "score": round(h.score, 6), "class_name": h.chunk.class_name,
                      "member": h.chunk.member, "source": h.chunk.source} for h in result.hits],
            excluded=list(result.excluded),
            hit_count=len(result.hits),
            reason=result.plan.reason[:64] if not result.hits else "",
            timings={**result.timings_ms, **({"generate": generate_ms} if generate_ms is not None else {})},
        )
    if answer is not None:
        fields.update(
            answer=answer.text, confidence=answer.confidence, mode=answer.mode, degraded=answer.degraded,
            reason=answer.reason, prompt_tokens=answer.usage.prompt_tokens,
            completion_tokens=answer.usage.completion_tokens,
            citations=[{"number": c.number, "chunk_id": c.chunk_id, "source": c.source} for c in answer.citations],
        )
    return RequestRecord.objects.create(
        request_id=request_id, channel=channel, kind=kind, kb=_text(kb, MAX_KB_CHARS),
        question=_text(question, MAX_QUESTION_CHARS), error_code=error_code, latency_ms=round(latency_ms, 3),
        outcome=outcome_of(result=result, answer=answer, error_code=error_code), **fields)
