"""Production settings from the environment: `check --deploy --fail-level WARNING` is clean behind a TLS proxy
(DJANGO_SECURE_PROXY_SSL_HEADER) or with DJANGO_HTTPS, and names the four HTTPS warnings with neither (`make
run`, a plain-HTTP internal deployment). Behind the proxy, plain HTTP is redirected but the probes are not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]


def deploy_check(tmp_path, **env) -> subprocess.CompletedProcess:
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
                   "DJANGO_SETTINGS_MODULE": "ragsite.settings", "RAG_DATA_DIR": str(tmp_path),
                   "DJANGO_ALLOWED_HOSTS": "docs.example.com", **env}
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                          env=environment, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("env", [{"DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO=https"},
                                 {"DJANGO_HTTPS": "true"}])
def test_the_deploy_check_is_clean_with_https_settings(tmp_path, env):
    result = deploy_check(tmp_path, **env)

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_plain_http_names_the_four_https_warnings(tmp_path):
    result = deploy_check(tmp_path)

    assert result.returncode != 0
    assert {code for code in ("W004", "W008", "W012", "W016") if f"security.{code}" in result.stderr} == {
        "W004", "W008", "W012", "W016"}


def test_a_malformed_proxy_header_is_refused(tmp_path):
    result = deploy_check(tmp_path, DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")

    assert result.returncode != 0 and "DJANGO_SECURE_PROXY_SSL_HEADER must be HEADER=value" in result.stderr


@pytest.mark.django_db
def test_behind_the_proxy_plain_http_is_redirected_but_probes_are_not(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    client = Client()

    plain = client.get("/search")
    forwarded = client.get("/search", HTTP_X_FORWARDED_PROTO="https")
    probe = client.get("/readyz")

    assert plain.status_code == 301 and plain["Location"].startswith("https://")
    assert forwarded.status_code == 200
    assert probe.status_code in (200, 503)  # answered, not redirected
