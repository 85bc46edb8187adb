// mlqueue: live pages. A page marks what to refresh with data-live-refresh="<css selector>";
// the server pushes "these jobs changed" over a WebSocket and the page re-fetches just that
// fragment (htmx), at most every half second, and again after a reconnect.
(function () {
  function connect(path, onMessage, status) {
    var delay = 1000, refreshTimer = null;
    function open() {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      var socket = new WebSocket(scheme + location.host + path);
      socket.onopen = function () { delay = 1000; if (status) { status.textContent = "live"; status.className = "live"; } onMessage({reconnected: true}); };
      socket.onmessage = function (event) { onMessage(JSON.parse(event.data)); };
      socket.onclose = function () {
        if (status) { status.textContent = "reconnecting…"; status.className = "live off"; }
        setTimeout(open, delay); delay = Math.min(delay * 2, 15000);
      };
    }
    open();
  }
  function debounce(fn, ms) {
    var timer = null;
    return function () { if (timer) return; timer = setTimeout(function () { timer = null; fn(); }, ms); };
  }
  document.addEventListener("DOMContentLoaded", function () {
    var root = document.querySelector("[data-live-path]");
    if (!root) return;
    var target = root.getAttribute("data-live-refresh");
    var status = document.getElementById("live-status");
    var refresh = debounce(function () { htmx.trigger(target, "refresh"); }, 500);
    connect(root.getAttribute("data-live-path"), function () { refresh(); }, status);
  });
})();

// The job page's log tail: follows the API's event stream (GET /api/v1/jobs/{id}/logs?follow=1)
// from where the fragment ends; at the attempt's `end`, re-fetches the fragment (a retry's new
// attempt, or the finished job's last state). If the stream cannot be opened, falls back to the
// fragment re-fetched every 3 s (?poll=1). A dropped stream reconnects by itself (Last-Event-ID).
(function () {
  var TAIL_CHARS = 20000;  // scheduling/web/pages.py LOG_TAIL_CHARS
  function refetch(box, extra) {
    htmx.ajax("GET", box.getAttribute("data-log-refresh") + (extra || ""), {target: box, swap: "outerHTML"});
  }
  function follow(box) {
    if (!window.EventSource) { refetch(box, "&poll=1"); return; }
    var pre = box.querySelector("pre"), opened = false;
    var source = new EventSource(box.getAttribute("data-log-follow"));
    function gone() { return !document.body.contains(box); }
    source.onopen = function () { opened = true; };
    source.addEventListener("log", function (event) {
      if (gone()) { source.close(); return; }
      if (pre.hasAttribute("data-empty")) { pre.textContent = ""; pre.removeAttribute("data-empty"); }
      var text = pre.textContent + JSON.parse(event.data).text;
      pre.textContent = text.length > TAIL_CHARS ? text.slice(-TAIL_CHARS) : text;
    });
    source.addEventListener("end", function () {
      source.close();
      if (!gone()) setTimeout(function () { if (!gone()) refetch(box); }, 3000);
    });
    source.onerror = function () {
      if (gone()) { source.close(); return; }
      if (!opened || source.readyState === EventSource.CLOSED) { source.close(); refetch(box, "&poll=1"); }
    };
    box.addEventListener("htmx:beforeCleanupElement", function () { source.close(); });
  }
  htmx.onLoad(function (element) {  // the page, and every fragment htmx swaps in
    var boxes = element.matches && element.matches("[data-log-follow]") ? [element] : [];
    if (element.querySelectorAll) element.querySelectorAll("[data-log-follow]").forEach(function (box) { boxes.push(box); });
    boxes.forEach(follow);
  });
})();
