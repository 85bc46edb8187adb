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
