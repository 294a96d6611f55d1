// strata's dashboard: reads the node's own API every two seconds and
// draws what it finds. Nothing is fetched from anywhere else. The API
// token comes from the page's fragment (#token=...: never sent to the
// server in a URL) or a form, and is kept in this tab's sessionStorage.
// Every value from the API is put in the page as text, never as HTML.
"use strict";

const EVERY_MS = 2000;
const KEEP_POINTS = 150; // five minutes of two-second points

const st = {
  token: null,
  kind: null, // "serve" or "cluster"
  prevIo: null,
  series: { t: [], riops: [], wiops: [], rmb: [], wmb: [], p50: [], p99: [], p999: [] },
  lastSeq: null,
  events: [],
  failures: 0,
};

// ---------------------------------------------------------------- math

// The q quantile of the latencies counted between two cumulative bucket
// lists, interpolated inside its bucket as Prometheus does (the Rust twin
// is io_stats::quantile in crates/strata/src/io_stats.rs).
function quantile(bounds, before, after, q) {
  const delta = after.map((a, i) => Math.max(0, a - (before[i] || 0)));
  const total = delta[delta.length - 1];
  if (!total) return null;
  const rank = Math.min(Math.max(q, 0), 1) * total;
  for (let i = 0; i < delta.length; i++) {
    if (delta[i] >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const lower = i === 0 ? 0 : bounds[i - 1];
      const below = i === 0 ? 0 : delta[i - 1];
      const inside = delta[i] - below;
      if (!inside) return bounds[i];
      return lower + (bounds[i] - lower) * (rank - below) / inside;
    }
  }
  return bounds[bounds.length - 1];
}

function opOf(c, name) {
  return (c && c.ops && c.ops[name]) || { commands: 0, bytes: 0, buckets: [] };
}

function sumBuckets(a, b) {
  const n = Math.max(a.length, b.length);
  const out = [];
  for (let i = 0; i < n; i++) out.push((a[i] || 0) + (b[i] || 0));
  return out;
}

// Rates of each volume (or host) between two snapshots of /api/v1/stats/io.
function rates(now, before, which) {
  const secs = Math.max((now.time_ms - before.time_ms) / 1000, 0.001);
  const prevByName = new Map((before[which] || []).map((c) => [c.name, c]));
  return (now[which] || []).map((c) => {
    const p = prevByName.get(c.name);
    const [ra, rb, wa, wb] = [opOf(c, "read"), opOf(p, "read"), opOf(c, "write"), opOf(p, "write")];
    const a = sumBuckets(ra.buckets, wa.buckets), b = sumBuckets(rb.buckets, wb.buckets);
    const per = (x, y) => Math.max(0, x - y) / secs;
    return {
      name: c.name,
      riops: per(ra.commands, rb.commands), wiops: per(wa.commands, wb.commands),
      rbps: per(ra.bytes, rb.bytes), wbps: per(wa.bytes, wb.bytes),
      p50: quantile(now.bounds_seconds, b, a, 0.5), p99: quantile(now.bounds_seconds, b, a, 0.99),
      p999: quantile(now.bounds_seconds, b, a, 0.999),
      a, b, inFlight: c.in_flight,
    };
  });
}

// ---------------------------------------------------------------- format

function fmtBytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + u[i];
}
const fmtNum = (n) => (n == null ? "–" : Math.round(n).toLocaleString("en-US"));
const fmtMs = (s) => (s == null ? "–" : (s * 1000).toFixed(s < 0.001 ? 3 : 2));
const fmtMBs = (b) => (b / 1e6).toFixed(1);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text != null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = document.createElement("td"); td.appendChild(c); tr.appendChild(td); }
    else if (Array.isArray(c)) tr.appendChild(el("td", c[0], c[1]));
    else tr.appendChild(el("td", c));
  }
  tbody.appendChild(tr);
  return tr;
}

function bar(fraction) {
  const b = el("div", null, "bar");
  const s = el("span", null, fraction >= 0.95 ? "bad" : fraction >= 0.8 ? "warn" : "");
  s.style.width = (Math.min(Math.max(fraction, 0), 1) * 100).toFixed(1) + "%";
  b.appendChild(s);
  return b;
}

// ---------------------------------------------------------------- charts

