"""Who may spend the CG_RAG face's work (issue 28): per-client limits, a key when one is required, and the token
budget of its model calls.

Every CG_RAG POST route and /retrieve count against the client's limit of their kind (infra/limits.py, a client
is its address and session): `cgrag_search` for retrieve-rerank and /retrieve (each query of a batch counts),
`cgrag_generate` for the routes that call a model. A request answered 503 `index_building` (the first index is
still being built), also as a stream's `error` event, counts against none of them: its counts are given back, as
on the web faces. With settings.RAG_CGRAG_REQUIRE_KEY on, a call needs `Authorization: Bearer <key>`, counts
against the key's rate and daily quota, and its model tokens are added to the key's usage. Without a key, a
model call first reserves RAG_CGRAG_TOKEN_ESTIMATE tokens of the client's share of the day's RAG_CGRAG_TOKEN_POOL
(429 `client_token_share_exhausted`; 503 `limits_unavailable` while the limits cannot be counted), and settles
what the model really spent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

from infra.capacity import capacity_limiter
from infra.limits import Client, TokenShare, WindowHit, not_counted, rate_hit, token_share_reserve, window_give_back
from rag.services import Usage  # the engine's type, as the question service hands it over

KEY_TOOL = "cgrag"  # the key's usage rows of this face


class Spender:
    """One CG_RAG request's caller: its client, its key (when one was required), and its token reservation."""

    def __init__(self, client: Client, key=None):
        self.client = client
        self.key = key
        self.share: TokenShare | None = None
        self.estimate = 0
        self.key_call = None  # the call admitted on the key (apikeys.services.KeyCall), for `give_back`
        self.headers: dict[str, str] = {}  # the key's RateLimit-* headers
        self.hits: list[WindowHit] = []  # this request's counts in the client's limits, for `give_back`

    @classmethod
    def of_request(cls, request: HttpRequest) -> Spender:
        spender = getattr(request, "cgrag_spender", None)
        return spender if spender is not None else cls(Client.of_request(request))

    def count(self, scope: str, calls: int = 1) -> None:
        """Count `calls` requests of this client in `scope`, or raise 429 `rate_limited` at the first over it."""
        for _ in range(calls):
            self.hits.append(rate_hit(scope, self.client))

    def give_back(self, error: BaseException) -> None:
        """The request ended in `error`: when that is not the client's doing (503 `index_building`), give back its
        counts in the client's limits and in its key's rate and quota."""
        if not_counted(error):
            hits, self.hits = self.hits, []
            for hit in hits:
                window_give_back(hit)
            if self.key_call is not None:
                self.key_call.give_back()

    def reserve(self) -> None:
        """Reserve a model call's expected tokens (once per request); a keyed call is billed to its key instead."""
        if self.key is not None or self.share is not None:
            return
        self.estimate = settings.RAG_CGRAG_TOKEN_ESTIMATE
        self.share = token_share_reserve(self.client, self.estimate, pool_limit=settings.RAG_CGRAG_TOKEN_POOL,
                                         day=timezone.localdate(), pool="cgrag")

    def settle(self, usage: Usage | None, *, answered: bool) -> None:
        """The request is over: keep what the model reported, the estimate when a model that answered reported
        nothing, and nothing when no model answered. Never settled (the reader left, a failure after the call),
        the estimate stays spent, as on the web pool."""
        tokens = usage.total_tokens if usage is not None else 0
        if self.share is not None:
            self.share.settle(tokens if tokens > 0 else self.estimate if answered else 0)
            self.share = None
        if self.key is not None and usage is not None and tokens:
            from apikeys.services import api_key_usage_settle

            api_key_usage_settle(key_id=self.key.pk, tool=KEY_TOOL, prompt_tokens=usage.prompt_tokens,
                                 completion_tokens=usage.completion_tokens)

    def gate(self) -> SpendingGate:
        return SpendingGate(self)


class SpendingGate:
    """The capacity gate the question service holds around its engine and model calls (infra.capacity), which
    also reserves the caller's tokens right before the model is called: a request that never reaches the model
    (a search, no model configured, no candidate) spends nothing."""

    def __init__(self, spender: Spender):
        self.spender = spender

    @contextlib.contextmanager
    def hold(self, resource: str) -> Iterator[None]:
        with capacity_limiter(resource).hold():
            if resource == "generation":  # with the slot held: a call refused for capacity costs nothing
                self.spender.reserve()
            yield

