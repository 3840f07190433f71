"""The chat page in headless Chromium against a live Daphne server (slow; Debian's chromium, Playwright)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from assistant.models import Feedback
from rag.models import IndexVersion
from rag.services.knowledge import index_activate
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


def ask_again(page, question: str, turn: int):
    """Ask a further question on an open page and wait for that turn's final answer."""
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_selector(f"#a{turn} .badges .badge", timeout=30_000)


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


EMOJI = re.compile(r"[\U0001F300-\U0001FAFF\u2600-\u27BF]")


@pytest.mark.slow
def test_each_answer_has_its_own_citation_anchors_and_a_bracket_quoted_from_the_docs_is_not_a_link(
        live_daphne, browser, corpus_copy):
    page_text = (corpus_copy / "PerspectiveCamera.md").read_text(encoding="utf-8")
    (corpus_copy / "PerspectiveCamera.md").write_text(
        page_text.replace("垂直方向的视野角度，", "垂直方向的视野角度（见规范 [2] 第 3 节），"), encoding="utf-8")
    make_built_kb(corpus_copy)
    page = ask_on_the_page(browser, live_daphne, "PerspectiveCamera 的 fov 默认值是多少？")
    ask_again(page, "PerspectiveCamera 的 aspect 默认值是多少？", turn=2)

    anchor_ids = page.eval_on_selector_all("[id*='-cite-']", "nodes => nodes.map(n => n.id)")
    links_in_their_own_answer = page.eval_on_selector_all("sup.cite a", """links => links.map(a => {
        const target = document.getElementById(a.getAttribute('href').slice(1));
        return [a.closest('.turn').id, target ? target.closest('.turn').id : null]; })""")
    linked_numbers = page.eval_on_selector_all("#a1 .answer sup.cite a", "links => links.map(a => a.dataset.cite)")
    cited_numbers = page.eval_on_selector_all("#a1 .citations li", "items => items.map(i => i.id.split('-').pop())")
    page.click("#a2 .answer sup.cite a >> nth=0")
    first_answer_html = page.inner_html("#a1 .answer")

    assert len(anchor_ids) == len(set(anchor_ids)) and {"a1-cite-1", "a2-cite-1"} <= set(anchor_ids)
    assert {turn for turn, _ in links_in_their_own_answer} == {"a1", "a2"}
    assert all(turn == target for turn, target in links_in_their_own_answer)
    assert page.evaluate("location.hash") == "#a2-cite-1"
    assert page.locator("#a2-cite-1 details").evaluate("d => d.open")
    assert not page.locator("#a1-cite-1 details").evaluate("d => d.open")
    assert page.locator("#a1-cite-2").count() == 1  # [2] is a citation of this answer, and yet…
    assert "见规范 [2] 第 3 节" in first_answer_html  # …inside the quoted docs it stays plain text
    assert set(linked_numbers) == set(cited_numbers)  # the answer's own markers, in its quotes too, are links


@pytest.mark.slow
def test_an_example_question_on_the_empty_page_asks_when_clicked(live_daphne, browser, corpus_copy):
    make_built_kb(corpus_copy)
    page = browser.new_page(locale="en-US")
    page.goto(live_daphne + "/")
    chips = page.locator("#examples button.example")
    chip_texts = chips.all_inner_texts()

    chips.nth(0).click()
    page.wait_for_selector("#a1 .badges .badge", timeout=30_000)

    assert chip_texts[0] == "How do I rebuild the index?" and len(chip_texts) == 3
    assert page.inner_text("#a1 .question") == "How do I rebuild the index?"
    assert not page.is_visible("#examples")


