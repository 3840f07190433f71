"""Issue 16, "No CSP": every HTML page carries a Content Security Policy (`default-src 'self'`, no inline script,
`frame-ancestors 'none'`) unless its view set its own, and the chat page, the admin, the ops site and the eval
center still work under it (a browser test, slow)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.utils import timezone

from apikeys.services import api_key_issue
from assistant.tests.test_browser import browser  # noqa: F401  (Debian's chromium via Playwright)
from evaluation.services.golden import golden_import
from evaluation.services.runs import eval_run_create
from evaluation.tests.test_runs import RETRIEVAL, jsonl
from opsboard.services import daily_report_build
from rag.tests.conftest import make_built_kb
from rag.tests.live import daphne

PASSWORD = "csp-admin-password-1"
PAGES = ["/ops/", "/ops/live", "/ops/requests", "/ops/reports", "/ops/freshness", "/ops/eval-traffic", "/ops/eval/",
         "/admin/", "/admin/apikeys/apikey/", "/admin/apikeys/apikey/add/", "/admin/rag/retrievalapp/add/", "/search"]
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.IGNORECASE)
INLINE_STYLE = re.compile(r"<style\b|\sstyle=|\son[a-z]+=", re.IGNORECASE)


def directives(policy: str) -> dict[str, str]:
    return {part.split()[0]: part.strip() for part in policy.split(";") if part.strip()}


def assert_the_default_policy(policy: str) -> None:
    found = directives(policy)
    assert found.get("default-src") == "default-src 'self'", policy
    assert found["frame-ancestors"] == "frame-ancestors 'none'"
    assert "'unsafe-inline'" not in found.get("script-src", found["default-src"])
    assert "'unsafe-eval'" not in policy


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("root", password="x")


def test_csp_every_html_page_gets_default_src_self_no_inline_script_and_frame_ancestors_none(client, superuser):
    anonymous = {path: client.get(path) for path in ["/ops/login/", "/admin/login/"]}
    client.force_login(superuser)

    pages = {path: client.get(path) for path in PAGES}

    for path, response in {**anonymous, **pages}.items():
        assert response.status_code == 200, path
        assert_the_default_policy(response.get("Content-Security-Policy", ""))


def test_csp_the_chat_page_keeps_its_own_policy_with_its_websocket(client, db):
    response = client.get("/")

    policy = directives(response["Content-Security-Policy"])
    assert_the_default_policy(response["Content-Security-Policy"])
    assert policy["connect-src"] == "connect-src 'self' ws://testserver wss://testserver"


def test_csp_json_answers_get_no_html_policy(client, superuser):
    client.force_login(superuser)

    response = client.get("/ops/live.json")

    assert response["Content-Type"].startswith("application/json")
    assert "Content-Security-Policy" not in response


def test_csp_the_pages_have_no_inline_script_style_or_event_handler(client, superuser, corpus_copy):
    make_built_kb(corpus_copy)
    golden_set = golden_import(name="csp", kind="retrieval", text=jsonl(RETRIEVAL))
    queued = eval_run_create(golden_set=golden_set)
    client.force_login(superuser)
    anonymous_login = client.__class__().get("/ops/login/").content.decode()

    pages = {path: client.get(path).content.decode() for path in [*PAGES, f"/ops/eval/runs/{queued.pk}", "/"]}

    for path, html in {**pages, "/ops/login/": anonymous_login}.items():
        assert not INLINE_SCRIPT.findall(html), path
        assert not INLINE_STYLE.findall(html), path


def test_csp_self_contained_reports_keep_their_inline_styles_and_run_no_script(client, superuser):
    report = daily_report_build(timezone.localdate())
    client.force_login(superuser)

    response = client.get(f"/ops/reports/{report.day.isoformat()}.html")

    policy = directives(response["Content-Security-Policy"])
    assert policy["default-src"] == "default-src 'none'"
    assert policy["style-src"] == "style-src 'unsafe-inline'"
    assert policy["frame-ancestors"] == "frame-ancestors 'none'"
    assert "script-src" not in policy  # default-src 'none': no script at all


# -- in a browser --------------------------------------------------------------------------------------------


class PolicyWatcher:
    """One browser page that records every CSP violation (event and console report) and every script error."""

    REPORT = """document.addEventListener('securitypolicyviolation', e => window.cspViolation(
        [e.violatedDirective, e.blockedURI, e.sourceFile + ':' + e.lineNumber, location.pathname].join(' ')));"""

    def __init__(self, browser, url: str):  # noqa: F811  (the fixture's value, passed in)
        self.url = url
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.violations: list[str] = []
        self.errors: list[str] = []
        self.policies: dict[str, str] = {}
        self.context.expose_function("cspViolation", lambda report: self.violations.append(report))
        self.context.add_init_script(self.REPORT)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", self._console)

    def _console(self, message) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.violations.append(f"{message.text} (on {self.page.url})")
        elif message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            self.errors.append(f"{message.text} (on {self.page.url})")

    def visit(self, path: str):
        response = self.page.goto(self.url + path)
        assert response is not None and response.status == 200, f"{path}: {response and response.status}"
        self.policies[path] = response.headers.get("content-security-policy", "")
        self.page.wait_for_load_state("load")
        return self.page


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_csp_chat_admin_ops_and_eval_pages_work_under_the_policy_in_a_browser(browser, corpus_copy):  # noqa: F811
    make_built_kb(corpus_copy)
    hasher = PBKDF2PasswordHasher()  # Daphne runs the production settings, without the test settings' MD5
    admin = get_user_model().objects.create(username="root", is_staff=True, is_superuser=True,
                                            password=hasher.encode(PASSWORD, hasher.salt()))
    key, _ = api_key_issue(owner=admin, name="IDE plugin")
    queued = eval_run_create(golden_set=golden_import(name="csp", kind="retrieval", text=jsonl(RETRIEVAL)))
    report = daily_report_build(timezone.localdate())
    with daphne() as url:
        watcher = PolicyWatcher(browser, url)
        page = watcher.visit("/ops/login/")
        page = watcher.visit("/admin/login/?next=/admin/")
        page.fill("input[name=username]", "root")
        page.fill("input[name=password]", PASSWORD)
        with page.expect_navigation():
            page.click("input[type=submit]")
        watcher.visit("/admin/")

        page = watcher.visit("/admin/apikeys/apikey/")
        page.click("#action-toggle")  # actions.js checks every row
        every_row_checked = page.eval_on_selector_all("input.action-select", "boxes => boxes.every(b => b.checked)")
        page = watcher.visit(f"/admin/apikeys/apikey/{key.pk}/change/")
        page.wait_for_selector(".datetimeshortcuts", timeout=10_000)  # DateTimeShortcuts.js adds "Today" and "Now"
        page = watcher.visit("/admin/rag/retrievalapp/add/")
        page.wait_for_selector(".selector-available", timeout=10_000)  # SelectFilter2.js builds the two boxes
        page = watcher.visit("/admin/apikeys/apikey/add/")
        page.fill("input[name=name]", "from the browser")
        page.select_option("select[name=owner]", str(admin.pk))
        with page.expect_navigation():
            page.click("input[name=_save]")
        shown_keys = page.locator("code.issued-key").all_inner_texts()

        watcher.visit("/ops/")
        with watcher.page.expect_response(lambda r: r.url.endswith("/ops/live.json"), timeout=10_000) as refresh:
            watcher.visit("/ops/live")
        watcher.visit(f"/ops/reports/{report.day.isoformat()}.html")
        watcher.visit("/ops/eval/")
        with watcher.page.expect_response(lambda r: r.url.endswith(f"/runs/{queued.pk}/progress"),
                                          timeout=10_000) as progress:
            watcher.visit(f"/ops/eval/runs/{queued.pk}")

        page = watcher.visit("/")  # chat.js streams the answer over the page's own WebSocket
        page.fill("#question", "PerspectiveCamera 的 fov 默认值是多少？")
        page.press("#question", "Enter")
        page.wait_for_selector(".turn .badges .badge", timeout=30_000)
        answer = page.inner_text(".turn .answer")

    for path, policy in watcher.policies.items():
        if path.endswith(".html"):  # a self-contained report: its own styles, no script
            assert directives(policy).get("default-src") == "default-src 'none'", path
        else:
            assert_the_default_policy(policy)
    assert watcher.violations == [] and watcher.errors == []
    assert every_row_checked and len(shown_keys) == 1
    assert refresh.value.status == 200 and progress.value.status == 200
    assert "50" in answer
