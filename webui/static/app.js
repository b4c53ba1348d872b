// Quarry web UI: live refresh only. Every page works without this script; it polls the
// REST API with the session cookie (GET needs no CSRF header) and updates figures in
// place: the dashboard's throughput chart and rates, the shares page's usage bars. It
// also asks before destructive forms (data-confirm) are sent.
"use strict";

const W = 300, H = 100;

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  if (n < 1024) return n + " B";
  let v = n, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return (v < 10 ? v.toFixed(1) : v.toFixed(0)) + " " + units[u];
}

// Same drawing as quarry_webui::chart_points: right-aligned, newest sample at the right.
function points(values, max) {
  max = Math.max(max, 1);
  const shown = values.slice(-W), start = W - shown.length;
  return shown.map((v, i) => (start + i) + "," + (H - (v / max) * (H - 2)).toFixed(1)).join(" ");
}

// Same reduction as quarry_webui::downsample: means of consecutive samples, at most W.
function downsample(values) {
  if (values.length <= W) return values;
  const per = Math.ceil(values.length / W), out = [];
  for (let i = 0; i < values.length; i += per) {
    const c = values.slice(i, i + per);
    out.push(Math.floor(c.reduce((a, b) => a + b, 0) / c.length));
  }
  return out;
}

function fmtMicros(us) {
  if (!us) return "–";
  if (us < 1000) return us + " µs";
  if (us < 1e6) return (us / 1e3).toFixed(1) + " ms";
  return (us / 1e6).toFixed(2) + " s";
}

function setText(id, text) {
  const el = document.getElementById(id);
  if (el) el.textContent = text;
}

function fillRows(tbodySelector, rows, empty) {
  const body = document.querySelector(tbodySelector);
  if (!body) return;
  body.replaceChildren();
  if (rows.length === 0 && empty) rows = [[{ text: empty, span: 6, muted: true }]];
  for (const cells of rows) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = typeof c === "object" ? c.text : String(c);
      if (typeof c === "object" && c.span) td.colSpan = c.span;
      if (typeof c === "object" && c.muted) td.className = "muted";
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

const WINDOW_TITLES = { "5m": "Last five minutes", "1h": "Last hour", "1d": "Last day" };
let chartWindow = "5m";

function setRate(id, bps) {
  const el = document.getElementById(id);
  if (!el) return;
  el.dataset.bps = String(bps);
  el.textContent = fmtBytes(bps) + "/s";
}

async function getJson(path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function refreshDashboard() {
  const t = await getJson("/api/v1/telemetry?window=" + encodeURIComponent(chartWindow));
  const s = t.series || [];
  const series = f => downsample(s.map(f));
  const writes = series(x => x.smb_write_bps + x.nvme_write_bps);
  const reads = series(x => x.smb_read_bps + x.nvme_read_bps);
  const ops = series(x => x.smb_ops + x.nvme_ops);
  const smbP99 = series(x => Math.max(x.smb_read_p99_us, x.smb_write_p99_us));
  const nvmeP99 = series(x => Math.max(x.nvme_read_p99_us, x.nvme_write_p99_us));
  const peak = Math.max(0, ...writes.map((w, i) => w + reads[i]));
  const max = Math.max(1, ...writes, ...reads);
  const opsMax = Math.max(1, ...ops);
  const latMax = Math.max(1, ...smbP99, ...nvmeP99);
  document.getElementById("chart-write").setAttribute("points", points(writes, max));
  document.getElementById("chart-read").setAttribute("points", points(reads, max));
  document.getElementById("chart-ops").setAttribute("points", points(ops, opsMax));
  document.getElementById("chart-smb-p99").setAttribute("points", points(smbP99, latMax));
  document.getElementById("chart-nvme-p99").setAttribute("points", points(nvmeP99, latMax));
  document.getElementById("throughput-chart").dataset.peak = String(peak);
  setText("chart-max", fmtBytes(max) + "/s");
  setText("ops-max", opsMax + "/s");
  setText("latency-max", fmtMicros(latMax));
  setText("window-title", WINDOW_TITLES[t.window] || WINDOW_TITLES["5m"]);
  setRate("rate-smb-write", t.smb.write_bytes_per_s);
  setRate("rate-smb-read", t.smb.read_bytes_per_s);
  setRate("rate-nvme-write", t.nvme.write_bytes_per_s);
  setRate("rate-nvme-read", t.nvme.read_bytes_per_s);
  setRate("rate-total", t.smb.write_bytes_per_s + t.smb.read_bytes_per_s +
    t.nvme.write_bytes_per_s + t.nvme.read_bytes_per_s);
  setText("smb-sessions", String(t.smb.sessions));
  setText("nvme-sessions", String(t.nvme.sessions));
  fillRows("#latency tbody", (t.latency || []).map(l => [l.protocol === "smb" ? "SMB" : "NVMe", l.op,
    l.count, fmtMicros(l.p50_us), fmtMicros(l.p99_us), fmtMicros(l.p999_us)]));
  fillRows("#share-traffic tbody", (t.shares || []).map(x => [x.share, fmtBytes(x.read_bytes_total),
    fmtBytes(x.write_bytes_total), x.operations_total, x.errors_total]), "No SMB traffic since start.");
  fillRows("#volume-traffic tbody", (t.volumes || []).map(x => [x.volume, fmtBytes(x.read_bytes_total),
    fmtBytes(x.write_bytes_total), x.reads_total + x.writes_total, x.errors_total]), "No NVMe traffic since start.");
}

async function refreshShares() {
  const shares = await getJson("/api/v1/shares");
  for (const s of shares) {
    const row = document.querySelector('tr[data-share="' + CSS.escape(s.name) + '"]');
    if (!row) continue;
    row.dataset.used = String(s.used_bytes);
    const meter = row.querySelector("meter");
    if (meter) meter.value = s.used_bytes;
    const used = row.querySelector(".used");
    if (used) used.textContent = fmtBytes(s.used_bytes);
  }
}

function poll(fn, ms) {
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden) return;
    busy = true;
    try { await fn(); } catch (e) { console.warn("refresh failed:", e.message); } finally { busy = false; }
  };
  tick();
  setInterval(tick, ms);
  return tick;
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "dashboard") {
    const refresh = poll(refreshDashboard, 1000);
    for (const b of document.querySelectorAll("[data-window]")) {
      b.addEventListener("click", () => {
        chartWindow = b.dataset.window;
        for (const o of document.querySelectorAll("[data-window]")) {
          o.setAttribute("aria-pressed", String(o === b));
        }
        refresh();
      });
    }
  }
  if (page === "shares") poll(refreshShares, 2000);
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", ev => {
      if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
    });
  }
});