@pytest.mark.slow
def test_the_page_works_under_its_policy_with_svg_icons_and_the_version_behind_a_toggle(
        live_daphne, browser, corpus_copy):
    kb = make_built_kb(corpus_copy)
    page = browser.new_page()
    problems = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    served = page.goto(live_daphne + "/")
    html = served.text()
    page.fill("#question", "PerspectiveCamera 的 fov 默认值是多少？")
    page.press("#question", "Enter")
    page.wait_for_selector("#a1 .badges .badge", timeout=30_000)
    control_texts = page.eval_on_selector_all(
        "button, summary, .badge, .feedback-state",
        "nodes => nodes.map(n => n.textContent + ' ' + (n.getAttribute('aria-label') || '') + ' ' + (n.title || ''))")
    conversation_before = page.inner_text("#conversation")
    version_visible_before = page.is_visible("#a1 .about-version")

    page.click("#a1 .about summary")

    assert "script-src 'self'" in served.headers["content-security-policy"]
    assert re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S) == [""]
    assert not re.search(r"\son[a-z]+\s*=", html)
    assert problems == []  # no policy violation, no script error
    assert "50" in page.inner_text("#a1 .answer")
    assert not [text for text in control_texts if EMOJI.search(text)]
    assert page.locator("#a1 .thumbs-down svg").count() == 1
    assert page.locator("#a1 .citations button.exclude svg").count() >= 1
    assert page.get_attribute("#a1 .citations button.exclude >> nth=0", "aria-label").startswith("Don't use this source")
    assert not version_visible_before and kb.active_version.name not in conversation_before
    assert page.is_visible("#a1 .about-version")
    assert page.inner_text("#a1 .about-version") == kb.active_version.name


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_while_the_docs_are_indexed_the_page_waits_calmly_and_asks_again_on_its_own(
        live_daphne, browser, corpus_copy, transport):
    kb = make_built_kb(corpus_copy)
    ready = kb.active_version
    kb.active_version = None
    kb.save()
    # A live server reads the real clock, so the build's heartbeat is "now" there too.
    IndexVersion.objects.create(kb=kb, name="first-build", model_id=ready.model_id, progress_done=41,
                                progress_total=100, heartbeat_at=timezone.now())
    page = browser.new_page()
    if transport == "http":  # a network where the socket cannot open: the page asks POST /api/chat
        page.add_init_script("delete window.WebSocket;")
    api_replies = []
    page.on("response", lambda response: api_replies.append(
        (response.status, response.headers.get("retry-after"))) if response.url.endswith("/api/chat") else None)
    page.goto(live_daphne + "/")
    status_on_load = page.inner_text("#status")

    page.fill("#question", "PerspectiveCamera 的 fov 默认值是多少？")
    page.press("#question", "Enter")
    page.wait_for_selector("#a1 .answer .waiting", timeout=15_000)
    waiting_text = page.inner_text("#a1 .answer")
    status_class = page.get_attribute("#status", "class")
    errors_shown = page.locator("#a1 .error").count()
    IndexVersion.objects.filter(name="first-build").update(status=IndexVersion.Status.FAILED)
    index_activate(ready)
    page.wait_for_selector("#a1 .badges .badge", timeout=30_000)

    assert status_on_load.startswith("Indexing the sdk knowledge base: 41%")
    assert "Indexing the sdk knowledge base: 41%" in waiting_text and "asking again in 5 s" in waiting_text
    assert "waiting" in status_class and errors_shown == 0
    assert "50" in page.inner_text("#a1 .answer")
    assert page.inner_text("#status") == ""
    if transport == "http":
        assert api_replies[0] == (503, "5") and api_replies[-1][0] == 200
    else:
        assert api_replies == []


@pytest.mark.slow
def test_the_version_selector_asks_the_chosen_sdk_version_and_remembers_it(live_daphne, browser, tmp_path):
    from rag.tests.sdk_fixture import build_sdk

    build_sdk(tmp_path)
    page = browser.new_page()
    page.goto(live_daphne + "/")
    page.select_option("#kb", "fx")
    options = page.locator("#sdk-version option").all_inner_texts()
    page.select_option("#sdk-version", "2.0")
    page.fill("#question", "How does captureFrame work?")
    page.press("#question", "Enter")
    page.wait_for_selector(".turn .badges .badge", timeout=30_000)
    answer = page.inner_text(".turn .answer")
    page.reload()
    page.select_option("#kb", "fx")

    assert options == ["latest", "2.1", "2.0", "1.4"]
    assert "captureFrame was added in 2.1" in answer.replace("`", "")
    assert page.locator("#sdk-version").input_value() == "2.0"  # remembered by this browser
