// Sluice dashboard: a pipelines list and a page per pipeline, redrawn from
// the JSON status every second. No framework, no build step: the binary
// embeds this file. On `sluice serve` the token lives in sessionStorage
// (this tab only) and travels as a bearer header, never in a URL.
"use strict";

const TOKEN_KEY = "sluice-token";
const POLL_MS = 1000;
let timer = null;
let logsAfter = 0;
let logLines = [];
let currentPipeline = null;
let rollbackMessage = "";

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    throw { unauthorized: true };
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw { status: response.status, message: body.error || response.statusText };
  }
  return body;
}

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function num(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 10000) return num(value / 1000, 1) + " s";
  return num(value, value < 10 ? 1 : 0) + " ms";
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = value, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return num(v, u === 0 ? 0 : 1) + " " + units[u];
}

function pct(ratio) {
  return num((ratio || 0) * 100, 0) + "%";
}

function time(msSinceEpoch) {
  if (msSinceEpoch === null || msSinceEpoch === undefined) return "–";
  return new Date(msSinceEpoch).toISOString().replace("T", " ").replace("Z", "");
}

function showLogin(message) {
  stopPolling();
  const app = document.getElementById("app");
  app.innerHTML = "";
  app.appendChild(document.getElementById("login").content.cloneNode(true));
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = document.getElementById("token").value.trim();
    if (value) {
      sessionStorage.setItem(TOKEN_KEY, value);
      route();
    }
  });
}

// Each poll has a generation: a request still in flight when the page
// changes (or polling stops) neither draws nor schedules its next tick, so
// one pipeline's page is never drawn under another's address.
let pollGeneration = 0;

function stopPolling() {
  pollGeneration += 1;
  if (timer) clearTimeout(timer);
  timer = null;
}

