"use strict";
// The dashboard's charts: the last hour as the server keeps it
// (GET /v1/history, sampled every few seconds), drawn with uPlot. The
// server holds the history, so a reload of the page loses nothing.
// Each uPlot is left on window.captchaqCharts[id] for anyone who wants
// to read its data.
(function () {
  const key = localStorage.getItem("captchaq-key") || "";
  if (!key || typeof uPlot === "undefined") { return; }

  const palette = ["#1976d2", "#2e7d32", "#c62828", "#f9a825", "#6a1b9a", "#00838f", "#ef6c00", "#5d4037", "#455a64", "#ad1457"];
  const sorted = (o) => Object.keys(o || {}).sort((a, b) => (isNaN(a) || isNaN(b)) ? a.localeCompare(b) : a - b);

  // Each chart: its series as [label, column, dashed?] from one history.
  const specs = [
    { id: "chart-threads", series: (h) => h.broker ? null : [
      ["in use", h.threads_in_use], ["AIMD window", h.threads_window], ["plan", h.threads_plan, true]], colors: ["#1976d2", "#ef6c00", "#667"] },
    { id: "chart-depth", series: (h) => sorted(h.depth).map((p) => ["priority " + p, h.depth[p]]) },
    { id: "chart-rate", series: (h) => [["solved", h.solved_per_min], ["failed", h.failed_per_min]], colors: ["#2e7d32", "#c62828"] },
    { id: "chart-delay", series: (h) => [["p50", h.delay_p50_ms], ["p99", h.delay_p99_ms]] },
    { id: "chart-clients", series: (h) => sorted(h.inflight).map((c) => [c, h.inflight[c]]) },
    { id: "chart-broker", series: (h) => h.broker ? sorted(h.broker).map((q) => [q, h.broker[q]]) : null },
    // Each reservoir's draws (hits, misses) and its waste (dashed).
    { id: "chart-reservoirs", series: (h) => h.reservoirs ? sorted(h.reservoirs).flatMap((n) => [
      [n + " hits", h.reservoirs[n].hits_per_min], [n + " misses", h.reservoirs[n].misses_per_min],
      [n + " expired unused", h.reservoirs[n].expired_per_min, true]]) : null },
  ];
  const charts = {};
  window.captchaqCharts = charts;

  function size(el) {
    return { width: Math.max(200, el.clientWidth), height: window.innerWidth < 600 ? 160 : 200 };
  }

  function draw(spec, h) {
    const box = document.getElementById(spec.id);
    const series = spec.series(h);
    const card = box.closest(".chart");
    card.hidden = !series;
    if (!series) { return; }
    const labels = series.map((s) => s[0]).join("\n");
    const data = [h.t].concat(series.map((s) => s[1]));
    let u = charts[spec.id];
    if (u && u.captchaqLabels === labels) {
      u.setData(data);
      return;
    }
    // A new priority, client or queue: build the chart again.
    if (u) { u.destroy(); }
    const opts = Object.assign(size(box), {
      cursor: { drag: { x: false, y: false } },
      hooks: { draw: [showLast] },
      scales: { y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [{}, { size: 44 }],
      series: [{}].concat(series.map((s, i) => ({
        label: s[0], stroke: (spec.colors || palette)[i % palette.length], width: 2,
        dash: s[2] ? [6, 4] : undefined, spanGaps: false, points: { show: false },
      }))),
    });
    u = new uPlot(opts, data, box);
    u.captchaqLabels = labels;
    charts[spec.id] = u;
  }

  // The legend shows the latest values while the cursor is elsewhere.
  function showLast(u) {
    if (u.cursor.idx == null && u.data[0].length) { u.setLegend({ idx: u.data[0].length - 1 }); }
  }

  function tick() {
    return fetch("/v1/history", { headers: { Authorization: "Bearer " + key } }).then((r) => {
      if (!r.ok) { throw new Error("history: HTTP " + r.status); }
      return r.json();
    }).then((h) => {
      for (const spec of specs) { draw(spec, h); }
      const n = h.t.length;
      const span = n < 2 ? 0 : h.t[n - 1] - h.t[0];
      document.getElementById("charts-span").textContent = n < 2 ? "" : "the last " +
        (span < 120 ? Math.round(span) + " s" : Math.round(span / 60) + " min") + ", a sample every " + h.every_seconds + " s";
      return Math.min(5, Math.max(1, h.every_seconds)) * 1000;
    });
  }

  function loop() {
    tick().then((next) => setTimeout(loop, next), () => setTimeout(loop, 5000));
  }

  window.addEventListener("resize", () => {
    for (const id in charts) { charts[id].setSize(size(document.getElementById(id))); }
  });
  loop();
})();
