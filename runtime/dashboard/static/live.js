// runtime dashboard: live numbers without reloading, and confirmations before
// destructive actions. Polls the JSON the body names (data-live-src) every 2 s and
// replaces the text of every element marked data-live="key" (data-live-html: the
// server-drawn plot); the answer's next_ms spaces out reads that cost the server
// more. No libraries; nothing loads from anywhere else.
(function () {
  "use strict";
  var POLL_MS = 2000;

  function apply(answer) {
    var values = answer.values || {}, html = answer.html || {};
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var key = el.getAttribute("data-live");
      if (Object.prototype.hasOwnProperty.call(values, key) && el.textContent !== values[key]) {
        el.textContent = values[key];
        if (key === "job.state") { el.className = "state st-" + values[key]; }
      }
    });
    document.querySelectorAll("[data-live-html]").forEach(function (el) {
      var key = el.getAttribute("data-live-html");
      if (Object.prototype.hasOwnProperty.call(html, key)) { el.innerHTML = html[key]; }
    });
  }

  function status(text, stale) {
    var el = document.querySelector("[data-live-status]");
    if (el) { el.textContent = text; el.classList.toggle("stale", stale); }
  }

  function poll(src) {
    var wait = POLL_MS;
    if (document.hidden) { setTimeout(function () { poll(src); }, wait); return; }
    fetch(src, { headers: { "Accept": "application/json" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (answer) {
        if (answer.next_ms > wait) { wait = answer.next_ms; }
        apply(answer);
        status("live, updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (err) { status("live updates paused: " + err.message, true); })
      .then(function () { setTimeout(function () { poll(src); }, wait); });
  }

  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  var src = document.body.getAttribute("data-live-src");
  if (src) { setTimeout(function () { poll(src); }, POLL_MS); }
})();
