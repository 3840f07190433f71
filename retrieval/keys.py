"""API keys on the retrieval faces: the same keys as MCP (`Authorization: Bearer <key>`), their per-minute rate
and daily quota counted per face (the usage row's tool is the channel), counted by the one key call of
apikeys.services. A call refused after its key is known (a spent limit, the face's own checks) leaves a request
record; a missing or unknown key is refused before, and leaves none, as on MCP."""

from __future__ import annotations

from typing import ContextManager

from apikeys.api import bearer_of
from apikeys.models import ApiKey
from apikeys.services import KeyCall, api_key_authenticate, api_key_call
from infra.clients import request_address
from infra.errors import ServiceError
from rag.models import Channel, RequestRecord
from rag.services import Caller, QuestionRequest, question_refused


def key_of(request) -> ApiKey:
    """The caller's active key, or a ServiceError: `missing_api_key` / `invalid_api_key` (401),
    `too_many_failed_attempts` (429)."""
    raw = bearer_of(request.headers.get("Authorization", ""))
    return api_key_authenticate(raw=raw, address=request_address(request))


def caller_of(key: ApiKey, channel: Channel, arguments: dict) -> Caller:
    return Caller(key_id=key.pk, key_prefix=key.prefix, tool=channel.value, arguments=arguments,
                  app=str(key.app_id or ""))


def key_call(key: ApiKey, caller: Caller, question) -> ContextManager[KeyCall]:
    """One call of a retrieval face on its key (apikeys.services.api_key_call): a refusal is recorded as a search
    of this face's channel; answer with the call's `headers`, tell it what the outcome `spent`."""
    def refused(error: ServiceError) -> None:
        question_refused(QuestionRequest(question=question, channel=Channel(caller.tool), kb="", caller=caller),
                         kind=RequestRecord.Kind.SEARCH, error=error)

    return api_key_call(key=key, tool=caller.tool, refused=refused)
