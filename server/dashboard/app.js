"use strict";
// The dashboard polls /v1/stats, /v1/deadletters and /v1/reservoirs once a second with an
// admin key, typed once into the form (kept in localStorage) and sent as
// Authorization: Bearer, never in the address.
(function () {
  const $ = (id) => document.getElementById(id);
  let key = localStorage.getItem("captchaq-key") || "";
  let last = null;

  function api(path, opts) {
    opts = opts || {};
    opts.headers = Object.assign({ Authorization: "Bearer " + key }, opts.headers || {});
    return fetch(path, opts).then((r) => {
      if (r.status === 401) { throw new Error("unauthorized"); }
      if (!r.ok) { return r.json().then((e) => { throw new Error(e.error || r.statusText); }); }
      return r.json();
    });
  }

  function set(id, v) { const el = $(id); if (el.textContent !== String(v)) { el.textContent = v; } }
  function ms(s) { return Math.round(s * 1000); }

  function render(st) {
    const m = st.metrics;
    set("threads-in-use", m.threads_in_use); set("threads", m.threads); set("window", m.window);
    $("threads-bar").style.width = (m.threads ? Math.min(100, 100 * m.threads_in_use / m.threads) : 0) + "%";
    set("submitted", m.submitted); set("solved", m.solved); set("failed", m.failed);
    set("success", m.solved + m.failed ? (100 * m.success_rate).toFixed(1) + "%" : "–");
    set("throughput", m.throughput_per_min.toFixed(1));
    if (last) {
      const dt = (Date.now() - last.at) / 1000;
      set("rate", dt > 0 ? ((m.solved - last.solved) / dt).toFixed(1) : "0");
    }
    last = { at: Date.now(), solved: m.solved };
    set("delay-p50", ms(m.delivery_delay_p50)); set("delay-p99", ms(m.delivery_delay_p99));
    set("oldest", m.oldest_waiting_seconds.toFixed(1));
    set("depth", m.queue_depth);
    const dp = $("depth-by-priority");
    dp.replaceChildren(...Object.keys(m.depth_by_priority || {}).sort((a, b) => a - b).map((p) => {
      const li = document.createElement("li"); li.textContent = "priority " + p + ": " + m.depth_by_priority[p]; return li;
    }));
    // A gateway's threads are its workers'; it shows the broker instead.
    const broker = st.broker || null;
    $("threads-card").hidden = !!broker;
    $("broker-card").hidden = !broker;
    if (broker) {
      $("broker").replaceChildren(...Object.keys(broker).sort().map((q) => {
        const li = document.createElement("li"); li.textContent = q + ": " + broker[q]; return li;
      }));
    }
    const state = $("state");
    state.textContent = m.paused ? "paused: " + m.paused_reason : (st.ready ? "ready" : "not ready");
    state.className = "badge " + (m.paused || !st.ready ? "bad" : "ok");
    // Several providers (--providers): each one's health, tasks, spend and
    // the types it refuses.
    const ps = (m.providers || []).filter((p) => p.name && p.threads > 0);
    $("providers-section").hidden = ps.length === 0;
    $("providers").replaceChildren(...ps.map((p) => row([p.name, p.healthy ? "in routing" : (p.down ? "down" : "paused"),
      p.threads_in_use + " / " + p.threads, p.solved, p.failed, p.moved, p.spend.toFixed(4),
      p.spend_last_hour.toFixed(4) + (p.max_spend_per_hour ? " / " + p.max_spend_per_hour.toFixed(2) : ""), p.cost_per_1000.toFixed(2),
      (p.refused || []).map((r) => r.method + " (" + r.code + ") until " + r.until).join(", ")])));
    $("clients").replaceChildren(...(st.clients || []).map((c) => row([c.name, c.weight, c.inflight, c.accepted, c.solved, c.failed])));
    // What came of the clients' reports (reportbad, reportgood), by
    // provider and by client: refusals with the provider's codes.
    const reports = (m.providers || []).map((p) => ["provider " + (p.name || "(the only one)"), p.reports])
      .concat((st.clients || []).map((c) => ["client " + c.name, c.reports]))
      .filter(([, r]) => r && (r.sent || r.too_late || r.not_sent));
    $("reports-section").hidden = reports.length === 0;
    $("reports").replaceChildren(...reports.map(([who, r]) => row([who, r.sent, r.accepted,
      r.refused + Object.keys(r.refused_by_code || {}).sort().map((c) => " " + c + ": " + r.refused_by_code[c]).join(","),
      r.too_late, r.not_sent])));
    set("dead-count", st.dead_letters);
  }

  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    return tr;
  }

  function renderDead(d) {
    $("dead").replaceChildren(...d.dead_letters.map((t) => {
      const code = (t.result && t.result.error_code) || t.last_error_code || "";
      const err = (t.result && t.result.error) || t.last_error || "";
      const tr = row([t.id, t.client, t.method, code, err]);
      const td = document.createElement("td");
      const b = document.createElement("button");
      b.type = "button"; b.className = "replay"; b.dataset.id = t.id; b.textContent = "Replay";
      b.addEventListener("click", () => replay({ ids: [t.id] }));
      td.appendChild(b); tr.appendChild(td);
      return tr;
    }));
  }

  // Reservoirs (serve --reservoirs): each one's stock against its target,
  // its draws and what it wasted.
  function renderReservoirs(r) {
    const rs = r.reservoirs || [];
    $("reservoirs-section").hidden = rs.length === 0;
    $("reservoirs").replaceChildren(...rs.map((v) => row([v.name, v.method, v.stock + " / " + v.target, v.in_flight,
      v.hits, v.misses, v.solved, v.handed_out, v.expired, v.failed, v.time_to_token_p50_ms + " / " + v.time_to_token_p99_ms])));
  }

  function replay(body) {
    api("/v1/deadletters/replay", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
      .then(tick).catch((e) => { $("state").textContent = "replay failed: " + e.message; });
  }

  function tick() {
    return Promise.all([api("/v1/stats"), api("/v1/deadletters"), api("/v1/reservoirs")]).then(([st, d, r]) => {
      render(st); renderDead(d); renderReservoirs(r);
    });
  }

  function start() {
    $("login").hidden = true; $("board").hidden = false;
    tick().catch(fail);
    setInterval(() => tick().catch(fail), 1000);
  }

  function fail(e) {
    if (e.message === "unauthorized") {
      localStorage.removeItem("captchaq-key");
      $("board").hidden = true; $("login").hidden = false;
      $("login-error").textContent = "That key is not accepted.";
      return;
    }
    $("state").textContent = "offline: " + e.message; $("state").className = "badge bad";
  }

  $("replay-all").addEventListener("click", () => replay({ all: true }));
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("key").value.trim();
    localStorage.setItem("captchaq-key", key);
    location.reload();
  });
  if (key) { start(); } else { $("login").hidden = false; }
})();
