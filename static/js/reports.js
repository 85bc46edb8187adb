// mlqueue: the reports page's charts (templates/scheduling/reports.html). The server builds each
// chart's Chart.js configuration into a JSON script beside its canvas; this draws them, and
// makes the "last N days" links keep the team filter.
(function () {
  function draw() {
    if (typeof Chart === "undefined") return;
    document.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var source = document.getElementById(canvas.getAttribute("data-chart").replace(/^chart-/, ""));
      if (source) new Chart(canvas, JSON.parse(source.textContent));
    });
  }

  function isoDay(date) { return date.toISOString().slice(0, 10); }

  function quickRanges() {
    var form = document.getElementById("report-filters");
    if (!form) return;
    form.querySelectorAll("a[data-days]").forEach(function (link) {
      link.addEventListener("click", function (event) {
        event.preventDefault();
        var to = new Date();
        var from = new Date(to.getTime() - (Number(link.getAttribute("data-days")) - 1) * 86400000);
        form.elements.from.value = isoDay(from);
        form.elements.to.value = isoDay(to);
        form.submit();
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { draw(); quickRanges(); });
})();
