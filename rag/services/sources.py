"""Where a knowledge base's pages come from (E1, issue 30): a folder of this server, or a git repository or a
documentation website synced into the data folder before each build (the website: rag.services.crawl).

A git source is written `git+<url>[@<ref>][#path=<folder>]`: `git+file:///srv/repos/sdk.git@v2.0#path=docs/`,
`git+https://git.example.com/sdk.git@main`, `git+ssh://git@git.example.com/sdk.git`. The ref is a branch, a tag or a
commit (default: the remote's HEAD). Each sync fetches that one revision, shallow, into
`$RAG_DATA_DIR/sources/git/<kb>` with the system `git`, and the build reads the folder as it reads any other.
A source URL must start with one of the URL prefixes listed in RAG_SOURCE_ROOTS; nothing else is fetched.
Credentials for HTTPS (RAG_GIT_USERNAME, RAG_GIT_TOKEN or RAG_GIT_TOKEN_FILE) reach git through its
environment, never its command line, and no message shows them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from infra.errors import ServiceError

GIT_SCHEMES = ("git+file://", "git+https://", "git+http://", "git+ssh://")
REF_RE = re.compile(r"^[A-Za-z0-9._/-]+$")  # a branch, tag or commit as git accepts them (no option, no space)
GIT_TIMEOUT = 600  # seconds one git command may take (a large first clone over a slow link)
CRAWL_REPORT = ".crawl-report.json"  # in a website's folder: what its last crawl fetched and skipped


def last_crawl(slug: str) -> dict | None:
    """The report of a website source's last crawl, None before the first."""
    path = checkout_dir(slug, "website") / CRAWL_REPORT
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


@dataclass(frozen=True)
class WebsiteSource:
    """A documentation website: every page under `url` (a prefix ending in /)."""

    spec: str
    url: str
    path: str = ""

    @property
    def kind(self) -> str:
        return "website"


@dataclass(frozen=True)
class GitSource:
    """A parsed `git+<url>[@<ref>][#path=<folder>]`."""

    spec: str  # as written (credentials removed)
    url: str  # what git fetches from
    ref: str  # "" for the remote's HEAD
    path: str  # a folder inside the repository, "" for its root

    @property
    def kind(self) -> str:
        return "git"

    @property
    def web_view(self) -> str:
        """Where an https repository shows its files (`<repo>/blob/<ref>/<path>/`, as GitHub, Gitea and GitLab
        serve it), so citations link to the page as its repository shows it; "" for file:// and ssh."""
        if not self.url.startswith("https://"):
            return ""
        repository = self.url.removesuffix("/").removesuffix(".git")
        return f"{repository}/blob/{self.ref or 'HEAD'}/" + (f"{self.path}/" if self.path else "")


def source_kind(source: str) -> str:
    """"website" for an http(s) URL, "git" for a git+… one (what parse_source makes of it)."""
    return "website" if source.startswith(("https://", "http://")) else "git"


def is_remote(source: str | None) -> bool:
    """A source that is a URL rather than a folder of this server."""
    return bool(source) and "://" in source


def parse_source(source: str) -> GitSource | WebsiteSource:
    """Read a source URL; raise source_invalid for a malformed one and source_kind_unsupported for another scheme."""
    if source_kind(source) == "website":
        parts = urlsplit(source)
        if parts.username or parts.password or not parts.hostname or parts.query or parts.fragment:
            raise ServiceError("source_invalid", f"{redacted(source)}: a website source is a plain URL prefix such "
                                                 f"as https://docs.example.com/api/ (no credentials, query or fragment).")
        prefix = source
        if not parts.path.endswith("/"):  # …/api/index.html is the prefix …/api/; …/api is …/api/
            prefix = source.rsplit("/", 1)[0] + "/" if "." in parts.path.rsplit("/", 1)[-1] else source + "/"
        return WebsiteSource(spec=prefix, url=prefix)
    if not source.startswith(GIT_SCHEMES):
        scheme = source.split("://", 1)[0]
        raise ServiceError("source_kind_unsupported",
                           f"Sources of kind {scheme!r} are not supported: use a folder of this server or "
                           f"a git repository ({', '.join(s + '…' for s in GIT_SCHEMES)}) or a website "
                           f"(https://…).")
    text, _, fragment = source.partition("#")
    path = ""
    if fragment:
        key, _, value = fragment.partition("=")
        if key != "path" or not value:
            raise ServiceError("source_invalid", "The only fragment a git source takes is #path=<folder>.")
        path = value.strip("/")
        if any(part in ("", ".", "..") for part in path.split("/")):
            raise ServiceError("source_invalid", f"#path={value} must be a folder inside the repository.")
    url = text[len("git+"):]
    parts = urlsplit(url)
    if parts.password is not None:
        raise ServiceError("source_invalid", "Put a git source's credentials in RAG_GIT_TOKEN (or RAG_GIT_TOKEN_FILE), "
                                             "not in its URL: a source URL is stored and shown.")
    ref = ""
    if "@" in parts.path:  # the ref follows the last @ of the path (an ssh user@host is in the netloc)
        repo_path, _, ref = parts.path.rpartition("@")
        if not ref or not REF_RE.match(ref) or ref.startswith("-"):
            raise ServiceError("source_invalid", f"{ref!r} is not a branch, tag or commit name.")
        parts = parts._replace(path=repo_path)
    if not parts.path.strip("/") or (parts.scheme != "file" and not parts.hostname):
        raise ServiceError("source_invalid", f"{redacted(source)} names no repository.")
    url = urlunsplit(parts)
    return GitSource(spec=redacted(source), url=url, ref=ref, path=path)


