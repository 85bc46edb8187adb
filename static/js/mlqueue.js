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
  // <time datetime="ISO" data-local>: the instant in the viewer's own time zone (the browser's),
  // the server's UTC text staying as the fallback and in the title. data-local="short" leaves out
  // the year, "seconds" adds them (the timeline). Explicit fields: dateStyle and timeStyle may not
  // be combined with timeZoneName (a TypeError in Chrome and Firefox).
  var TIME_FORMATS = {
    "": {year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short"},
    "short": {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short"},
    "seconds": {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"}
  };
  function localTimes(root) {
    if (!root || !root.querySelectorAll) return;
    root.querySelectorAll("time[data-local]").forEach(function (node) {
      try {  // one element the browser cannot format keeps its UTC text; the others still change
        var when = new Date(node.getAttribute("datetime"));
        if (isNaN(when)) return;
        var format = TIME_FORMATS[node.getAttribute("data-local")] || TIME_FORMATS[""];
        var text = when.toLocaleString(undefined, format);
        if (!node.title) node.title = node.textContent.trim();
        node.textContent = text;
      } catch (error) {
        if (window.console) console.warn("mlqueue: a time left in UTC", error);
      }
    });
  }
  // <span class="clock" data-label="running" data-elapsed="11">: the queue's time column counts
  // on from what the server rendered, by the browser's own elapsed time (its clock need not agree
  // with the server's), so "running 11s" moves between live refreshes. As queue.py short_duration.
  function shortDuration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 120) return seconds + "s";
    if (seconds < 7200) return Math.floor(seconds / 60) + "m";
    if (seconds < 172800) {
      var minutes = Math.floor(seconds % 3600 / 60);
      return Math.floor(seconds / 3600) + "h" + (minutes < 10 ? "0" : "") + minutes + "m";
    }
    return Math.floor(seconds / 86400) + "d" + Math.floor(seconds % 86400 / 3600) + "h";
  }
  var ticking = false;
  function clocks(root) { return root && root.querySelectorAll ? root.querySelectorAll("span.clock[data-elapsed]") : []; }
  function tickClocks() {
    var now = Date.now(), found = clocks(document);
    found.forEach(function (node) {
      var seconds = Number(node.getAttribute("data-elapsed")) + (now - (node.mlqSeenAt || now)) / 1000;
      if (!isNaN(seconds)) node.textContent = node.getAttribute("data-label") + " " + shortDuration(seconds);
    });
    ticking = found.length > 0;  // no clock left on the page: no timer (a swap that brings one starts it)
    if (ticking) setTimeout(function () { guarded(tickClocks); }, 1000);
  }
  // Clocks count from when they came into the page (its load, or the live refresh that brought them).
  function startClocks(root) {
    var now = Date.now();
    clocks(root).forEach(function (node) { if (!node.mlqSeenAt) node.mlqSeenAt = now; });
    if (!ticking && clocks(document).length) { ticking = true; setTimeout(function () { guarded(tickClocks); }, 1000); }
  }
  // True while someone is using the form in `root` (the nodes console's heatmap pauses its
  // refresh, which would replace the form): a box ticked, an input focused, holding a value or
  // half typed (a date or number the browser cannot read yet has no value but is :invalid). A
  // box unticked again is not in use, though it keeps the focus its click gave it.
  window.mlqueue = window.mlqueue || {};
  window.mlqueue.inUse = function (root) {
    if (root.querySelector("input[type=checkbox]:checked, input:not([type=checkbox]):focus, input:invalid")) return true;
    return Array.prototype.some.call(root.querySelectorAll("input:not([type=checkbox]):not([type=hidden])"), function (input) {
      return input.value !== "";
    });
  };
  // Each step on its own: one that throws must not keep the live updates from starting.
  function guarded(step) {
    try { step(); } catch (error) { if (window.console) console.error("mlqueue:", error); }
  }
  document.addEventListener("htmx:afterSwap", function (event) {
    guarded(function () { localTimes(event.target); });
    guarded(function () { startClocks(event.target); });
  });
  document.addEventListener("DOMContentLoaded", function () {
    guarded(function () { localTimes(document); });
    guarded(function () { startClocks(document); });
    guarded(watchChildren);
    guarded(function () {
      var root = document.querySelector("[data-live-path]");
      if (!root) return;
      var target = root.getAttribute("data-live-refresh");
      var status = document.getElementById("live-status");
      var refresh = debounce(function () { htmx.trigger(target, "refresh"); }, 500);
      connect(root.getAttribute("data-live-path"), function () { refresh(); }, status);
    });
  });
  // A group's section (data-live-children="id,id,..."): its children are other jobs than the
  // page's, so it hears every visible job's change and re-fetches itself when one of its own changed.
  function watchChildren() {
    if (!document.querySelector("[data-live-children]")) return;
    var refresh = debounce(function () {
      var section = document.querySelector("[data-live-children]");
      if (section) htmx.trigger(section, "refresh");
    }, 1000);
    connect("/ws/jobs/", function (message) {
      var section = document.querySelector("[data-live-children]");
      if (!section) return;
      var ids = section.getAttribute("data-live-children").split(",");
      var mine = (message.changed || []).some(function (id) { return ids.indexOf(String(id)) >= 0; });
      if (message.reconnected || mine) refresh();
    }, null);
  }
})();

