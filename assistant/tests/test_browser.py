"""The chat page in headless Chromium against a live Daphne server (slow; Debian's chromium, Playwright)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.conf import settings

from assistant.models import Feedback
from rag.tests.conftest import make_built_kb
from rag.tests.live import daphne

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def live_daphne(transactional_db):
    """Daphne serving the project on a free loopback port, on the test database and data folder."""
    with daphne() as url:
        yield url


@pytest.fixture
def browser(monkeypatch):
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the test's own ORM calls are plain sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    # Chromium hangs under libfaketime, which `make test-clock` preloads into every process: the browser alone
    # keeps the real clock (the clock runs stay days from it, well within the sign-in cookie's two weeks).
    real_clock = {name: value for name, value in os.environ.items() if name != "LD_PRELOAD"}
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, env=real_clock,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"])
        yield instance
        instance.close()


def ask_on_the_page(browser, url: str, question: str):
    """Open the chat page, ask, and wait until the final answer's badges are shown."""
    page = browser.new_page()
    page.goto(url + "/")
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_selector(".turn .badges .badge", timeout=30_000)
    return page


@pytest.mark.slow
def test_ask_stream_cite_thumbs_down_and_re_ask_without_a_source(live_daphne, browser, corpus_copy):
    make_built_kb(corpus_copy)
    page = ask_on_the_page(browser, live_daphne, "PerspectiveCamera 的 fov 默认值是多少？")
    first_answer = page.inner_text(".turn .answer")
    first_sources = page.locator(".turn .citations summary").all_inner_texts()
    screenshot = Path(settings.DATA_DIR) / "screenshots" / "chat.png"
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot), full_page=True)

    page.once("dialog", lambda dialog: dialog.accept("not what I asked"))
    page.click(".turn .thumbs-down")
    page.wait_for_selector("text=Thanks, noted.", timeout=10_000)

    page.click(".turn .citations li >> nth=0 >> button.exclude")
    page.wait_for_function(
        "first => document.querySelector('.turn .citations summary') && "
        "document.querySelector('.turn .citations summary').textContent !== first", arg=first_sources[0],
        timeout=30_000)

    assert first_sources and "PerspectiveCamera" in first_sources[0]
    assert "50" in first_answer
    assert first_sources[0] not in page.locator(".turn .citations summary").all_inner_texts()
    assert Feedback.objects.get().reason == "not what I asked"
    assert screenshot.stat().st_size > 10_000


@pytest.mark.slow
def test_a_script_in_a_question_is_shown_as_text_and_never_runs(live_daphne, browser, corpus_copy):
    make_built_kb(corpus_copy)

    page = ask_on_the_page(browser, live_daphne,
                           "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script> Fog near")

    assert page.evaluate("window.__pwned") is None
    assert "<script>window.__pwned=1</script>" in page.inner_text(".turn .question")