function drawChart(canvas, lines, colors) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, h = canvas.clientHeight || 160;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const pad = { l: 46, r: 6, t: 6, b: 16 };
  let max = 0;
  for (const l of lines) for (const v of l) if (v != null && v > max) max = v;
  max = max > 0 ? max * 1.1 : 1;
  g.strokeStyle = "#deded8"; g.fillStyle = "#6b6b66"; g.font = "11px system-ui"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + (h - pad.t - pad.b) * i / 4;
    g.beginPath(); g.moveTo(pad.l, y); g.lineTo(w - pad.r, y); g.stroke();
    const v = max * (4 - i) / 4;
    g.fillText(v >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(v >= 1 ? 1 : 3), 2, y + 4);
  }
  const n = Math.max(...lines.map((l) => l.length), 2);
  lines.forEach((l, k) => {
    g.strokeStyle = colors[k]; g.lineWidth = 1.6; g.beginPath();
    let started = false;
    l.forEach((v, i) => {
      if (v == null) { started = false; return; }
      const x = pad.l + (w - pad.l - pad.r) * i / (n - 1);
      const y = pad.t + (h - pad.t - pad.b) * (1 - v / max);
      if (started) g.lineTo(x, y); else { g.moveTo(x, y); started = true; }
    });
    g.stroke();
  });
}

// ---------------------------------------------------------------- API

class Unauthorized extends Error {}

async function get(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + st.token }, cache: "no-store" });
  if (r.status === 401 || r.status === 403) throw new Unauthorized((await r.json().catch(() => ({}))).error || "refused");
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// ---------------------------------------------------------------- render

