// The realtime page (opsboard/live.html): refresh the figures from data-url (/ops/live.json) every 3 s.
(function () {
  var url = document.currentScript.dataset.url;
  function text(id, value) { var el = document.getElementById(id); if (el) { el.textContent = value === null || value === undefined ? "?" : value; } }
  function row(cells) { var tr = document.createElement("tr"); cells.forEach(function (c) { var td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }); return tr; }
  function tick() {
    fetch(url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (s) {
      text("at", s.at_local); text("mcp_sessions", s.mcp_sessions); text("if_web", s.in_flight.web); text("if_mcp", s.in_flight.mcp);
      text("if_eval", s.in_flight.eval); text("if_other", s.in_flight_other); text("queue_depth", s.queue_depth); text("builds", s.builds_running.length);
      text("eval_runs", s.eval_runs_running); text("processes", s.processes);
      var b = document.getElementById("breaker");
      b.textContent = s.breaker ? ("state " + s.breaker.state + " · consecutive failures " + s.breaker.failures +
        (s.breaker.last_failures && s.breaker.last_failures.length ? " · last failures: " + s.breaker.last_failures.map(function (f) { return f.kind; }).join(", ") : ""))
        : "no generation model configured (extractive answers)";
      var table = document.getElementById("recent");
      while (table.rows.length > 1) { table.deleteRow(1); }
      s.recent.forEach(function (r) { table.tBodies[0].appendChild(row([r.channel, r.failed_5 + " / " + r.failed_15 + " / " + r.failed_60, r.slow_5 + " / " + r.slow_15 + " / " + r.slow_60, r.all_5 + " / " + r.all_15 + " / " + r.all_60])); });
    }).catch(function () {}).then(function () { setTimeout(tick, 3000); });
  }
  setTimeout(tick, 3000);
})();
