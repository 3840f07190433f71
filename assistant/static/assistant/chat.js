// The chat page: ask over a WebSocket (or POST /api/chat where a socket cannot open), render the answer as
// safe Markdown, link the answer's own citation markers to its citations, send thumbs-down feedback, re-ask
// without a source the user switched off, and wait calmly while the documentation is being indexed.
// No inline script and no inline handlers: the page works under `script-src 'self'`.
(function () {
  "use strict";
  const form = document.getElementById("ask");
  const input = document.getElementById("question");
  const kbSelect = document.getElementById("kb");
  const versionSelect = document.getElementById("sdk-version");
  const status = document.getElementById("status");
  const conversation = document.getElementById("conversation");
  const examples = document.getElementById("examples");
  const template = document.getElementById("turn");
  const excludeIcon = document.getElementById("icon-exclude");
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  const DEFAULT_RETRY_SECONDS = 5;  // the question service's Retry-After while a first index is built
  let socket = null;
  let pending = null;  // the question the socket is answering ({socket, payload, turn}) until its final or error frame
  let current = null;
  let turnCount = 0;
  let retryTimer = null;

  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Which `[n]` in an answer are the answer's own citation markers: never one inside code, never one glued
  // to a name (`a[1]` indexes an array), only a number in the answer's citation list, and in an extractive
  // answer or a quoted (`> `) line only the markers that end the line. The extractive generator puts its
  // markers there, after each sentence group and each quote, while the documentation text it quotes may
  // hold brackets anywhere; the answer payload itself does not say which brackets are quoted text.
  function citationLinker(turn, citations, mode) {
    const numbers = new Set(citations.map(function (c) { return String(c.number); }));
    const linker = function (lineEnd) { return function (text, endsParagraph) {
      return text.replace(/\[(\d{1,3})\]/g, function (marker, number, offset, whole) {
        if (!numbers.has(number)) return marker;
        if (/[A-Za-z_]/.test(whole.charAt(offset - 1))) return marker;
        if (lineEnd) {
          const rest = whole.slice(offset + marker.length).replace(/^(?:\[\d{1,3}\])+/, "");
          const atEnd = endsParagraph ? /^[ \t]*(?:<br>|$)/.test(rest) : /^[ \t]*<br>/.test(rest);
          if (!atEnd) return marker;
        }
        return '<sup class="cite"><a href="#' + turn.id + "-cite-" + number + '" data-cite="' + number + '">[' +
          number + "]</a></sup>";
      });
    }; };
    return { text: linker(mode === "extractive"), quote: linker(true) };
  }

  // Markdown subset on text that is escaped first, so nothing in a question, a document or an answer can
  // become markup: fences, inline code, bold, headings, lists, quotes, paragraphs; `link` (from
  // citationLinker, or null while an answer streams in) marks citations in text and in quotes.
  function renderMarkdown(source, link) {
    const blocks = [];
    const parts = source.split(/```[\w-]*\n?/);
    parts.forEach(function (part, index) {
      if (index % 2 === 1) { blocks.push("<pre><code>" + escapeHtml(part.replace(/\n$/, "")) + "</code></pre>"); return; }
      escapeHtml(part).split(/\n{2,}/).forEach(function (para) {
        if (!para.trim()) return;
        const lines = para.split("\n").filter(Boolean);
        if (lines.every(function (l) { return /^&gt; ?/.test(l); })) {
          blocks.push("<blockquote><p>" + inline(lines.map(function (l) { return l.replace(/^&gt; ?/, ""); })
            .join("<br>"), link && link.quote) + "</p></blockquote>");
          return;
        }
        if (/^#{1,6} /.test(para)) { blocks.push("<h3>" + inline(para.replace(/^#{1,6} /, ""), link && link.text) + "</h3>"); }
        else if (/^\s*[-*] /m.test(para)) {
          blocks.push("<ul>" + lines.map(function (l) { return "<li>" + inline(l.replace(/^\s*[-*] /, ""), link && link.text) + "</li>"; })
            .join("") + "</ul>");
        } else { blocks.push("<p>" + inline(para.replace(/\n/g, "<br>"), link && link.text) + "</p>"); }
      });
    });
    return blocks.join("");
  }

  // Inline code is kept apart first, so a bracket inside it is never a citation.
  function inline(html, link) {
    const pieces = html.split(/(`[^`]+`)/);
    return pieces.map(function (piece, index) {
      if (index % 2 === 1) return "<code>" + piece.slice(1, -1) + "</code>";
      const bold = piece.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
      return link ? link(bold, index === pieces.length - 1) : bold;
    }).join("");
  }

  function connect() {
    return new Promise(function (resolve, reject) {
      if (typeof WebSocket !== "function") { reject(new Error("no WebSocket")); return; }
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const opening = new WebSocket(scheme + location.host + "/ws/chat");
      opening.onmessage = function (message) {
        const event = JSON.parse(message.data);
        if (pending && pending.socket === opening && (event.type === "final" || event.type === "error")) pending = null;
        handle(event);
      };
      opening.onopen = function () { socket = opening; resolve(); };
      opening.onerror = function () { reject(new Error("the socket did not open")); };
      // A socket that closes before its answer's final or error frame (the server stopped, or could not reach
      // its channel layer and closed with 1011) leaves the question unanswered: ask it over HTTP instead.
      opening.onclose = function () {
        if (socket === opening) socket = null;
        if (pending && pending.socket === opening) {
          const unanswered = pending;
          pending = null;
          askOverHttp(unanswered.payload, unanswered.turn);
        }
      };
    });
  }

  async function ask(question, exclude, turn) {
    clearTimeout(retryTimer);
    retryTimer = null;
    current = turn || newTurn(question);
    current.text = "";
    current.exclude = exclude || [];
    current.node.querySelector(".answer").innerHTML = "";
    current.node.querySelector(".citations").innerHTML = "";
    current.node.querySelector(".badges").innerHTML = "";
    setStatus("Thinking…");
    const payload = { question: question, kb: kbSelect.value, exclude: current.exclude };
    if (!versionSelect.hidden && versionSelect.value) { payload.sdk_version = versionSelect.value; }
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      try { await connect(); } catch (error) { askOverHttp(payload, current); return; }
    }
    pending = { socket: socket, payload: payload, turn: current };
    socket.send(JSON.stringify(payload));
  }

  // The non-streaming form of the same question, for networks where the socket cannot open or closes early.
  async function askOverHttp(payload, turn) {
    let response;
    try {
      response = await fetch("/api/chat", { method: "POST", headers: { "Content-Type": "application/json" },
                                            body: JSON.stringify(payload) });
    } catch (error) {
      handleFor(turn, { type: "error", code: "network_error", message: "The server could not be reached." });
      return;
    }
    const body = await response.json().catch(function () { return {}; });
    if (response.ok) { handleFor(turn, Object.assign({ type: "final" }, body)); return; }
    const error = body.error || body;
    handleFor(turn, { type: "error", code: error.code || "http_" + response.status,
                      message: error.message || "The answer failed.",
                      retry_after: Number(response.headers.get("Retry-After")) || undefined });
  }

  function newTurn(question) {
    const node = template.content.firstElementChild.cloneNode(true);
    turnCount += 1;
    const turn = { id: "a" + turnCount, node: node, question: question, text: "", exclude: [], requestId: null };
    node.id = turn.id;
    node.querySelector(".question").textContent = question;
    conversation.appendChild(node);
    if (examples) examples.hidden = true;
    node.querySelector(".thumbs-down").addEventListener("click", function () { thumbsDown(turn); });
    return turn;
  }

  function setStatus(text, waiting) {
    status.textContent = text;
    status.classList.toggle("waiting", Boolean(waiting));
  }

  function handle(event) { if (current) handleFor(current, event); }

  function handleFor(turn, event) {
    const node = turn.node;
    if (event.type === "plan") {
      const plan = event.plan;
      node.querySelector(".plan").textContent = [
        plan.classes.length ? plan.classes.join(", ") : "",
        plan.corrections.length ? "corrected " + plan.corrections.map(function (c) { return c.from + "→" + c.to; }).join(", ") : "",
      ].filter(Boolean).join(" · ");
      showAbout(turn, event);
    } else if (event.type === "token") {
      turn.text += event.text;
      node.querySelector(".answer").innerHTML = renderMarkdown(turn.text, null);  // citations link once final
      setStatus("Answering…");
    } else if (event.type === "final") {
      turn.requestId = event.request_id;
      showAbout(turn, event);
      node.querySelector(".answer").innerHTML =
        renderMarkdown(event.answer, citationLinker(turn, event.citations || [], event.mode));
      const badges = node.querySelector(".badges");
      badges.innerHTML = "";
      [["confidence " + event.confidence, event.confidence], [event.mode, ""]].concat(
        event.degraded ? [["model unavailable: showing the evidence", "degraded"]] : []).forEach(function (b) {
        const span = document.createElement("span");
        span.className = "badge " + b[1];
        span.textContent = b[0];
        badges.appendChild(span);
      });
      renderCitations(turn, event.citations || []);
      setStatus(event.reason && event.mode === "empty" ? "No answer: " + event.reason.replace(/_/g, " ") : "");
    } else if (event.type === "error" && event.code === "index_building") {
      waitForIndex(turn, event);
    } else if (event.type === "error") {
      node.querySelector(".answer").innerHTML = '<p class="error"></p>';
      node.querySelector(".answer .error").textContent = event.code === "token_pool_exhausted"
        ? "Today's question budget is used up; it refills at midnight." : (event.message || event.code);
      setStatus("");
    }
  }

  // The documentation is still being indexed: say so calmly and ask again after Retry-After seconds.
  function waitForIndex(turn, event) {
    const seconds = Math.max(1, Number(event.retry_after) || DEFAULT_RETRY_SECONDS);
    const message = event.message || "Indexing the documentation…";
    turn.node.querySelector(".answer").innerHTML = '<p class="waiting"></p>';
    turn.node.querySelector(".answer .waiting").textContent = message + " (asking again in " + seconds + " s)";
    setStatus(message, true);
    clearTimeout(retryTimer);
    retryTimer = setTimeout(function () { ask(turn.question, turn.exclude, turn); }, seconds * 1000);
  }

  // The SDK versions of the chosen knowledge base (newest first; "latest" reads the newest release), and the one
  // this browser chose last for it.
  function versionKey() { return "rag.sdkVersion." + kbSelect.value; }

  function showVersions() {
    const option = kbSelect.options ? kbSelect.options[kbSelect.selectedIndex] : null;
    const versions = option && option.dataset ? JSON.parse(option.dataset.versions || "[]") : [];
    versionSelect.innerHTML = "";
    versionSelect.hidden = versions.length === 0;
    ["latest"].concat(versions).forEach(function (name) {
      const item = document.createElement("option");
      item.value = name === "latest" ? "" : name;
      item.textContent = name;
      versionSelect.appendChild(item);
    });
    let remembered = null;
    try { remembered = window.localStorage.getItem(versionKey()); } catch (error) { remembered = null; }
    if (remembered && versions.indexOf(remembered) >= 0) { versionSelect.value = remembered; }
  }

  versionSelect.addEventListener("change", function () {
    try { window.localStorage.setItem(versionKey(), versionSelect.value); } catch (error) { /* private mode */ }
  });
  kbSelect.addEventListener("change", showVersions);
  showVersions();

  function showAbout(turn, event) {
    turn.node.querySelector(".about-kb").textContent = (event.kb || "")
      + (event.sdk_version ? " (SDK version " + event.sdk_version + ")" : "");
    turn.node.querySelector(".about-version").textContent = event.version || "";
    // Which docs answered: the version's build time, and the git commit or website crawl it was built from.
    const built = event.built_at ? new Date(event.built_at).toLocaleString() : "";
    const revision = (event.source_revision || "").startsWith("crawled") ? event.source_revision
      : (event.source_revision || "").slice(0, 12);
    turn.node.querySelector(".about-docs").textContent = [built, revision].filter(Boolean).join(" · ");
    turn.node.querySelector(".about-request").textContent = event.request_id || "";
  }

  function renderCitations(turn, citations) {
    const list = turn.node.querySelector(".citations");
    list.innerHTML = "";
    citations.forEach(function (c) {
      const item = document.createElement("li");
      item.id = turn.id + "-cite-" + c.number;
      const details = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "[" + c.number + "] " + c.source + " · " + c.heading_path;
      const body = document.createElement("pre");
      body.textContent = c.content || "";
      const toggle = document.createElement("button");
      toggle.type = "button";
      toggle.className = "exclude icon-button";
      const label = "Don't use this source: ask again without [" + c.number + "]";
      toggle.title = label;
      toggle.setAttribute("aria-label", label);
      toggle.appendChild(excludeIcon.content.firstElementChild.cloneNode(true));
      toggle.addEventListener("click", function () {
        ask(turn.question, turn.exclude.concat([c.chunk_id]), turn);
      });
      details.append(summary, body);
      item.append(details, toggle);
      list.appendChild(item);
    });
  }

  // A citation link opens the cited chunk of its own answer.
  conversation.addEventListener("click", function (event) {
    const link = event.target.closest("sup.cite a");
    if (!link) return;
    const target = document.getElementById(link.getAttribute("href").slice(1));
    const details = target && target.querySelector("details");
    if (details) details.open = true;
  });

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

  if (examples) {
    examples.addEventListener("click", function (event) {
      const chip = event.target.closest("button.example");
      if (!chip) return;
      input.value = chip.dataset.question;
      form.requestSubmit();
    });
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
