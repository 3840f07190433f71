"""chat.js falls back to POST /api/chat when its socket closes before the answer (issue 28), run in Node with a
minimal fake page: a socket that opens, takes the question and closes (Redis down: the server closes with 1011)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

CHAT_JS = Path(__file__).resolve().parents[1] / "static" / "assistant" / "chat.js"

HARNESS = r"""
const fs = require("fs");
function element() {
  const children = {};
  return { value: "", textContent: "", innerHTML: "", hidden: false, disabled: false, id: "", dataset: {},
    handlers: {}, classList: { toggle() {} },
    addEventListener(name, handler) { this.handlers[name] = handler; },
    querySelector(selector) { return children[selector] || (children[selector] = element()); },
    appendChild(child) { return child; }, append() {}, cloneNode() { return element(); },
    setAttribute() {}, getAttribute() { return ""; } };
}
const elements = {};
const form = element();
form.requestSubmit = function () { form.handlers.submit({ preventDefault() {} }); };
elements.ask = form;
const turnTemplate = element();
turnTemplate.content = { firstElementChild: element() };
turnTemplate.content.firstElementChild.cloneNode = function () { return this; };  // the one turn of this page
elements.turn = turnTemplate;
const excludeIcon = element();
excludeIcon.content = { firstElementChild: element() };
elements["icon-exclude"] = excludeIcon;
global.document = {
  getElementById(id) { return elements[id] || (elements[id] = element()); },
  querySelector() { return { value: "token" }; },
  createElement() { return element(); },
};
global.location = { protocol: "http:", host: "testserver" };
global.window = { prompt() { return ""; } };
const log = { sockets: 0, sent: [], fetched: [] };
class FakeSocket {
  constructor(url) {
    log.sockets += 1;
    this.readyState = 0;
    setTimeout(() => { this.readyState = FakeSocket.OPEN; this.onopen && this.onopen(); }, 0);
  }
  send(data) {  // the server takes the question, then the socket closes without an answer (1011)
    log.sent.push(JSON.parse(data));
    setTimeout(() => { this.readyState = 3; this.onclose && this.onclose({ code: 1011 }); }, 0);
  }
  close() {}
}
FakeSocket.OPEN = 1;
global.WebSocket = FakeSocket;
global.fetch = async function (url, options) {
  log.fetched.push([url, JSON.parse(options.body)]);
  return { ok: true, status: 200, headers: { get() { return null; } },
           json: async () => ({ answer: "The default fov is 50.", citations: [], confidence: "high", mode: "extractive",
                                request_id: "r1" }) };
};
eval(fs.readFileSync(process.argv[2], "utf8"));
document.getElementById("question").value = "PerspectiveCamera fov";
form.requestSubmit();
process.once("beforeExit", () => {  // nothing left to run: the page has done all it will
  log.answer = turnTemplate.content.firstElementChild.querySelector(".answer").innerHTML;
  log.status = document.getElementById("status").textContent;
  console.log(JSON.stringify(log));
});
"""


def test_a_socket_that_closes_before_the_answer_sends_the_question_over_http(tmp_path):
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is not installed")
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS, encoding="utf-8")

    result = subprocess.run([node, str(harness), str(CHAT_JS)], capture_output=True, text=True, timeout=60)

    log = json.loads(result.stdout.strip().splitlines()[-1])
    assert log["sockets"] == 1 and log["sent"][0]["question"] == "PerspectiveCamera fov"
    assert log["fetched"] == [["/api/chat", log["sent"][0]]]
    assert "50" in log["answer"] and log["status"] != "Thinking…"
