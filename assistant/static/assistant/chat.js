// The chat page: ask over a WebSocket, render the streamed answer as safe Markdown, show citations,
// send thumbs-down feedback, and re-ask without a source the user switched off.
(function () {
  "use strict";
  const form = document.getElementById("ask");
  const input = document.getElementById("question");
  const kbSelect = document.getElementById("kb");
  const status = document.getElementById("status");
  const conversation = document.getElementById("conversation");
  const template = document.getElementById("turn");
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  let socket = null;
  let current = null;

  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Markdown subset on text that is escaped first, so nothing in a question, a document or an
  // answer can become markup: fences, inline code, bold, headings, lists, paragraphs, [n] citations.
  function renderMarkdown(source) {
    const blocks = [];
    const parts = source.split(/```[\w-]*\n?/);
    parts.forEach(function (part, index) {
      if (index % 2 === 1) { blocks.push("<pre><code>" + escapeHtml(part.replace(/\n$/, "")) + "</code></pre>"); return; }
      escapeHtml(part).split(/\n{2,}/).forEach(function (para) {
        if (!para.trim()) return;
        let html = para
          .replace(/`([^`]+)`/g, "<code>$1</code>")
          .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
          .replace(/\[(\d{1,3})\]/g, '<sup class="cite"><a href="#cite-$1">[$1]</a></sup>');
        if (/^#{1,6} /.test(html)) { html = "<h3>" + html.replace(/^#{1,6} /, "") + "</h3>"; }
        else if (/^\s*[-*] /m.test(html)) {
          html = "<ul>" + html.split("\n").filter(Boolean).map(function (l) { return "<li>" + l.replace(/^\s*[-*] /, "") + "</li>"; }).join("") + "</ul>";
        } else { html = "<p>" + html.replace(/\n/g, "<br>") + "</p>"; }
        blocks.push(html);
      });
    });
    return blocks.join("");
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/chat");
    socket.onmessage = function (message) { handle(JSON.parse(message.data)); };
    socket.onclose = function () { socket = null; };
    return new Promise(function (resolve, reject) { socket.onopen = resolve; socket.onerror = reject; });
  }

  async function ask(question, exclude, turn) {
    if (!socket || socket.readyState !== WebSocket.OPEN) { await connect(); }
    current = turn || newTurn(question);
    current.text = "";
    current.exclude = exclude || [];
    current.node.querySelector(".answer").innerHTML = "";
    current.node.querySelector(".citations").innerHTML = "";
    current.node.querySelector(".badges").innerHTML = "";
    status.textContent = "Thinking…";
    socket.send(JSON.stringify({ question: question, kb: kbSelect.value, exclude: current.exclude }));
  }

  function newTurn(question) {
    const node = template.content.firstElementChild.cloneNode(true);
    node.querySelector(".question").textContent = question;
    conversation.appendChild(node);
    const turn = { node: node, question: question, text: "", exclude: [], requestId: null };
    node.querySelector(".thumbs-down").addEventListener("click", function () { thumbsDown(turn); });
    return turn;
  }

  function handle(event) {
    const node = current && current.node;
    if (!node) return;
    if (event.type === "plan") {
      const plan = event.plan;
      node.querySelector(".plan").textContent = event.kb + "@" + event.version +
        (plan.classes.length ? " · " + plan.classes.join(", ") : "") +
        (plan.corrections.length ? " · corrected " + plan.corrections.map(function (c) { return c.from + "→" + c.to; }).join(", ") : "");
    } else if (event.type === "token") {
      current.text += event.text;
      node.querySelector(".answer").innerHTML = renderMarkdown(current.text);
      status.textContent = "Answering…";
    } else if (event.type === "final") {
      current.requestId = event.request_id;
      node.querySelector(".answer").innerHTML = renderMarkdown(event.answer);
      const badges = node.querySelector(".badges");
      badges.innerHTML = "";
      [["confidence " + event.confidence, event.confidence], [event.mode, ""]].concat(
        event.degraded ? [["model unavailable: showing the evidence", "degraded"]] : []).forEach(function (b) {
        const span = document.createElement("span");
        span.className = "badge " + b[1];
        span.textContent = b[0];
        badges.appendChild(span);
      });
      renderCitations(event.citations);
      status.textContent = event.reason && event.mode === "empty" ? "No answer: " + event.reason.replace(/_/g, " ") : "";
    } else if (event.type === "error") {
      node.querySelector(".answer").innerHTML = '<p class="error"></p>';
      node.querySelector(".answer .error").textContent = event.code === "token_pool_exhausted"
        ? "Today's question budget is used up; it refills at midnight." : (event.message || event.code);
      status.textContent = "";
    }
  }

  function renderCitations(citations) {
    const list = current.node.querySelector(".citations");
    list.innerHTML = "";
    const turn = current;
    citations.forEach(function (c) {
      const item = document.createElement("li");
      item.id = "cite-" + c.number;
      const details = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "[" + c.number + "] " + c.source + " · " + c.heading_path;
      const body = document.createElement("pre");
      body.textContent = c.content || "";
      const toggle = document.createElement("button");
      toggle.type = "button";
      toggle.className = "exclude";
      toggle.textContent = "Don't use this source";
      toggle.addEventListener("click", function () {
        ask(turn.question, turn.exclude.concat([c.chunk_id]), turn);
      });
      details.append(summary, body);
      item.append(details, toggle);
      list.appendChild(item);
    });
  }

  async function thumbsDown(turn) {
    if (!turn.requestId) return;
    const reason = window.prompt("What was wrong? (optional)", "") || "";
    const response = await fetch("/api/feedback", {
      method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify({ request_id: turn.requestId, reason: reason }),
    });
    turn.node.querySelector(".feedback-state").textContent = response.ok ? "Thanks, noted." : "Could not send feedback.";
    turn.node.querySelector(".thumbs-down").disabled = response.ok;
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const question = input.value.trim();
    if (!question) return;
    input.value = "";
    ask(question, []);
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });
})();