def redacted(text: str) -> str:
    """The text with any user:password@ of a URL in it replaced by ***@."""
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", text)


def source_check(source: str) -> GitSource | WebsiteSource:
    """Parse a source URL and check it against the allowed URL prefixes; raise source_not_allowed otherwise."""
    parsed = parse_source(source)
    # A prefix naming only a host ends at its "/": https://docs.example.com allows no https://docs.example.com.evil/
    prefixes = [root + "/" if "://" in root and "/" not in root.split("://", 1)[1] else root
                for root in settings.RAG_SOURCE_ROOTS if "://" in root]
    if not any(parsed.spec.startswith(prefix) for prefix in prefixes):
        allowed = ", ".join(prefixes) or "none"
        raise ServiceError("source_not_allowed", f"Source {parsed.spec} does not start with a URL prefix knowledge "
                                                 f"bases may read (RAG_SOURCE_ROOTS URL prefixes: {allowed}).",
                           status=403)
    return parsed


def checkout_dir(slug: str, kind: str = "git") -> Path:
    """Where a knowledge base's git source is checked out, or its website's pages are kept (inside the allowed
    `$RAG_DATA_DIR/sources`)."""
    return Path(settings.DATA_DIR) / "sources" / ("web" if kind == "website" else "git") / slug


def source_folder(slug: str, source: GitSource | WebsiteSource) -> Path:
    """The folder a build reads: the checkout (or the `#path=` folder inside it), or the website's pages."""
    folder = checkout_dir(slug, source.kind)
    return folder / source.path if source.path else folder


def sync(slug: str, source: GitSource | WebsiteSource, *, progress=None) -> str:
    """Bring the knowledge base's copy of its source up to date; return the revision (a commit, or a crawl's time)."""
    if source.kind == "website":
        from datetime import UTC, datetime

        from rag.services.crawl import Crawler

        folder = checkout_dir(slug, "website")
        report = Crawler(source.url, folder, progress=progress).run()
        (folder / CRAWL_REPORT).write_text(json.dumps(report.as_dict()), encoding="utf-8")
        return "crawled " + datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return git_sync(slug, source)


def git_sync(slug: str, source: GitSource) -> str:
    """Fetch the source's revision (shallow) into the knowledge base's checkout and check it out; return its commit.

    The working tree is made exactly the revision's: files of an earlier revision that it no longer has are removed.
    """
    folder = checkout_dir(slug)
    if not (folder / ".git").is_dir():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        _git(folder, "init", "-q")
    _git(folder, "fetch", "-q", "--depth", "1", "--no-tags", source.url, source.ref or "HEAD")
    _git(folder, "checkout", "-q", "--force", "--detach", "FETCH_HEAD")
    _git(folder, "clean", "-q", "-d", "-f", "-x")
    revision = _git(folder, "rev-parse", "HEAD").strip()
    if source.path and not (folder / source.path).is_dir():
        raise ServiceError("source_not_found", f"{source.spec}: the repository has no folder {source.path} at "
                                               f"{revision[:12]}.")
    return revision


def _git(folder: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=folder, env=_git_environment(), capture_output=True, text=True,
                              timeout=GIT_TIMEOUT, check=False)
    except FileNotFoundError as exc:
        raise ServiceError("source_sync_failed", "git is not installed on this server.") from exc
    except subprocess.TimeoutExpired as exc:
        raise ServiceError("source_sync_failed", f"git {args[0]} took longer than {GIT_TIMEOUT} s.") from exc
    if done.returncode != 0:
        message = redacted(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        if "could not read Username" in message or "Authentication failed" in message:
            message = "the server asked for credentials it did not get or refused (RAG_GIT_USERNAME, RAG_GIT_TOKEN)"
        raise ServiceError("source_sync_failed", f"git {args[0]} failed: {message}", status=502)
    return done.stdout


def _git_environment() -> dict[str, str]:
    """git's environment: never prompting, no system or user configuration, credentials as an HTTP header."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    environment.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
                       GIT_SSH_COMMAND=os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"))
    token = settings.RAG_GIT_TOKEN
    if token:
        pair = f"{settings.RAG_GIT_USERNAME or 'x-access-token'}:{token}".encode()
        environment.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="http.extraHeader",
                           GIT_CONFIG_VALUE_0="Authorization: Basic " + base64.b64encode(pair).decode())
    return environment
