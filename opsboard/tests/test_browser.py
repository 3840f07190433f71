"""Every ops page in headless Chromium against a live Daphne (slow): it renders, shows recorded questions as text
(never as markup), fires no dialog, and its scripts work (live refresh, replay). Saves a screenshot per page."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group
from django.utils import timezone

from apikeys.services import api_key_issue
from assistant.models import Feedback
from assistant.tests.test_browser import browser  # noqa: F401  (the fixture: Debian's chromium via Playwright)
from infra.errors import ServiceError
from opsboard.services import daily_report_build
from rag.models import Channel, RequestRecord
from rag.services import Caller, QuestionRequest, question_answer, question_refused, question_search
from rag.tests.conftest import make_built_kb
from rag.tests.live import daphne

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "ops-reader-password-1"
XSS_IMG = "<img src=x onerror=alert(1)>"
XSS_SCRIPT = "<script>alert(1)</script>"


def make_ops_user(username: str = "opsreader"):
    # Hashed with a hasher of the production settings Daphne runs with (the test settings' MD5 is not among them).
    hasher = PBKDF2PasswordHasher()
    user = get_user_model().objects.create(username=username, password=hasher.encode(PASSWORD, hasher.salt()))
    user.groups.add(Group.objects.get_or_create(name=settings.RAG_OPS_GROUP)[0])
    return user


def make_records(user) -> dict:
    """A web chat with a thumbs-down, an MCP search with a key, a failure, and two questions carrying markup."""
    def record(request_id: str) -> RequestRecord:
        return RequestRecord.objects.get(request_id=request_id)

    def refused(question: str, kind: str, code: str) -> RequestRecord:
        question_refused(QuestionRequest(question=question, kb="sdk", channel=Channel.WEB), kind=kind,
                         error=ServiceError(code, "failed"))
        return RequestRecord.objects.latest("id")

    chat = record(question_answer(QuestionRequest(question="PerspectiveCamera 的 fov 默认值是多少？", kb="sdk",
                                                  channel=Channel.WEB)).request_id)
    Feedback.objects.create(request=chat, reason="wrong default")
    key, _ = api_key_issue(owner=user, name="IDE plugin")
    mcp = record(question_search(QuestionRequest(
        question="Fog near far", kb="sdk", channel=Channel.MCP,
        caller=Caller(key_prefix=key.prefix, tool="search_sdk_docs", arguments={"question": "Fog near far"},
                      session_id="s-1", transport="http"))).request_id)
    failed = refused("WebGLRenderer 怎么设置像素比？", "chat", "generation_unavailable")
    img = refused(XSS_IMG, "search", "internal_error")
    script = record(question_search(QuestionRequest(
        question=XSS_SCRIPT, kb="sdk", channel=Channel.MCP,
        caller=Caller(key_prefix=key.prefix, tool="search_sdk_docs"))).request_id)
    return {"chat": chat, "mcp": mcp, "failed": failed, "img": img, "script": script}


@pytest.fixture
def ops_site(transactional_db, corpus_copy):
    """The fixture knowledge base, recorded requests, today's report and an ops reader, served by Daphne."""
    make_built_kb(corpus_copy)
    user = make_ops_user()
    records = make_records(user)
    # The records' local day, not today's: midnight may pass between recording them and building the report
    # (the live server reads the real clock, so this test cannot freeze it).
    report = daily_report_build(timezone.localdate(records["img"].created_at))
    with daphne() as url:
        yield {"url": url, "user": user, "records": records, "report": report}


class Visitor:
    """One signed-in browser page that counts dialogs and script errors and saves a screenshot per page."""

    def __init__(self, browser, url: str):  # noqa: F811  (the fixture's value, passed in)
        self.url = url
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", self._console)
        self.page.on("response", lambda response: response.status >= 400 and self.errors.append(
            f"{response.status} {response.url}"))

    def _console(self, message) -> None:
        source = message.location.get("url", "")
        if message.type == "error" and not source.endswith("/favicon.ico"):  # the site has none; Chromium asks
            self.errors.append(f"{message.text} ({source}, on {self.page.url})")

    def sign_in(self, username: str) -> None:
        self.page.goto(self.url + "/ops/login/?next=/ops/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", PASSWORD)
        with self.page.expect_navigation():
            self.page.click("main button:has-text('Sign in')")
        assert self.page.url == self.url + "/ops/", (self.page.url, self.page.inner_text("main")[:500])

    def visit(self, path: str, heading: str):
        response = self.page.goto(self.url + path)
        assert response is not None and response.status == 200, f"{path}: {response and response.status}"
        self.page.get_by_role("heading", name=heading, level=1).wait_for(state="visible", timeout=10_000)
        return self.page

    def screenshot(self, name: str) -> Path:
        path = Path(settings.DATA_DIR) / "screenshots" / f"ops-{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def markup_ran(self) -> bool:
        """Whether a recorded question became an element: an <img src=x> or a script calling alert."""
        return self.page.evaluate(
            "() => document.querySelectorAll('img[src=\"x\"]').length > 0 || "
            "[...document.scripts].some(s => s.textContent.includes('alert(1)'))")

    def overflows(self) -> bool:
        """Whether the page scrolls sideways (wide tables belong in their own scrolling box)."""
        return self.page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1")


