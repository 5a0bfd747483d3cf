/* pgq_django dashboard: small hand-written SVG line charts, no third-party code.
 * Reads the JSON the page embeds (#pgq-dashboard-data), draws it, then refreshes it from
 * the dashboard's data URL every 10 seconds. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = { sent: "#417690", acked: "#2e9d4f", dead: "#ba2121", depth: "#7b4ea3" };
  /* Throughput lines are drawn in this order, each narrower than the one before, so lines
   * with equal values (every message sent was acked; nothing at all) stay visible as bands
   * around each other instead of the last one hiding the others. */
  var WIDTHS = { sent: 6, acked: 3.5, dead: 1.5, depth: 2 };

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }

  /* Even y-axis ticks: a step of 1, 2 or 5 times a power of ten (never below 1: the values
   * are counts), about four steps up to the first multiple of the step at or above max. All
   * zero gives 0 and 1: the axis never shrinks to fractions around a flat line. */
  function niceTicks(max) {
    var raw = Math.max(max, 1) / 4;
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = 10 * p;
    [1, 2, 5].some(function (m) { if (m * p >= raw) { step = m * p; return true; } return false; });
    step = Math.max(1, step);
    var top = Math.max(step, step * Math.ceil(max / step));
    var ticks = [];
    for (var i = 0; i * step <= top; i++) ticks.push(i * step);
    return { max: top, ticks: ticks };
  }

  /* series: [{name, values, color, width}], labels: ["HH:MM", ...] */
  function lineChart(container, labels, series) {
    container.textContent = "";
    var w = 640, h = 220, left = 48, right = 12, top = 12, bottom = 28;
    var svg = el("svg", { viewBox: "0 0 " + w + " " + h, class: "pgq-svg",
                          preserveAspectRatio: "xMidYMid meet" }, container);
    var max = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    var scale = niceTicks(max);
    max = scale.max;
    var n = Math.max(labels.length - 1, 1);
    function x(i) { return left + (w - left - right) * i / n; }
    function y(v) { return top + (h - top - bottom) * (1 - v / max); }
    scale.ticks.forEach(function (v) {
      var yy = y(v);
      el("line", { x1: left, x2: w - right, y1: yy, y2: yy, class: "pgq-grid" }, svg);
      el("text", { x: left - 6, y: yy + 4, "text-anchor": "end", class: "pgq-axis pgq-y" }, svg)
        .textContent = v;
    });
    /* About six time labels; the last one (now) always, ending at the plot's right edge so
     * it is not cut, and a regular label too close to it is left out. */
    var every = Math.ceil(labels.length / 6), last = labels.length - 1;
    labels.forEach(function (label, i) {
      var isLast = i === last;
      if (isLast || (i % every === 0 && last - i >= every / 2)) {
        el("text", { x: x(i), y: h - 8, "text-anchor": isLast && i > 0 ? "end" : "middle",
                     class: "pgq-axis pgq-x" }, svg).textContent = label;
      }
    });
    series.forEach(function (s) {
      var d = s.values.map(function (v, i) {
        return (i ? "L" : "M") + x(i).toFixed(1) + "," + y(v).toFixed(1);
      }).join(" ");
      el("path", { d: d, fill: "none", stroke: s.color, "stroke-width": s.width || 2,
                   "stroke-linejoin": "round", "stroke-linecap": "round",
                   class: "pgq-line", "data-series": s.name }, svg);
    });
    var legend = document.createElement("div");
    legend.className = "pgq-legend";
    series.forEach(function (s) {
      var item = document.createElement("span");
      var total = s.values.reduce(function (a, b) { return a + b; }, 0);
      item.innerHTML = '<i style="background:' + s.color + '"></i>';
      item.appendChild(document.createTextNode(
        s.name + (s.total === false ? "" : " (" + total + ")")));
      legend.appendChild(item);
    });
    container.appendChild(legend);
  }

  function draw(data) {
    var kinds = ["sent", "acked", "dead"];
    lineChart(document.getElementById("pgq-throughput"), data.labels, kinds.map(function (k) {
      return { name: k, values: data.throughput[k], color: COLORS[k], width: WIDTHS[k] };
    }));
    lineChart(document.getElementById("pgq-depth-chart"), data.labels, [
      { name: "waiting", values: data.depth, color: COLORS.depth, width: WIDTHS.depth,
        total: false }
    ]);
    Object.keys(data.totals).forEach(function (k) {
      var node = document.querySelector('[data-total="' + k + '"]');
      if (node) node.textContent = data.totals[k];
    });
    document.querySelector(".pgq-dashboard").setAttribute("data-drawn", "true");
  }

  function refresh(url) {
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) draw(data); })
      .catch(function () { /* keep the last picture */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.querySelector(".pgq-dashboard");
    var script = document.getElementById("pgq-dashboard-data");
    if (!root || !script) return;
    draw(JSON.parse(script.textContent));
    setInterval(function () { refresh(root.getAttribute("data-url")); }, 10000);
  });
})();
