"""A bad Host header or a 403 is logged as one line, not a traceback (issue 28)."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import path


def forbidden(request):
    raise PermissionDenied("not yours")


urlpatterns = [path("forbidden", forbidden)]


@pytest.fixture
def log_records():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.WARNING)
    logging.getLogger().addHandler(handler)
    yield records
    logging.getLogger().removeHandler(handler)


@pytest.mark.django_db
def test_a_bad_host_is_logged_in_one_line_without_a_traceback(log_records):
    response = Client().get("/api/schema", HTTP_HOST="evil.example")

    refused = [r for r in log_records if r.name == "django.security.DisallowedHost"]
    assert response.status_code == 400
    assert len(refused) == 1 and refused[0].exc_info is None
    assert "\n" not in logging.Formatter().format(refused[0])


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_a_403_is_logged_in_one_line_without_a_traceback(log_records):
    response = Client().get("/forbidden")

    refused = [r for r in log_records if r.name == "django.request"]
    assert response.status_code == 403
    assert len(refused) == 1 and refused[0].exc_info is None
    assert "\n" not in logging.Formatter().format(refused[0])