def test_every_ops_page_renders_shows_markup_as_text_and_refreshes(ops_site, browser):  # noqa: F811
    records, report_day = ops_site["records"], ops_site["report"].day.isoformat()
    visitor = Visitor(browser, ops_site["url"])
    visitor.sign_in("opsreader")
    pages = [
        ("overview", "/ops/", "Quality overview"),
        ("eval-traffic", "/ops/eval-traffic", "Evaluation traffic"),
        ("requests", "/ops/requests", "Requests"),
        ("request", f"/ops/requests/{records['chat'].request_id}", f"Request {records['chat'].request_id}"),
        ("request-mcp", f"/ops/requests/{records['mcp'].request_id}", f"Request {records['mcp'].request_id}"),
        ("request-xss", f"/ops/requests/{records['script'].request_id}", f"Request {records['script'].request_id}"),
        ("live", "/ops/live", "Realtime"),
        ("reports", "/ops/reports", "Daily reports"),
        ("report", f"/ops/reports/{report_day}.html", f"Ops report {report_day}"),
        ("freshness", "/ops/freshness", "Freshness"),
        ("eval-center", "/ops/eval/", "Eval center"),
    ]
    texts, shots, wide = {}, {}, []
    for name, path, heading in pages:
        page = visitor.visit(path, heading)
        texts[name] = page.inner_text("body")
        assert not visitor.markup_ran(), f"{path} turned a recorded question into markup"
        if visitor.overflows():
            wide.append(name)
        shots[name] = visitor.screenshot(name)

    page = visitor.visit("/ops/live", "Realtime")
    first = page.inner_text("#at")
    page.wait_for_function("first => document.getElementById('at').textContent !== first", arg=first, timeout=7_000)
    visitor.visit(f"/ops/requests?key={records['mcp'].api_key_prefix}", "Requests")
    by_key = page.inner_text("main table")

    assert visitor.dialogs == [] and visitor.errors == []
    assert wide == []
    assert XSS_IMG in texts["requests"] and XSS_SCRIPT in texts["requests"]
    assert XSS_IMG in texts["report"] and XSS_SCRIPT in texts["report"]  # failed; and among the slowest
    assert XSS_IMG in texts["overview"]  # among the top failing web questions
    assert XSS_SCRIPT in texts["request-xss"]
    assert "wrong default" in texts["request"] and "thumbs-down" in texts["request"]
    assert "IDE plugin" in texts["request-mcp"] and "search_sdk_docs" in texts["request-mcp"]
    assert "generation_unavailable" in texts["requests"]
    assert "Fog near far" in by_key and "WebGLRenderer" not in by_key
    assert "sdk" in texts["freshness"] and "up to date" in texts["freshness"]
    assert "IDE plugin" in texts["requests"]
    assert all(path.stat().st_size > 5_000 for path in shots.values())


def test_replay_shows_the_recorded_and_active_answers_side_by_side(ops_site, browser):  # noqa: F811
    chat = ops_site["records"]["chat"]
    visitor = Visitor(browser, ops_site["url"])
    visitor.sign_in("opsreader")
    page = visitor.visit(f"/ops/requests/{chat.request_id}", f"Request {chat.request_id}")

    page.click("button:has-text('Replay')")
    page.get_by_role("heading", name=f"Replay of {chat.request_id}", level=1).wait_for(timeout=60_000)
    headers = page.locator("main table tr").first.inner_text()
    rows = page.locator("main table th").all_inner_texts()
    visitor.screenshot("replay")

    assert f"original ({chat.index_version})" in headers
    assert f"recorded version again ({chat.index_version})" in headers and "active version" in headers
    assert {"same plan?", "same evidence?", "same answer?"} <= set(rows)
    assert page.locator("td.same, td.differs").count() == 6
    assert visitor.dialogs == [] and visitor.errors == []
