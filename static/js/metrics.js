// mlqueue: the job page's metrics chart (templates/scheduling/_metrics.html). The server renders
// the series (name -> [[step, value], ...]) into #metric-series; this draws one line per metric
// with the vendored Chart.js, and while the job runs (and after each live refresh of its panel)
// reads them again from /api/v1/jobs/<id>/metrics.
(function () {
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
  var chart = null;

  function datasets(series) {
    return Object.keys(series).sort().map(function (name, i) {
      return {
        label: name,
        data: series[name].map(function (p) { return {x: p[0], y: p[1]}; }),
        borderColor: COLORS[i % COLORS.length],
        backgroundColor: COLORS[i % COLORS.length],
        pointRadius: series[name].length > 200 ? 0 : 2,
        borderWidth: 1.5,
        tension: 0
      };
    });
  }

  function draw(series) {
    var canvas = document.getElementById("metrics-chart");
    if (!canvas || typeof Chart === "undefined") return;
    if (chart) { chart.data.datasets = datasets(series); chart.update("none"); return; }
    chart = new Chart(canvas, {
      type: "line",
      data: {datasets: datasets(series)},
      options: {
        animation: false, maintainAspectRatio: false, parsing: false, normalized: true,
        interaction: {mode: "nearest", intersect: false},
        scales: {x: {type: "linear", ticks: {precision: 0}, title: {display: true, text: "step"}}, y: {type: "linear"}}
      }
    });
  }

  function table(series, truncated) {
    // Each metric's last point, as the server renders it. A series the answer cut short or left
    // out (`truncated`) ends before its last step: its row keeps the value the server rendered.
    var body = document.querySelector("#metrics-last tbody");
    var cut = {};
    (truncated || []).forEach(function (t) { cut[t.name] = true; });
    var rows = {};
    Array.prototype.forEach.call(body.querySelectorAll("tr"), function (row) {
      if (row.cells.length) rows[row.cells[0].textContent] = row;
    });
    Object.keys(series).forEach(function (name) {
      var last = series[name][series[name].length - 1];
      if (!last || cut[name]) return;
      var row = document.createElement("tr");
      [name, String(Number(last.value.toPrecision(7))), last.step, last.attempt, last.rank].forEach(function (text) {
        var cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      });
      rows[name] = row;
    });
    body.textContent = "";
    Object.keys(rows).sort().forEach(function (name) { body.appendChild(rows[name]); });
  }

  function reload(box) {
    fetch(box.getAttribute("data-metrics-url"), {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (answer) {
        if (!answer) return;
        var series = {};
        Object.keys(answer.series).forEach(function (name) {
          series[name] = answer.series[name].map(function (p) { return [p.step, p.value]; });
        });
        if (!Object.keys(series).length) return;
        document.getElementById("metrics-chart-box").hidden = false;
        var none = document.getElementById("metrics-none");
        if (none) none.hidden = true;
        draw(series);
        table(answer.series, answer.truncated);
      })
      .catch(function () {});
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("job-metrics");
    var data = document.getElementById("metric-series");
    if (!box || !data) return;
    draw(JSON.parse(data.textContent));
    function running() { var s = document.getElementById("job-state"); return s && s.textContent.trim() === "RUNNING"; }
    setInterval(function () { if (running() && !document.hidden) reload(box); }, 15000);
    document.body.addEventListener("htmx:afterSettle", function (event) {  // the panel's live refresh
      var target = (event.detail && event.detail.target) || event.target;
      if (target && target.id === "job-panel") reload(box);
    });
  });
})();
