"""Issue 30: a knowledge base synced from a git repository. Every remote is local: a bare repository made here,
read over file:// and over git's smart HTTP protocol (git http-backend behind a local server)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import serve_on_loopback

from rag.models import KnowledgeBase
from rag.tests.test_cli import run_json, run_json_failure

pytestmark = pytest.mark.django_db

PAGES = ("PerspectiveCamera.md", "OrbitControls.md", "Fog.md", "Color.md")


def git(folder: Path, *args: str) -> str:
    environment = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                   "GIT_AUTHOR_NAME": "Docs", "GIT_AUTHOR_EMAIL": "docs@example.com",
                   "GIT_COMMITTER_NAME": "Docs", "GIT_COMMITTER_EMAIL": "docs@example.com"}
    return subprocess.run(["git", *args], cwd=folder, env=environment, capture_output=True, text=True,
                          check=True).stdout.strip()


class Repository:
    """A bare repository (what the knowledge base syncs from) and a working copy that commits and pushes to it."""

    def __init__(self, root: Path, fixture_corpus: Path):
        self.bare = root / "repos" / "sdk.git"
        self.work = root / "work"
        self.bare.mkdir(parents=True)
        git(self.bare, "init", "-q", "--bare", "-b", "main")
        self.work.mkdir()
        git(self.work, "init", "-q", "-b", "main")
        (self.work / "docs").mkdir()
        for page in PAGES:
            shutil.copy(fixture_corpus / page, self.work / "docs" / page)
        (self.work / "README.md").write_text("# Not in docs/\n", encoding="utf-8")
        self.commit("first pages")

    def commit(self, message: str) -> str:
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", message)
        git(self.work, "push", "-q", str(self.bare), "HEAD:main", "--tags")
        return git(self.work, "rev-parse", "HEAD")

    @property
    def url(self) -> str:
        return f"git+file://{self.bare}"


@pytest.fixture
def repository(tmp_path, fixture_corpus, settings):
    settings.DATA_DIR = tmp_path / "data"
    settings.RAG_SOURCE_ROOTS = [str(tmp_path / "data" / "sources"), f"git+file://{tmp_path / 'repos'}/"]
    return Repository(tmp_path, fixture_corpus)


def test_a_git_source_syncs_and_each_commit_shows_up_with_its_page_counts(repository, engine):
    first = run_json("reindex", "--kb", "sdk", "--source", repository.url + "#path=docs")

    head = git(repository.work, "rev-parse", "HEAD")
    assert first["pages"] == {"added": 4, "changed": 0, "removed": 0, "renamed": 0, "unchanged": 0}
    assert first["source"]["kind"] == "git" and first["source"]["revision"] == head
    assert first["source"]["location"] == repository.url + "#path=docs"
    searched = run_json("search", "--kb", "sdk", "Fog 的 near")
    assert searched["results"] and searched["source_revision"] == head and searched["built_at"]

    docs = repository.work / "docs"
    fog = docs / "Fog.md"
    fog.write_text(fog.read_text(encoding="utf-8") + "\n补充：雾的颜色会和背景色混合，远处的物体逐渐看不清。\n",
                   encoding="utf-8")
    (docs / "Color.md").rename(docs / "Colour.md")
    (docs / "OrbitControls.md").unlink()
    second_head = repository.commit("edit Fog, rename Color, delete OrbitControls")

    second = run_json("reindex", "--kb", "sdk")

    assert second["pages"] == {"added": 0, "changed": 1, "removed": 1, "renamed": 1, "unchanged": 1}
    assert second["source"]["revision"] == second_head
    assert 1 <= second["chunks_embedded"] <= 2  # only the edited text: the renamed page keeps its vectors
    assert run_json_failure("read", "--kb", "sdk", "OrbitControls.md")["code"] == "source_not_found"
    assert run_json("read", "--kb", "sdk", "Colour.md")["content"]
    found = run_json("search", "--kb", "sdk", "雾的颜色会和背景色混合吗")["results"]
    assert found[0]["class_name"] == "Fog" and "背景色混合" in found[0]["content"]

    unchanged = run_json("reindex", "--kb", "sdk", "--if-changed")

    assert unchanged["unchanged"] is True and unchanged["version"] == second["version"]
    status = run_json("status", "--kb", "sdk")["knowledge_bases"][0]["source"]
    assert (status["kind"], status["revision"]) == ("git", second_head) and status["synced_at"]


def test_a_tag_a_branch_and_a_commit_are_each_synced_as_written(repository, engine):
    first = git(repository.work, "rev-parse", "HEAD")
    git(repository.work, "tag", "v1")
    git(repository.work, "checkout", "-q", "-b", "next")
    (repository.work / "docs" / "Fog.md").unlink()
    git(repository.work, "add", "-A")
    git(repository.work, "commit", "-q", "-m", "next drops Fog")
    git(repository.work, "push", "-q", str(repository.bare), "next", "v1")
    git(repository.work, "checkout", "-q", "main")

    on_tag = run_json("reindex", "--kb", "tagged", "--source", repository.url + "@v1#path=docs")
    on_branch = run_json("reindex", "--kb", "branch", "--source", repository.url + "@next#path=docs")
    on_commit = run_json("reindex", "--kb", "commit", "--source", f"{repository.url}@{first}#path=docs")

    assert (on_tag["source"]["revision"], on_tag["synced_notes"]) == (first, 4)
    assert on_branch["synced_notes"] == 3 and on_branch["source"]["revision"] != first
    assert (on_commit["source"]["revision"], on_commit["synced_notes"]) == (first, 4)


def test_a_source_outside_the_allowed_prefixes_is_refused_and_nothing_is_fetched(repository, tmp_path, settings):
    elsewhere = tmp_path / "elsewhere.git"
    shutil.copytree(repository.bare, elsewhere)

    refused = run_json_failure("reindex", "--kb", "sdk", "--source", f"git+file://{elsewhere}")
    remote = run_json_failure("reindex", "--kb", "sdk", "--source", "git+https://169.254.169.254/latest.git")

    assert refused["code"] == remote["code"] == "source_not_allowed"
    assert not (Path(settings.DATA_DIR) / "sources" / "git").exists()
    assert not KnowledgeBase.objects.exists()


@pytest.mark.parametrize("source, code", [
    ("git+https://user:secret@git.example.com/sdk.git", "source_invalid"),  # credentials belong in RAG_GIT_TOKEN
    ("git+file:///srv/repos/sdk.git@--upload-pack=evil", "source_invalid"),
    ("git+file:///srv/repos/sdk.git#path=../etc", "source_invalid"),
    ("svn://svn.example.com/sdk", "source_kind_unsupported"),
])
def test_a_malformed_source_gets_a_stable_code_and_changes_nothing(db, source, code):
    failure = run_json_failure("reindex", "--kb", "sdk", "--source", source)

    assert failure["code"] == code and "secret" not in str(failure)
    assert not KnowledgeBase.objects.exists()


# -- over git's smart HTTP protocol -------------------------------------------------------------------------


HTTP_BACKEND = Path(subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip()) \
    / "git-http-backend"


def git_http_server(root: Path, credentials: str):
    """git http-backend (CGI) behind a local HTTP server that asks for Basic credentials."""
    expected = "Basic " + base64.b64encode(credentials.encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.backend()

        def do_POST(self):  # noqa: N802
            self.backend()

        def backend(self):
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            environment = {"GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path.removeprefix("/v1"),
                           "QUERY_STRING": query, "REQUEST_METHOD": self.command, "REMOTE_ADDR": "127.0.0.1",
                           "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                           "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""), "PATH": os.environ["PATH"]}
            done = subprocess.run([str(HTTP_BACKEND)], input=body, env=environment, capture_output=True, check=True)
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            headers = [line.split(":", 1) for line in head.decode().split("\r\n") if ":" in line]
            status = next((int(v.strip().split()[0]) for k, v in headers if k.lower() == "status"), 200)
            self.send_response(status)
            for key, value in headers:
                if key.lower() != "status":
                    self.send_header(key, value.strip())
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    return serve_on_loopback(Handler)


def test_a_git_source_over_http_sends_the_configured_token_and_never_shows_it(repository, engine, settings):
    with git_http_server(repository.bare.parent, "docs-bot:s3cr3t-token") as base:
        url = "git+" + base.removesuffix("/v1") + "/sdk.git"
        settings.RAG_SOURCE_ROOTS = [*settings.RAG_SOURCE_ROOTS, "git+" + base.removesuffix("/v1") + "/"]

        settings.RAG_GIT_USERNAME, settings.RAG_GIT_TOKEN = "docs-bot", "wrong-token"
        refused = run_json_failure("reindex", "--kb", "sdk", "--source", url + "#path=docs")
        settings.RAG_GIT_TOKEN = "s3cr3t-token"
        synced = run_json("reindex", "--kb", "sdk", "--source", url + "#path=docs")

    assert refused["code"] == "source_sync_failed" and "token" not in str(refused)
    assert synced["source"]["revision"] == git(repository.work, "rev-parse", "HEAD")
    assert synced["pages"]["added"] == 4 and "s3cr3t" not in str(synced)


def test_the_admin_sets_a_git_source_allowed_by_a_prefix_and_refuses_another(repository, admin_client, settings):
    kb = KnowledgeBase.objects.create(slug="sdk", name="sdk", source_dir=str(repository.work / "docs"))
    form = {"slug": "sdk", "name": "sdk", "language": "mixed", "base_url": "", "source_dir": ""}

    refused = admin_client.post(f"/admin/rag/knowledgebase/{kb.pk}/change/",
                                {**form, "source_url": "git+https://169.254.169.254/sdk.git"})
    accepted = admin_client.post(f"/admin/rag/knowledgebase/{kb.pk}/change/",
                                 {**form, "source_url": repository.url + "@main#path=docs"})

    assert refused.status_code == 200 and "RAG_SOURCE_ROOTS" in refused.content.decode()
    assert accepted.status_code == 302
    kb.refresh_from_db()
    assert kb.source_url == repository.url + "@main#path=docs"
    assert kb.source_dir == str(Path(settings.DATA_DIR) / "sources" / "git" / "sdk" / "docs")


# -- scheduled syncs ----------------------------------------------------------------------------------------


def test_a_scheduled_sync_builds_only_when_the_source_changed_and_a_failure_alerts_once(repository, engine,
                                                                                        settings, client):
    from datetime import timedelta

    from django.utils import timezone

    from opsboard.models import AlertEvent
    from opsboard.services import alerts_evaluate
    from rag.services.knowledge import sources_sync_due

    first = run_json("reindex", "--kb", "sdk", "--source", repository.url + "#path=docs")
    KnowledgeBase.objects.filter(slug="sdk").update(sync_interval_minutes=30)
    start = timezone.now()

    assert sources_sync_due(start) == ["sdk"]  # never checked on schedule: due now; nothing changed, nothing built
    assert KnowledgeBase.objects.get(slug="sdk").active_version.name == first["version"]
    assert sources_sync_due(start + timedelta(minutes=10)) == []  # not due again before its interval

    fog = repository.work / "docs" / "Fog.md"
    fog.write_text(fog.read_text(encoding="utf-8") + "\n补充：雾不影响透明物体的阴影。\n", encoding="utf-8")
    head = repository.commit("edit Fog")
    assert sources_sync_due(start + timedelta(minutes=31)) == ["sdk"]
    kb = KnowledgeBase.objects.get(slug="sdk")
    assert kb.active_version.name != first["version"] and kb.active_version.source_revision == head

    shutil.rmtree(repository.bare)  # the repository went away
    assert sources_sync_due(start + timedelta(minutes=62)) == ["sdk"]
    kb.refresh_from_db()
    assert kb.sync_error.startswith("source_sync_failed") and kb.active_version.source_revision == head
    alerts_evaluate()
    alerts_evaluate()  # still failing: the one alert stays open, none is added
    fired = AlertEvent.objects.filter(rule="source_sync_failed")
    assert fired.count() == 1 and "sdk" in fired.get().message and fired.get().resolved_at is None
    from opsboard.tests.test_ops import ops_user

    client.force_login(ops_user())
    page = client.get("/ops/freshness").content.decode()
    assert "last scheduled sync failed" in page and head[:12] in page and "every 30 min" in page


@pytest.mark.parametrize("source, view", [
    ("git+https://github.com/encode/starlette@master#path=docs", "https://github.com/encode/starlette/blob/master/docs/"),
    ("git+https://git.example.com/sdk.git", "https://git.example.com/sdk/blob/HEAD/"),
    ("git+file:///srv/repos/sdk.git#path=docs", ""),
    ("git+ssh://git@git.example.com/sdk.git", ""),
])
def test_an_https_repository_links_citations_to_its_web_view(source, view):
    from rag.services.sources import parse_source

    assert parse_source(source).web_view == view


def test_celery_beat_runs_the_scheduled_sync_every_minute(repository, engine, settings):
    from rag.tasks import sources_sync_task

    run_json("reindex", "--kb", "sdk", "--source", repository.url + "#path=docs")
    KnowledgeBase.objects.filter(slug="sdk").update(sync_interval_minutes=5)

    entry = settings.CELERY_BEAT_SCHEDULE["sources-sync"]
    ran = sources_sync_task.apply()  # the task beat sends, run here as the worker runs it

    assert (entry["task"], entry["schedule"]) == (sources_sync_task.name, 60.0)
    assert ran.get() == ["sdk"] and KnowledgeBase.objects.get(slug="sdk").sync_checked_at is not None