// The job page's log tail: follows the API's event stream (GET /api/v1/jobs/{id}/logs?follow=1)
// from where the fragment ends; at the attempt's `end`, re-fetches the fragment (a retry's new
// attempt, or the finished job's last state). If the stream cannot be opened, falls back to the
// fragment re-fetched every 3 s (?poll=1). A dropped stream reconnects by itself (Last-Event-ID).
// The box keeps its newest line in view unless the reader has scrolled up (then it stays where
// they are, across the polled re-fetches too); a tail cut to TAIL_CHARS starts on a whole line
// and the note above it ([data-log-cut]) says the earlier lines are not shown.
(function () {
  var TAIL_CHARS = 20000;  // scheduling/web/pages.py LOG_TAIL_CHARS, cut the same way (log_tail)
  var kept = null;  // the polled box's scroll position, across its re-fetch: {url, top, atEnd}
  function atEnd(pre) { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24; }
  function tail(text) {
    if (text.length <= TAIL_CHARS) return {text: text, cut: false};
    var part = text.slice(-TAIL_CHARS);
    var newline = part.indexOf("\n");
    // Already on a line's start, or one line longer than the whole tail: nothing more to drop.
    if (text.charAt(text.length - TAIL_CHARS - 1) !== "\n" && newline >= 0 && newline < part.length - 1) part = part.slice(newline + 1);
    return {text: part, cut: true};
  }
  function append(box, pre, more) {
    var following = atEnd(pre);
    if (pre.hasAttribute("data-empty")) { pre.textContent = ""; pre.removeAttribute("data-empty"); }
    var cut = tail(pre.textContent + more);
    pre.textContent = cut.text;
    var note = box.querySelector("[data-log-cut]");
    if (cut.cut && note) note.hidden = false;
    if (following) pre.scrollTop = pre.scrollHeight;
  }
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
      append(box, pre, JSON.parse(event.data).text);
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
  function boxUrl(box) { return box.getAttribute("hx-get") || box.getAttribute("data-log-refresh"); }
  // A re-fetched box (the 3 s poll) starts at its top: put it back where the reader had it.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var pre = event.detail.target && event.detail.target.id === "log" && event.detail.target.querySelector("pre");
    if (pre) kept = {url: boxUrl(event.detail.target), top: pre.scrollTop, atEnd: atEnd(pre)};
  });
  function show(box) {
    var pre = box.querySelector("pre");
    if (!pre) return;
    var same = kept && kept.url === boxUrl(box);
    pre.scrollTop = same && !kept.atEnd ? kept.top : pre.scrollHeight;
    kept = null;
  }
  htmx.onLoad(function (element) {  // the page, and every fragment htmx swaps in
    var boxes = element.matches && element.matches("#log") ? [element] : [];
    if (element.querySelectorAll) element.querySelectorAll("#log").forEach(function (box) { boxes.push(box); });
    boxes.forEach(function (box) {
      show(box);
      if (box.hasAttribute("data-log-follow")) follow(box);
    });
  });
})();

// The queue's group rows: the ▸ button loads the group's children under its row (GET
// /queue/groups/{id}/) and ▾ folds them away. Which groups are open is kept across the live
// refreshes and the pager, which re-render the table: each open group's children are loaded again.
(function () {
  var open = {};
  function load(button) {
    var id = button.getAttribute("data-group-toggle");
    var body = document.getElementById("group-" + id + "-children");
    if (!body) return;
    button.setAttribute("aria-expanded", "true");
    button.textContent = "▾";
    htmx.ajax("GET", button.getAttribute("data-children-url"), {target: body, swap: "innerHTML"});
  }
  function fold(button) {
    var id = button.getAttribute("data-group-toggle");
    var body = document.getElementById("group-" + id + "-children");
    if (body) body.innerHTML = "";
    button.setAttribute("aria-expanded", "false");
    button.textContent = "▸";
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-group-toggle]");
    if (!button) return;
    var id = button.getAttribute("data-group-toggle");
    if (open[id]) { delete open[id]; fold(button); } else { open[id] = true; load(button); }
  });
  htmx.onLoad(function (element) {  // a re-rendered queue table: open again what was open
    if (!element.querySelectorAll) return;
    element.querySelectorAll("[data-group-toggle]").forEach(function (button) {
      if (open[button.getAttribute("data-group-toggle")]) load(button);
    });
  });
})();

// A sweep's chart: every trial's curve of its metric on one chart (Chart.js, vendored; the
// data embedded by the server with json_script), drawn again when the section is re-fetched.
// The best trial is drawn thick, early-stopped trials dashed.
(function () {
  var COLOURS = ["#2f5bea", "#1f8a4c", "#c0392b", "#b7791f", "#6b2fb3", "#0f8ca0", "#d35400", "#7f8c8d"];
  htmx.onLoad(function (element) {  // the page, and the group section each time it is re-fetched
    var canvas = element.querySelector && element.querySelector("[data-sweep-chart]");
    if (!canvas || !window.Chart) return;
    var old = Chart.getChart(canvas);
    if (old) old.destroy();
    var data = JSON.parse(document.getElementById(canvas.getAttribute("data-sweep-chart")).textContent);
    var datasets = data.series.map(function (s, i) {
      return {
        label: s.label + (s.stopped ? " · stopped early" : ""),
        data: s.points.map(function (p) { return {x: p[0], y: p[1]}; }),
        borderColor: COLOURS[i % COLOURS.length], backgroundColor: COLOURS[i % COLOURS.length],
        borderWidth: s.rank === 1 ? 3 : 1.5, borderDash: s.stopped ? [5, 4] : [], pointRadius: 0, tension: 0.1
      };
    });
    new Chart(canvas, {
      type: "line",
      data: {datasets: datasets},
      options: {
        animation: false, maintainAspectRatio: false, parsing: true,
        scales: {x: {type: "linear", title: {display: true, text: "step"}}, y: {title: {display: true, text: data.metric}}},
        plugins: {legend: {position: "right", labels: {boxWidth: 12, font: {size: 11}}}}
      }
    });
  });
})();
