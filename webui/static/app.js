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
  const t = await getJson("/api/v1/telemetry");
  const s = t.series || [];
  const writes = s.map(x => x.smb_write_bps + x.nvme_write_bps);
  const reads = s.map(x => x.smb_read_bps + x.nvme_read_bps);
  const peak = Math.max(0, ...s.map((x, i) => writes[i] + reads[i]));
  const max = Math.max(1, ...writes, ...reads);
  document.getElementById("chart-write").setAttribute("points", points(writes, max));
  document.getElementById("chart-read").setAttribute("points", points(reads, max));
  document.getElementById("throughput-chart").dataset.peak = String(peak);
  document.getElementById("chart-max").textContent = fmtBytes(max) + "/s";
  setRate("rate-smb-write", t.smb.write_bytes_per_s);
  setRate("rate-smb-read", t.smb.read_bytes_per_s);
  setRate("rate-nvme-write", t.nvme.write_bytes_per_s);
  setRate("rate-nvme-read", t.nvme.read_bytes_per_s);
  setRate("rate-total", t.smb.write_bytes_per_s + t.smb.read_bytes_per_s +
    t.nvme.write_bytes_per_s + t.nvme.read_bytes_per_s);
  document.getElementById("smb-sessions").textContent = String(t.smb.sessions);
  document.getElementById("nvme-sessions").textContent = String(t.nvme.sessions);
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
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "dashboard") poll(refreshDashboard, 1000);
  if (page === "shares") poll(refreshShares, 2000);
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", ev => {
      if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
    });
  }
});
