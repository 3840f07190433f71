"""API keys on the retrieval faces: the same keys as MCP (`Authorization: Bearer <key>`), their per-minute rate
and daily quota counted per face (the usage row's tool is the channel), tokens and failures settled after the
call. A call refused after its key is known (a spent limit, the face's own checks) leaves a request record; a
missing or unknown key is refused before, and leaves none, as on MCP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from apikeys.api import bearer_of
from apikeys.models import ApiKey
from apikeys.services import api_key_admit_call, api_key_authenticate, api_key_usage_settle
from rag.errors import ServiceError
from rag.clients import request_address
from rag.limits import not_counted
from rag.models import Channel, RequestRecord
from rag.services.questions import Caller, QuestionRequest, question_refused
from rag.services.retrieval import RetrievalOutcome


def key_of(request) -> ApiKey:
    """The caller's active key, or a ServiceError: `missing_api_key` / `invalid_api_key` (401),
    `too_many_failed_attempts` (429)."""
    raw = bearer_of(request.headers.get("Authorization", ""))
    return api_key_authenticate(raw=raw, address=request_address(request))


def caller_of(key: ApiKey, channel: Channel, arguments: dict) -> Caller:
    return Caller(key_id=key.pk, key_prefix=key.prefix, tool=channel.value, arguments=arguments,
                  app=str(key.app_id or ""))


@contextmanager
def key_call(key: ApiKey, caller: Caller, question) -> Iterator[dict[str, str]]:
    """Admit one call on the key, then settle it. Yields a dict: its "headers" are the key's RateLimit-* headers;
    set its "outcome" to the RetrievalOutcome. A refusal (the key's limits, or the face's own checks before the
    question service) is recorded and raised; a failure counts as one on the key; a success adds the model tokens
    it spent. A call answered 503 `index_building` is given back: it counts on the key in no way."""
    def refused(error: ServiceError) -> None:
        question_refused(QuestionRequest(question=question, channel=Channel(caller.tool), kb="", caller=caller),
                         kind=RequestRecord.Kind.SEARCH, error=error)

    try:
        call = api_key_admit_call(key=key, tool=caller.tool)
    except ServiceError as exc:
        refused(exc)
        raise
    state = {"headers": call.headers}
    try:
        yield state
    except Exception as exc:
        if isinstance(exc, ServiceError) and not exc.request_id:  # refused by the face, before the service
            refused(exc)
        if not_counted(exc):  # 503 index_building: neither a call on the key nor a failure
            call.give_back()
        else:
            api_key_usage_settle(key_id=key.pk, tool=caller.tool, failed=True)
        raise
    outcome: RetrievalOutcome | None = state.get("outcome")
    usage = outcome.usage if outcome is not None else None
    api_key_usage_settle(key_id=key.pk, tool=caller.tool, prompt_tokens=usage.prompt_tokens if usage else 0,
                         completion_tokens=usage.completion_tokens if usage else 0)
