// A run's page (evaluation/run.html) while it runs: poll data-url for progress, reload when it ends.
(function () {
  var url = document.currentScript.dataset.url;
  function tick() {
    fetch(url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (s) {
      document.getElementById("bar").value = s.done;
      document.getElementById("done").textContent = s.done;
      document.getElementById("current").textContent = s.current_question || "";
      document.getElementById("status").textContent = s.status;
      if (["done", "failed", "cancelled"].indexOf(s.status) >= 0) { window.location.reload(); }
      else { setTimeout(tick, 2000); }
    }).catch(function () { setTimeout(tick, 5000); });
  }
  setTimeout(tick, 2000);
})();
