"""A question as a face hands it over: `QuestionRequest`, who asks (`Caller`), the face's own limits (capacity,
token meter), and the validation every face shares (`validated`): one stable code per bad field, whatever the
face."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ContextManager, Protocol

from infra.errors import ServiceError
from rag.engine.search import MODES
from rag.engine.types import SearchOptions
from rag.models import Channel
from rag.services.records import MAX_KB_CHARS, MAX_QUESTION_CHARS, VISIBLE_RE

MAX_TOP_K = 50
MAX_CANDIDATES = 200  # ranked candidates a face may list beside the adopted evidence (CG_RAG's topk)
MAX_CHOICES = 20  # candidates constrained generation may choose (CG_RAG's max_items)
MAX_EXCLUDE = 100
MAX_CHUNK_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """What the question service accepts: the faces write their schemas and help from this one object."""

    question_chars: int = MAX_QUESTION_CHARS
    kb_chars: int = MAX_KB_CHARS
    top_k: int = MAX_TOP_K
    candidates: int = MAX_CANDIDATES
    choices: int = MAX_CHOICES
    exclude: int = MAX_EXCLUDE
    chunk_id_chars: int = MAX_CHUNK_ID_CHARS
    modes: tuple[str, ...] = MODES  # the search modes a face may ask for


LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks through what. Only the key's public prefix is recorded; `key_id` is for the face's own
    usage counters. `arguments` are the call's raw arguments (an MCP tool call), recorded as received."""

    key_id: int | None = None
    key_prefix: str = ""
    tool: str = ""
    arguments: dict = field(default_factory=dict)
    session_id: str = ""
    transport: str = ""
    app: str = ""


class TokenReservation(Protocol):
    def settle(self, tokens: int, *, model_called: bool = True) -> None:
        """Report what the answer really cost; `model_called` False (an open breaker, a failed call) costs nothing."""


class CapacityGate(Protocol):
    """A face's concurrency limits (infra.capacity), held around the engine's search and the model's call."""

    def hold(self, resource: str) -> ContextManager[None]:
        """Hold a slot of "retrieval" or "generation", or raise a ServiceError (429) after waiting."""


class TokenMeter(Protocol):
    """A face's token budget (the web's daily pool), entered only around a real model call."""

    def reserve(self) -> ContextManager[TokenReservation]:
        """Reserve an answer's expected tokens, or raise a ServiceError (429) when the budget is spent."""


@dataclass(frozen=True, slots=True)
class QuestionRequest:
    """One question as a face received it; the service validates every field (so a bad one is a recorded
    failure with a stable code, whatever the face)."""

    question: object
    channel: Channel
    kb: object = None  # a knowledge base slug, or `sdk@version`; None: RAG_DEFAULT_KB
    sdk_version: object = None  # an SDK version or alias of the knowledge base (rag.services.sdk); None: `latest`
    top_k: object = None  # results for a single-class question; None: the engine's default (5)
    mode: object = "hybrid"
    exclude: object = ()  # chunk ids the user disabled (E6)
    version: str | None = None  # a named ready version (eval runs, replay); None: the active one
    rerank: object = None  # True/False: rerank this question or not; None: as configured (RAG_RERANK_*)
    rewrite: object = None  # True/False: search the model's keyword rewrite too or not; None: as configured
    candidates: object = None  # also list up to this many ranked candidates (SearchOutcome.candidates); None: none
    cache: bool = False  # reuse an identical search's outcome from the retrieval cache (rag.retrieval_cache)
    caller: Caller = field(default_factory=Caller)
    meter: TokenMeter | None = None
    capacity: CapacityGate | None = None
    record: bool = True  # False only for batch use that asks not to be recorded (`rag search - --no-record`)
    # A reason not to ask the model for this answer (a face whose per-client limits cannot be counted): the answer
    # is extractive, degraded with this reason, and spends nothing. "": ask the model as configured.
    no_model: str = ""


def validated_question(question) -> str:
    if not isinstance(question, str) or "\x00" in question or not VISIBLE_RE.search(question):
        raise ServiceError("invalid_question", "The question must be a non-empty string (without NUL characters).")
    if len(question) > MAX_QUESTION_CHARS:
        raise ServiceError("question_too_long", f"The question is longer than {MAX_QUESTION_CHARS} characters.")
    return question


def validated(request: QuestionRequest, *, complete: bool = False) -> tuple[str, SearchOptions]:
    """Check a request's values, and return the question and the engine's options for it; raise a ServiceError with
    a stable code for the first bad one."""
    question, top_k, mode, exclude = validated_question(request.question), request.top_k, request.mode, request.exclude
    candidates = request.candidates
    if candidates is not None and (type(candidates) is not int or not 1 <= candidates <= MAX_CANDIDATES):
        raise ServiceError("invalid_candidates", f"candidates must be an integer from 1 to {MAX_CANDIDATES}.")
    kb = request.kb
    if kb is not None and (not isinstance(kb, str) or not kb or len(kb) > MAX_KB_CHARS or "\x00" in kb):
        raise ServiceError("invalid_kb", "kb must be the slug of a knowledge base.")
    if mode not in MODES:
        raise ServiceError("invalid_mode", f"Mode must be one of: {', '.join(MODES)}.")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K):
        raise ServiceError("invalid_top_k", f"top_k must be an integer from 1 to {MAX_TOP_K}.")
    if exclude is None:
        exclude = ()
    if (not isinstance(exclude, list | tuple) or len(exclude) > MAX_EXCLUDE
            or not all(isinstance(c, str) and 0 < len(c) <= MAX_CHUNK_ID_CHARS and "\x00" not in c
                       for c in exclude)):
        raise ServiceError("invalid_exclude", f"exclude must be a list of at most {MAX_EXCLUDE} chunk ids.")
    for name in ("rerank", "rewrite"):
        if getattr(request, name) is not None and not isinstance(getattr(request, name), bool):
            raise ServiceError(f"invalid_{name}", f"{name} must be true, false or null.")
    return question, SearchOptions(mode=mode, top_k=top_k, exclude=tuple(exclude), rerank=request.rerank,
                                   rewrite=request.rewrite, fused_depth=candidates, complete=complete)


def request_options(request: QuestionRequest) -> dict:
    """The request options a face set (top_k, mode, rerank, rewrite), as asked: recorded so a replay asks the same."""
    options = {"top_k": request.top_k, "mode": None if request.mode == "hybrid" else request.mode,
               "rerank": request.rerank, "rewrite": request.rewrite, "candidates": request.candidates}
    return {name: value for name, value in options.items() if value is not None}
