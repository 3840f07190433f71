"""Request bodies of the CG_RAG API (seed 004), validated the way the seed says: strict JSON types, ranges,
and pydantic's error items (`loc`, `message`, `type`) in the `invalid_request` envelope.

`query` is stripped and must not be empty; `topk` is 1..200, `max_items` 1..20, retrieve-rerank's optional
`max_tokens` 100..100000; `include_debug` and
`generation_enable_thinking` are JSON booleans only ("true", 1 and 0 are refused). Unknown fields are
ignored, as the seed's service does. Defaults that come from settings are filled in by the views.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, StringConstraints, ValidationError

from rag.services import LIMITS
from rag.services.budgets import MAX_TOKENS_LIMIT, MIN_BUDGET

MAX_SCOPE_CHARS = 64
MAX_DOCS = LIMITS.candidates  # candidates a caller may pass to constrained generation
MAX_DOC_CHARS = 20_000

Query = Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1,
                                                max_length=LIMITS.question_chars)]
Scope = Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_SCOPE_CHARS)]
TopK = Annotated[StrictInt, Field(ge=1, le=LIMITS.candidates)]
MaxItems = Annotated[StrictInt, Field(ge=1, le=LIMITS.choices)]
DocText = Annotated[StrictStr, StringConstraints(max_length=MAX_DOC_CHARS)]
MaxTokens = Annotated[StrictInt, Field(ge=MIN_BUDGET, le=MAX_TOKENS_LIMIT)]
Cursor = Annotated[StrictStr, StringConstraints(min_length=1, max_length=200)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RetrieveRerankInput(Body):
    query: Query
    scope: Scope | None = None
    topk: TopK | None = None
    # Ours, optional (an agent's budget, rag.services.budgets): the candidates packed into this many tokens,
    # with a cursor that continues from where the response stopped.
    max_tokens: MaxTokens | None = None
    cursor: Cursor | None = None


class RetrievalDoc(BaseModel):
    """A candidate as retrieve-rerank returns it; its other fields (chunk_id, scores, …) are ignored."""

    model_config = ConfigDict(extra="ignore")

    law_name: DocText = ""
    article_number: DocText = ""
    contents: DocText
    chunk_id: Annotated[StrictStr, StringConstraints(max_length=64)] = ""
    source: DocText = ""


class ConstrainedGenerateInput(Body):
    query: Query
    retrieval_docs: Annotated[list[RetrievalDoc], Field(max_length=MAX_DOCS)]
    max_items: MaxItems | None = None
    include_debug: StrictBool = False
    generation_enable_thinking: StrictBool | None = None


class RagInput(Body):
    query: Query
    scope: Scope | None = None
    topk: TopK | None = None
    max_items: MaxItems | None = None
    include_debug: StrictBool = False
    generation_enable_thinking: StrictBool | None = None


class WarmupInput(Body):
    scopes: Annotated[list[Scope], Field(max_length=32)] | None = None


class InvalidRequest(Exception):
    """The body failed validation: `errors` are the seed's `{loc, message, type}` items."""

    def __init__(self, errors: list[dict]):
        super().__init__("invalid request")
        self.errors = errors


def error_items(error: ValidationError) -> list[dict]:
    return [{"loc": [str(part) for part in item["loc"]] or ["body"], "message": item["msg"], "type": item["type"]}
            for item in error.errors(include_url=False, include_context=False, include_input=False)]


def parse(model: type[BaseModel], raw: bytes) -> BaseModel:
    """Validate a JSON body (bytes) against a model; raise InvalidRequest with the seed's error items."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        raise InvalidRequest(error_items(exc)) from None


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def json_object(raw: bytes) -> dict:
    """A body read as strict JSON, any fields of any type (the legacy /retrieve): NaN and Infinity are refused as
    pydantic refuses them on the other routes, and so is nesting deeper than the stack; an empty body is {}."""
    try:
        value = json.loads(raw or b"{}", parse_constant=_not_json)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise invalid("body", "The body must be a JSON object.", "json_invalid") from None
    if not isinstance(value, dict):
        raise invalid("body", "The body must be a JSON object.", "dict_type")
    if not is_text(value):  # `\ud800` reads as a lone surrogate, which no later step can encode
        raise invalid("body", "The body holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text.",
                      "string_unicode")
    return value


def is_text(value) -> bool:
    """Whether every string in a JSON value (keys too) is Unicode text: no lone surrogate."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def invalid(loc: str, message: str, kind: str = "value_error") -> InvalidRequest:
    return InvalidRequest([{"loc": [loc], "message": message, "type": kind}])
