"""The OpenAPI schema at /api/schema says what the API does: schemathesis (every check, as `--checks all`)
sends schema-valid and schema-invalid requests to the project served over HTTP and reports nothing.

It is the one OpenAPI document the product serves: it holds the web API and seed 002's open retrieval API
(`/api/v1/retrieval`, retrieval/schema.py). RAGFlow's and Dify's retrieval faces and the CG_RAG API serve none
(they follow those products' and seed 004's APIs); hypothesis fuzzes them from their fields instead
(retrieval/tests/test_fuzz.py, cgrag/tests/test_fuzz.py).

(Over HTTP, by pytest-django's live server: schemathesis's in-process WSGI transport fails on its own
authentication probes, which pass `max_redirects` to werkzeug.)"""

from __future__ import annotations

import collections
import json

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from apikeys.services import api_key_issue
from conftest import local_moment
from rag.models import RetrievalApp
from rag.tests.conftest import make_built_kb

pytestmark = [pytest.mark.django_db(transaction=True),  # the live server answers from its own thread
              pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)]

SEED = 20261202
MAX_EXAMPLES = 25  # per operation and phase: about 20 s for the four operations on a 2-core machine


def run_schemathesis(url: str, headers: dict[str, str]) -> tuple[list[str], collections.Counter]:
    """Run every phase and check against url's /api/schema; return the failures and the (path, status) counts."""
    config = SchemathesisConfig.from_dict({
        "seed": SEED, "cache": {"enabled": False}, "headers": headers, "base-url": url,
        "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
    })
    config.projects.override.checks.update(included_check_names=["all"])  # the CLI's `--checks all`
    schema = schemathesis.openapi.from_url(url + "/api/schema?format=json", config=config)
    failures, statuses = [], collections.Counter()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    statuses[(interaction.request.uri.split("?")[0].removeprefix(url),
                              interaction.response.status_code)] += 1
            for check in (c for checks in event.recorder.checks.values() for c in checks):
                if check.failure_info is not None:
                    failure = check.failure_info.failure
                    failures.append(f"{check.name}: {failure.title}: {failure.message}\n"
                                    f"{check.failure_info.code_sample}")
        elif isinstance(event, events.NonFatalError | events.FatalError):
            failures.append(f"{type(event).__name__}: {event!r}")
    return sorted(set(failures)), statuses


def test_schemathesis_finds_nothing_wrong_with_the_schema(live_server, corpus_copy, settings, caplog):
    settings.RAG_DEFAULT_KB = "sdk"
    kb = make_built_kb(corpus_copy)
    owner = get_user_model().objects.create_user("li.wei", password="x")
    key, secret = api_key_issue(owner=owner, name="schemathesis")
    key.app = RetrievalApp.objects.create(name="schemathesis", published=True)  # the open retrieval API's app
    key.app.knowledge_bases.set([kb])
    key.save(update_fields=["app"])
    caplog.set_level("CRITICAL", logger="django.request")  # thousands of expected 4xx lines

    failures, statuses = run_schemathesis(live_server.url, {"Authorization": f"Bearer {secret}"})

    assert failures == [], "\n\n".join(failures)
    # Not vacuous: every operation was reached and answered, not only refused.
    for path, status in [("/api/search", 200), ("/api/chat", 200), ("/api/keys/usage", 200),
                         ("/api/keys/usage", 401), ("/api/feedback", 403), ("/api/search", 405),
                         ("/api/v1/retrieval", 200), ("/api/v1/retrieval", 400)]:
        assert statuses[(path, status)] > 0, (path, status, json.dumps(sorted(map(str, statuses.items()))))