function render(status, pool, volumes, io) {
  const $ = (id) => document.getElementById(id);
  $("where").textContent = pool ? "cluster, asked node " + pool.node : "single node, strata " + status.version;

  // Rates.
  let vols = [], hosts = [];
  if (st.prevIo && io.time_ms > st.prevIo.time_ms) {
    vols = rates(io, st.prevIo, "volumes");
    hosts = rates(io, st.prevIo, "hosts");
  }
  const tot = vols.reduce((t, v) => ({
    riops: t.riops + v.riops, wiops: t.wiops + v.wiops, rbps: t.rbps + v.rbps, wbps: t.wbps + v.wbps,
    a: sumBuckets(t.a, v.a), b: sumBuckets(t.b, v.b),
  }), { riops: 0, wiops: 0, rbps: 0, wbps: 0, a: [], b: [] });
  const q = (x) => (tot.a.length ? quantile(io.bounds_seconds, tot.b, tot.a, x) : null);
  const [p50, p99, p999] = [q(0.5), q(0.99), q(0.999)];
  if (st.prevIo) {
    const s = st.series;
    s.t.push(io.time_ms); s.riops.push(tot.riops); s.wiops.push(tot.wiops);
    s.rmb.push(tot.rbps / 1e6); s.wmb.push(tot.wbps / 1e6);
    s.p50.push(p50 == null ? null : p50 * 1e3); s.p99.push(p99 == null ? null : p99 * 1e3); s.p999.push(p999 == null ? null : p999 * 1e3);
    for (const k of Object.keys(s)) if (s[k].length > KEEP_POINTS) s[k].shift();
  }
  st.prevIo = io;
  $("total-iops").textContent = fmtNum(tot.riops + tot.wiops);
  $("total-iops-split").textContent = fmtNum(tot.riops) + " read, " + fmtNum(tot.wiops) + " write";
  $("total-bps").textContent = fmtMBs(tot.rbps + tot.wbps) + " MB/s";
  $("total-bps-split").textContent = fmtMBs(tot.rbps) + " read, " + fmtMBs(tot.wbps) + " write";
  $("total-lat").textContent = fmtMs(p50) + " / " + fmtMs(p99) + " / " + fmtMs(p999) + " ms";
  if (!io.enabled) $("total-lat").textContent = "not recorded (--no-io-metrics)";
  drawChart($("chart-iops"), [st.series.riops, st.series.wiops], ["#2563c9", "#c2410c"]);
  drawChart($("chart-bps"), [st.series.rmb, st.series.wmb], ["#2563c9", "#c2410c"]);
  drawChart($("chart-lat"), [st.series.p50, st.series.p99, st.series.p999], ["#1f7a3f", "#c2410c", "#7c3aed"]);

  // Capacity and drives.
  const alerts = [];
  const drives = [];
  if (status) {
    const ext = status.extent_size || 0;
    for (const d of status.drives || []) {
      drives.push({ node: "this node", path: d.path, used: d.extents_allocated * ext, cap: d.extents_total * ext, failed: d.failed });
    }
    $("capacity").textContent = fmtBytes(status.allocated_bytes) + " of " + fmtBytes(status.capacity_bytes);
    $("nodes-title").textContent = "Drives";
  } else {
    for (const n of pool.nodes || []) {
      if (n.state !== "up") alerts.push(["error", "node " + n.name + " is down"]);
      if (!(n.drives || []).length) drives.push({ node: n.name, path: "–", used: n.allocated_bytes || 0, cap: n.capacity_bytes, failed: false, nodeState: n.state });
      for (const d of n.drives || []) drives.push({ node: n.name, path: d.path, used: d.allocated_bytes, cap: d.capacity_bytes, failed: d.failed, nodeState: n.state });
    }
    const t = pool.totals || {};
    $("capacity").textContent = fmtBytes(t.allocated_bytes) + " of " + fmtBytes(t.raw_bytes);
    $("nodes-title").textContent = "Nodes and drives";
    for (const w of pool.warnings || []) alerts.push(["warning", w]);
  }
  const used = drives.reduce((s, d) => s + d.used, 0), cap = drives.reduce((s, d) => s + d.cap, 0);
  $("capacity-split").textContent = (cap ? (100 * used / cap).toFixed(1) : "0") + "% allocated over " + drives.length + " drives";
  const nb = document.querySelector("#nodes tbody");
  nb.replaceChildren();
  for (const d of drives) {
    const f = d.cap ? d.used / d.cap : 0;
    if (d.failed) alerts.push(["error", "drive " + d.path + " (" + d.node + ") failed"]);
    if (f >= 0.8) alerts.push([f >= 0.95 ? "error" : "warning", "drive " + d.path + " (" + d.node + ") is " + Math.floor(100 * f) + "% full"]);
    const state = d.failed ? "failed" : d.nodeState && d.nodeState !== "up" ? d.nodeState : "online";
    row(nb, [d.node, d.path, fmtBytes(d.used) + " / " + fmtBytes(d.cap), bar(f), [state, "state-" + state]]);
  }

  // Volumes.
  const byName = new Map(vols.map((v) => [v.name, v]));
  const vb = document.querySelector("#volumes tbody");
  vb.replaceChildren();
  const poolVols = pool ? new Map((pool.volumes || []).map((v) => [v.name, v])) : new Map();
  for (const v of volumes) {
    const pv = poolVols.get(v.name) || {};
    const state = pv.state || v.state || "online";
    for (const r of pv.resync || []) {
      const done = r.bytes_total ? Math.round(100 * (1 - r.bytes_left / r.bytes_total)) : 0;
      const to = ((pool.nodes || []).find((n) => n.id === r.node) || {}).name || r.node;
      const eta = r.eta_secs != null ? ", about " + Math.ceil(r.eta_secs / 60) + " min left" : "";
      alerts.push(["warning", "volume " + v.name + ": " + (r.kind === "rebuild" ? "rebuilding" : "resyncing") + " to node " + to +
        ", " + done + "% done (" + fmtBytes(r.bytes_left) + " left at " + fmtBytes(r.rate_bytes_per_sec) + "/s" + eta + ")"]);
    }
    if (["degraded", "down", "offline", "rebuilding"].includes(state)) {
      alerts.push([state === "down" || state === "offline" ? "error" : "warning", "volume " + v.name + " is " + state]);
    }
    const r = byName.get(v.name) || {};
    const allowed = (v.allowed_hosts || []).length ? v.allowed_hosts.join(", ") : "any";
    const tr = row(vb, [
      v.name, v.size || fmtBytes(v.size_bytes), fmtBytes(v.allocated_bytes != null ? v.allocated_bytes : pv.allocated_bytes),
      pv.protection || v.protection || "single copy", [state, "state-" + state.replace(" ", "-")],
      pv.owner_name || (pool ? "–" : "this node"), [allowed, "wrap"],
      [fmtNum(r.riops), "num"], [fmtNum(r.wiops), "num"],
      [r.rbps != null ? fmtMBs(r.rbps + r.wbps) : "–", "num"], [fmtMs(r.p99), "num"], [r.inFlight != null ? r.inFlight : "–", "num"],
    ]);
    tr.dataset.volume = v.name;
  }

  // Hosts.
  const hb = document.querySelector("#hosts tbody");
  hb.replaceChildren();
  if (!hosts.length) row(hb, [["no I/O from any host yet", "sev-info"], "", "", ""]);
  for (const h of hosts) row(hb, [[h.name, "wrap nqn"], [fmtNum(h.riops + h.wiops), "num"], [fmtMBs(h.rbps + h.wbps), "num"], [fmtMs(h.p99), "num"]]);

  // Events and alerts.
  const eb = document.querySelector("#events tbody");
  eb.replaceChildren();
  const tenMin = Date.now() - 10 * 60 * 1000;
  for (const e of st.events.slice(-50).reverse()) {
    row(eb, [new Date(e.time_ms).toISOString().replace("T", " ").slice(0, 19), [e.severity, "sev-" + e.severity], e.kind,
      [e.message + (e.reason ? " [" + e.reason + "]" : ""), "wrap"]]);
    if (e.severity !== "info" && e.time_ms >= tenMin) alerts.push([e.severity, e.message]);
  }
  const al = $("alerts");
  al.replaceChildren();
  const seen = new Set();
  for (const [sev, text] of alerts) {
    if (seen.has(text)) continue;
    seen.add(text);
    al.appendChild(el("li", text, sev));
  }
  if (!al.children.length) al.appendChild(el("li", "nothing needs attention", "none"));
  const errors = alerts.some(([s]) => s === "error"), warnings = alerts.length > 0;
  const v = $("verdict");
  v.textContent = errors ? "needs attention" : warnings ? "warnings" : "healthy";
  v.className = "pill " + (errors ? "bad" : warnings ? "warn" : "ok");
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

async function tick() {
  try {
    if (!st.kind) {
      try { await get("/api/v1/status"); st.kind = "serve"; } catch (e) { if (e instanceof Unauthorized) throw e; st.kind = "cluster"; }
    }
    const [status, pool] = st.kind === "serve" ? [await get("/api/v1/status"), null] : [null, await get("/api/v1/pool")];
    const [volumes, io] = await Promise.all([get("/api/v1/volumes"), get("/api/v1/stats/io")]);
    if (st.lastSeq === null) {
      const head = await get("/api/v1/events?since=18446744073709551615&limit=0");
      st.lastSeq = Math.max(0, head.last_seq - 200);
    }
    const page = await get("/api/v1/events?since=" + st.lastSeq + "&limit=1000");
    for (const e of page.events) {
      if (e.seq <= st.lastSeq) continue; // already shown
      st.events.push(e);
      st.lastSeq = e.seq;
    }
    if (st.events.length > 500) st.events.splice(0, st.events.length - 500);
    render(status, pool, Array.isArray(volumes) ? volumes : [], io);
    document.getElementById("main").hidden = false;
    document.getElementById("login").hidden = true;
    st.failures = 0;
  } catch (e) {
    if (e instanceof Unauthorized) { showLogin(e.message); return false; }
    st.failures++;
    document.getElementById("updated").textContent = "cannot reach the node: " + e.message;
  }
  return true;
}

function showLogin(why) {
  document.getElementById("main").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = why || "";
}

async function loop() {
  if (await tick()) setTimeout(loop, EVERY_MS);
}

function start() {
  const m = /(?:^|&)token=([^&]+)/.exec(location.hash.slice(1));
  if (m) {
    sessionStorage.setItem("strata-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname); // the token leaves the address bar
  }
  st.token = sessionStorage.getItem("strata-token");
  document.getElementById("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    st.token = document.getElementById("token").value.trim();
    sessionStorage.setItem("strata-token", st.token);
    loop();
  });
  if (!st.token) showLogin(""); else loop();
}

if (typeof document !== "undefined") start();
if (typeof module !== "undefined") module.exports = { quantile, rates };