function poll(fn) {
  stopPolling();
  const generation = pollGeneration;
  const current = () => generation === pollGeneration;
  const tick = async () => {
    try {
      await fn(current);
    } catch (error) {
      if (!current()) return;
      if (error && error.unauthorized) {
        const hadToken = !!token();
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin(hadToken ? "That token was refused." : "");
        return;
      }
      const app = document.getElementById("app");
      const note = document.getElementById("poll-error") || document.createElement("p");
      note.id = "poll-error";
      note.className = "error";
      note.textContent = (error && error.message) || String(error);
      app.prepend(note);
    }
    if (current()) timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

// ---- the pipelines list -------------------------------------------------

async function renderList(current) {
  const started = performance.now();
  const status = await api("/api/v1/status");
  if (!current()) return;
  document.getElementById("mode").textContent =
    status.mode === "run" ? "sluice run" : "sluice serve";
  document.getElementById("sign-out").hidden = !token();
  const rows = status.pipelines.map((p) => `
    <tr data-testid="pipeline-row" data-name="${esc(p.name)}">
      <td><a href="#/p/${encodeURIComponent(p.name)}">${esc(p.name)}</a></td>
      <td><span class="pill ${esc(p.state)}">${esc(p.state)}</span></td>
      <td class="num" data-testid="in-rate">${num(p.in_per_s)}</td>
      <td class="num">${num(p.out_per_s)}</td>
      <td class="num">${num(p.records_in)}</td>
      <td class="num">${num(p.dead_letters)}</td>
      <td class="num">${p.consumer_lag === null ? "–" : num(p.consumer_lag)}</td>
      <td class="num">${ms(p.watermark_lag_ms)}</td>
      <td class="num">${ms(p.checkpoint_age_ms)}</td>
    </tr>`).join("");
  document.getElementById("app").innerHTML = `
    <div class="card">
      <h2>Pipelines (<span data-testid="pipeline-count">${status.pipelines.length}</span>)</h2>
      <table data-testid="pipelines">
        <thead><tr><th>name</th><th>state</th><th class="num">in/s</th><th class="num">out/s</th>
        <th class="num">records in</th><th class="num">dead letters</th><th class="num">consumer lag</th>
        <th class="num">watermark lag</th><th class="num">checkpoint age</th></tr></thead>
        <tbody>${rows}</tbody>
      </table>
      <p class="muted" data-testid="render-ms">rendered in ${num(performance.now() - started, 1)} ms</p>
    </div>`;
}

// ---- one pipeline -------------------------------------------------------

function graphSvg(graph) {
  const w = 170, h = 74, gap = 46;
  const nodes = graph.nodes;
  const width = nodes.length * (w + gap) + 20;
  const height = h + 40;
  const x = (i) => 10 + i * (w + gap);
  const boxes = nodes.map((n, i) => {
    const level = n.kind === "sinks" ? "plain" : n.level;
    const lines = [];
    if (n.kind === "operator") {
      lines.push(`busy ${pct(n.busy_ratio)} · bp ${pct(n.backpressured_ratio)}`);
      lines.push(`${n.workers.length} worker${n.workers.length === 1 ? "" : "s"} · wm ${n.watermark === null ? "–" : num(n.watermark)}`);
    } else if (n.kind === "source") {
      lines.push(`backpressured ${pct(n.backpressured_ratio)}`);
      lines.push(`out ${num(n.records_out)}`);
    } else {
      lines.push(`in ${num(n.records_in)}`);
    }
    return `<g class="node ${esc(level)}" data-testid="graph-node" data-node="${esc(n.id)}" data-level="${esc(level)}"
        data-busy="${n.busy_ratio ?? ""}" data-backpressured="${n.backpressured_ratio ?? ""}">
      <rect x="${x(i)}" y="20" width="${w}" height="${h}"></rect>
      <text x="${x(i) + 8}" y="38" font-weight="600">${esc(n.id)}</text>
      <text x="${x(i) + 8}" y="56">${esc(lines[0] || "")}</text>
      <text x="${x(i) + 8}" y="72">${esc(lines[1] || "")}</text>
      <text x="${x(i) + 8}" y="88" class="muted">${n.kind === "sinks" ? "" : esc((level || "").toUpperCase())}</text>
    </g>`;
  }).join("");
  const edges = graph.edges.map((e, i) => {
    const x1 = x(i) + w, x2 = x(i + 1) - 4, y = 20 + h / 2;
    const label = e.channel ? pct(e.channel.fill) : "chained";
    return `<g data-testid="graph-edge" data-from="${esc(e.from)}" data-to="${esc(e.to)}">
      <line class="edge" x1="${x1}" y1="${y}" x2="${x2}" y2="${y}"></line>
      <text x="${x1 + 4}" y="${y - 6}">${esc(label)}</text></g>`;
  }).join("");
  return `<svg width="${width}" height="${height}" data-testid="job-graph">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto">
    <path d="M0,0 L10,5 L0,10 z" fill="#8a94a6"></path></marker></defs>${edges}${boxes}</svg>`;
}

function chartSvg(samples, series, testid) {
  const width = 460, height = 140, pad = 28;
  const values = samples.flatMap((s) => series.map((k) => s[k.key]).filter((v) => v !== null && v !== undefined));
  const max = Math.max(1, ...values);
  const t0 = samples.length ? samples[0].at_ms : 0;
  const t1 = samples.length ? samples[samples.length - 1].at_ms : 1;
  const sx = (t) => pad + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad - 8);
  const sy = (v) => height - pad - (v / max) * (height - pad - 10);
  const lines = series.map((k) => {
    const points = samples.filter((s) => s[k.key] !== null && s[k.key] !== undefined)
      .map((s) => `${sx(s.at_ms).toFixed(1)},${sy(s[k.key]).toFixed(1)}`).join(" ");
    return `<polyline class="${k.cls}" points="${points}"></polyline>`;
  }).join("");
  const legend = series.map((k) => `<span><i style="background:currentColor" class="${k.cls}"></i>${esc(k.label)}</span>`).join("");
  return `<svg width="${width}" height="${height}" data-testid="${testid}" data-points="${samples.length}">
      <line class="axis" x1="${pad}" y1="${height - pad}" x2="${width - 8}" y2="${height - pad}"></line>
      <line class="axis" x1="${pad}" y1="10" x2="${pad}" y2="${height - pad}"></line>
      <text x="2" y="16">${esc(num(max, max < 10 ? 1 : 0))}</text>
      <text x="${pad}" y="${height - 8}">last ${num(samples.length)} s</text>
      ${lines}</svg><div class="legend">${legend}</div>`;
}

function table(testid, head, rows) {
  return `<table data-testid="${testid}"><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead>
    <tbody>${rows.join("") || `<tr><td colspan="${head.length}" class="muted">none</td></tr>`}</tbody></table>`;
}

async function renderPipeline(name, current) {
  const s = await api(`/api/v1/pipelines/${encodeURIComponent(name)}/status`);
  if (!current()) return;
  const serve = !!s.deployments;
  const splits = (s.splits || []).map((p) => `
    <tr class="${p.holding_back ? "holding-back" : ""}" data-testid="split" data-partition="${p.partition}"
        data-holding-back="${p.holding_back}" data-idle="${p.idle}">
      <td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
      <td class="num">${p.watermark === null ? "–" : esc(time(p.watermark))}</td>
      <td class="num">${ms(p.watermark_lag_ms)}</td>
      <td>${p.idle ? "idle" : "active"}</td>
      <td>${p.holding_back ? "holds the watermark back" : ""}</td>
      <td class="num">${p.consumer_lag === null ? "–" : num(p.consumer_lag)}</td></tr>`);
  const checkpoints = (s.checkpoints.history || []).slice().reverse().map((c) => `
    <tr data-testid="checkpoint"><td class="num">${c.id}</td><td>${esc(time(c.completed_at_ms))}</td>
      <td class="num">${ms(c.stats.total_ms)}</td><td class="num">${ms(c.stats.sync_ms)}</td>
      <td class="num">${ms(c.stats.alignment_ms)}</td><td class="num">${bytes(c.stats.state_bytes)}</td>
      <td class="num">${bytes(c.stats.uploaded_bytes)}</td></tr>`);
  const operators = s.graph.nodes.filter((n) => n.kind === "operator").flatMap((n) => n.workers.map((w) => `
    <tr data-testid="operator" data-operator="${esc(n.id)}" data-level="${esc(w.level)}">
      <td>${esc(n.id)}</td><td class="num">${w.worker}</td>
      <td class="num">${num(w.records_in)}</td><td class="num">${num(w.records_out)}</td>
      <td class="num">${pct(w.busy_ratio)}</td><td class="num">${pct(w.backpressured_ratio)}</td>
      <td><span class="pill ${esc(w.level)}">${esc(w.level)}</span></td>
      <td class="num">${w.watermark === null ? "–" : esc(time(w.watermark))}</td>
      <td class="num">${bytes(w.state_bytes)}</td></tr>`));
  const deadLetters = (s.dead_letter_samples || []).slice().reverse().map((d) => `
    <tr data-testid="dead-letter"><td>${esc(time(d.at_ms))}</td><td>${esc(d.operator)}</td>
      <td>${esc(d.reason)}</td><td>${esc(d.source[0])}/${d.source[1]}@${d.source[2]}</td>
      <td>${esc(d.value.slice(0, 120))}</td></tr>`);
  const errors = (s.errors || []).slice().reverse().map((f) => `
    <tr data-testid="error"><td>${esc(time(f.at_ms))}</td><td>${esc(f.operator)}</td><td>${esc(f.kind)}</td><td>${esc(f.message)}</td></tr>`);
  const deployments = (s.deployments || []).slice().reverse().map((d) => `
    <tr data-testid="deployment"><td class="num">${d.id}</td><td>${esc(time(d.at_ms))}</td><td>${esc(d.by)}</td>
      <td>${esc(d.operator)}</td><td>${esc(d.kind)}</td><td>${esc(d.from.slice(0, 12))} → ${esc(d.to.slice(0, 12))}</td>
      <td class="num">${ms(d.pause_ms)}</td><td>${esc(d.status)}</td>
      <td><button data-testid="rollback" data-operator="${esc(d.operator)}">roll back</button></td></tr>`);
  const history = s.history || [];
  const queries = s.graph.nodes.filter((n) => n.sql).map((n) => `
    <h4>${esc(n.id)} (SQL)</h4><pre class="sql" data-testid="operator-sql" data-operator="${esc(n.id)}">${esc(n.sql)}</pre>`).join("");
  document.getElementById("app").innerHTML = `
    <p><a href="#/">← pipelines</a></p>
    <div class="card"><h2 data-testid="pipeline-name">${esc(s.name)} <span class="pill ${esc(s.state)}">${esc(s.state)}</span></h2>
      <div class="stats">
        <div class="stat"><b data-testid="rate-in">${num(s.in_per_s)}</b><span>records in /s</span></div>
        <div class="stat"><b>${num(s.out_per_s)}</b><span>records out /s</span></div>
        <div class="stat"><b data-testid="records-in">${num(s.records_in)}</b><span>records in</span></div>
        <div class="stat"><b>${num(s.dead_letters)}</b><span>dead letters</span></div>
        <div class="stat"><b>${s.consumer_lag === null ? "–" : num(s.consumer_lag)}</b><span>consumer lag</span></div>
        <div class="stat"><b data-testid="watermark-lag">${ms(s.watermark_lag_ms)}</b><span>watermark lag</span></div>
        <div class="stat"><b>${ms(s.event_time_lag_ms)}</b><span>event-time lag</span></div>
        <div class="stat"><b>${ms(s.latency.p50_ms)} / ${ms(s.latency.p99_ms)}</b><span>latency p50 / p99</span></div>
        <div class="stat"><b data-testid="checkpoints-completed">${num(s.checkpoints.completed)}</b><span>checkpoints (${num(s.checkpoints.failed)} failed), last ${ms(s.checkpoints.last_age_ms)} ago</span></div>
        ${s.sink_unavailable_ms == null ? "" : `<div class="stat warn"><b data-testid="sink-unavailable">${ms(s.sink_unavailable_ms)}</b><span>a sink's database not answering (retries: ${num(s.sink_retries)})</span></div>`}
      </div></div>
    <div class="card"><h3>Job graph</h3>${graphSvg(s.graph)}${queries}</div>
    <div class="grid">
      <div class="card"><h3>Throughput (records/s)</h3>${chartSvg(history, [
        { key: "in_per_s", cls: "series-in", label: "in" }, { key: "out_per_s", cls: "series-out", label: "out" }], "throughput-chart")}</div>
      <div class="card"><h3>Latency and lag (ms)</h3>${chartSvg(history, [
        { key: "latency_p50_ms", cls: "series-p50", label: "p50" }, { key: "latency_p99_ms", cls: "series-p99", label: "p99" },
        { key: "event_time_lag_ms", cls: "series-lag", label: "event-time lag" }], "latency-chart")}</div>
    </div>
    <div class="card"><h3>Operators</h3>${table("operators", ["operator", "worker", "in", "out", "busy", "backpressured", "level", "watermark", "state"], operators)}</div>
    <div class="card"><h3>Source splits (watermarks)</h3>${table("splits", ["topic", "partition", "watermark", "lag", "", "", "consumer lag"], splits)}</div>
    <div class="card"><h3>Checkpoints</h3>${table("checkpoints", ["id", "completed", "duration", "sync", "alignment", "state", "uploaded"], checkpoints)}</div>
    <div class="card"><h3>Dead-letter samples</h3>${table("dead-letters", ["time", "operator", "reason", "source", "value"], deadLetters)}</div>
    <div class="card"><h3>Recent errors</h3>${table("errors", ["time", "operator", "kind", "message"], errors)}</div>
    ${serve ? `<div class="card"><h3>Deployments</h3>${table("deployments", ["id", "time", "by", "operator", "kind", "from → to", "pause", "status", ""], deployments)}
      <p id="rollback-result" data-testid="rollback-result">${esc(rollbackMessage)}</p></div>
      <div class="card"><h3>Plugin logs</h3><pre class="logs" data-testid="logs">${esc(logLines.join("\n"))}</pre></div>` : ""}`;
  for (const button of document.querySelectorAll("button[data-testid=rollback]")) {
    button.addEventListener("click", () => rollback(name, button.dataset.operator));
  }
  if (serve) await followLogs(name, current);
}

async function followLogs(name, current) {
  const answer = await api(`/api/v1/pipelines/${encodeURIComponent(name)}/logs?after=${logsAfter}`);
  if (!current()) return;
  for (const line of answer.lines || []) {
    logsAfter = Math.max(logsAfter, line.seq);
    logLines.push(`${time(line.at_ms)} ${line.level} ${line.operator}: ${line.message}`);
  }
  logLines = logLines.slice(-500);
  const pre = document.querySelector("pre.logs");
  if (pre) {
    pre.textContent = logLines.join("\n");
    pre.scrollTop = pre.scrollHeight;
  }
}

async function rollback(name, operator) {
  rollbackMessage = `rolling back ${operator}…`;
  document.getElementById("rollback-result").textContent = rollbackMessage;
  try {
    const d = await api(`/api/v1/pipelines/${encodeURIComponent(name)}/rollback`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ operator }),
    });
    rollbackMessage = `rolled back ${d.operator} to ${d.to.slice(0, 12)} (${d.status})`;
  } catch (error) {
    rollbackMessage = (error && error.message) || String(error);
  }
  const result = document.getElementById("rollback-result");
  if (result) result.textContent = rollbackMessage;
}

function route() {
  const hash = location.hash || "#/";
  // Nothing of the previous page stays up while the next one loads (or
  // fails to: another tenant's pipeline is a 404).
  document.getElementById("app").innerHTML = '<p class="muted">Loading…</p>';
  const match = hash.match(/^#\/p\/(.+)$/);
  if (match) {
    const name = decodeURIComponent(match[1]);
    if (currentPipeline !== name) {
      currentPipeline = name;
      logsAfter = 0;
      logLines = [];
      rollbackMessage = "";
    }
    poll((current) => renderPipeline(name, current));
  } else {
    currentPipeline = null;
    poll(renderList);
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin("");
});
window.addEventListener("hashchange", route);
route();
