//! `/metrics` against the real binary: it is served without authentication, parses with a
//! Prometheus text-format parser, and its byte counters match the bytes smbclient and the
//! Rust NVMe initiator actually moved, within 1%. With `QUARRY_TELEMETRY=off` the counters
//! stay at zero.

use std::process::Command as Process;

use anyhow::{ensure, Context};
use quarry_tests::nvme_initiator::{Controller, Options};
use quarry_tests::{Api, QuarryProcess};
use serde_json::json;

const USER: &str = "metrics";
const PASS: &str = "metrics-secret-1";
/// Size of the file put and got over SMB.
const SMB_FILE: usize = 3 * 1024 * 1024 + 12_345;

/// Fetches `/metrics` without credentials and parses it.
fn scrape(q: &QuarryProcess) -> anyhow::Result<prometheus_parse::Scrape> {
    let mut resp = ureq::get(format!("{}/metrics", q.url())).call()?;
    ensure!(resp.status() == 200, "status {}", resp.status());
    let text = resp.body_mut().read_to_string()?;
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).context("parsing /metrics")
}

/// The sum of metric `name` over every sample with `direction` label `dir` (0 when absent).
fn counter(s: &prometheus_parse::Scrape, name: &str, dir: &str) -> f64 {
    value(s, name, &[("direction", dir)])
}

/// The sum of metric `name` over the samples carrying every label of `labels`.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Gauge(v) => v,
            _ => f64::NAN,
        })
        .sum()
}

/// The observation count of histogram `name` with `op` label `op` (its +Inf bucket).
fn histogram_count(s: &prometheus_parse::Scrape, name: &str, op: &str) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name && x.labels.get("op") == Some(op))
        .filter_map(|x| match &x.value {
            prometheus_parse::Value::Histogram(b) => b
                .iter()
                .map(|c| c.count)
                .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c)))),
            _ => None,
        })
        .sum()
}

fn within_1pct(got: f64, want: f64) -> bool {
    (got - want).abs() <= want * 0.01
}

fn smb_put_get(q: &QuarryProcess) -> anyhow::Result<()> {
    let api = q.admin()?;
    let (s, b) = api.post("/api/v1/users", &json!({"name": USER, "password": PASS}))?;
    ensure!(s == 201, "{b}");
    let (s, b) = api.post("/api/v1/shares", &json!({"name": "m"}))?;
    ensure!(s == 201, "{b}");
    let dir = tempfile::tempdir()?;
    let data: Vec<u8> = (0..SMB_FILE).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.path().join("f.bin"), &data)?;
    let out = Process::new("smbclient")
        .arg("//127.0.0.1/m")
        .args([
            "-p",
            &q.smb.port().to_string(),
            "-U",
            &format!("{USER}%{PASS}"),
        ])
        .args(["-c", "put f.bin; get f.bin g.bin"])
        .current_dir(dir.path())
        .output()?;
    ensure!(
        out.status.success(),
        "smbclient: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        std::fs::read(dir.path().join("g.bin"))? == data,
        "round trip"
    );
    Ok(())
}

#[test]
fn smb_bytes_in_metrics_match_smbclient_transfer() -> anyhow::Result<()> {
    let q = QuarryProcess::start()?;
    let before = scrape(&q)?;
    ensure!(counter(&before, "quarry_smb_bytes_total", "write") == 0.0);
    smb_put_get(&q)?;
    let after = scrape(&q)?;
    let w = counter(&after, "quarry_smb_bytes_total", "write");
    let r = counter(&after, "quarry_smb_bytes_total", "read");
    ensure!(within_1pct(w, SMB_FILE as f64), "written {w} vs {SMB_FILE}");
    ensure!(within_1pct(r, SMB_FILE as f64), "read {r} vs {SMB_FILE}");
    per_share_metrics_agree(&after)?;
    telemetry_json_agrees(&q)?;
    Ok(())
}

/// The share's own counters, histograms and usage gauge agree with the transfer.
fn per_share_metrics_agree(m: &prometheus_parse::Scrape) -> anyhow::Result<()> {
    let w = value(
        m,
        "quarry_smb_bytes_total",
        &[("share", "m"), ("direction", "write")],
    );
    ensure!(within_1pct(w, SMB_FILE as f64), "share m written {w}");
    let writes = value(
        m,
        "quarry_smb_operations_total",
        &[("share", "m"), ("op", "write")],
    );
    let reads = value(
        m,
        "quarry_smb_operations_total",
        &[("share", "m"), ("op", "read")],
    );
    let creates = value(
        m,
        "quarry_smb_operations_total",
        &[("share", "m"), ("op", "create")],
    );
    ensure!(
        writes >= 1.0 && reads >= 1.0 && creates >= 2.0,
        "ops w{writes} r{reads} c{creates}"
    );
    // Each timed request is observed once: the histogram counts equal the operation
    // counters (one share, one client in this process).
    let hw = histogram_count(m, "quarry_smb_request_duration_seconds", "write");
    let hc = histogram_count(m, "quarry_smb_request_duration_seconds", "create");
    ensure!(hw == writes, "write histogram {hw} vs {writes} operations");
    ensure!(
        hc == creates,
        "create histogram {hc} vs {creates} operations"
    );
    let used = value(m, "quarry_share_used_bytes", &[("share", "m")]);
    ensure!(used == SMB_FILE as f64, "share usage gauge {used}");
    ensure!(
        value(m, "quarry_pool_size_bytes", &[]) > 0.0,
        "pool size gauge"
    );
    ensure!(
        value(m, "quarry_pool_healthy", &[]) == 1.0,
        "pool health gauge"
    );
    Ok(())
}

/// `/api/v1/telemetry` needs a login, is open to a viewer, and its totals and its 1 s
/// series agree with the bytes moved.
fn telemetry_json_agrees(q: &QuarryProcess) -> anyhow::Result<()> {
    let (s, _) = Api::anonymous(q).get("/api/v1/telemetry")?;
    ensure!(s == 401, "anonymous telemetry: {s}");
    let admin = q.admin()?;
    let (s, b) = admin.post(
        "/api/v1/users",
        &json!({"name": "watcher", "password": "watcher-secret-1", "role": "viewer"}),
    )?;
    ensure!(s == 201, "{b}");
    let viewer = q.login("watcher", "watcher-secret-1")?;
    // Let the sampler record the second in which the transfer ended.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (s, t) = viewer.get("/api/v1/telemetry")?;
    ensure!(s == 200, "viewer telemetry: {s} {t}");
    ensure!(t["enabled"] == true, "{t}");
    ensure!(t["smb"]["write_bytes_total"] == SMB_FILE as u64, "{t}");
    ensure!(t["smb"]["read_bytes_total"] == SMB_FILE as u64, "{t}");
    let series = t["series"].as_array().context("series")?;
    ensure!(!series.is_empty(), "{t}");
    let sum: u64 = series
        .iter()
        .filter_map(|x| x["smb_write_bps"].as_u64())
        .sum();
    ensure!(sum == SMB_FILE as u64, "series sums to {sum}: {t}");
    let share = t["shares"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["share"] == "m"))
        .context("share m in telemetry")?;
    ensure!(share["write_bytes_total"] == SMB_FILE as u64, "{share}");
    ensure!(share["read_bytes_total"] == SMB_FILE as u64, "{share}");
    ensure!(share["used_bytes"] == SMB_FILE as u64, "{share}");
    ensure!(share["operations_total"].as_u64() > Some(3), "{share}");
    let write_latency = t["latency"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|l| l["protocol"] == "smb" && l["op"] == "write")
        })
        .context("smb write latency")?;
    let (p50, p99) = (
        write_latency["p50_us"].as_u64(),
        write_latency["p99_us"].as_u64(),
    );
    ensure!(
        write_latency["count"].as_u64() >= Some(1) && p50 > Some(0) && p99 >= p50,
        "{write_latency}"
    );
    let (s, day) = viewer.get("/api/v1/telemetry?window=1d")?;
    ensure!(
        s == 200 && day["resolution_s"] == 60 && day["window"] == "1d",
        "{day}"
    );
    let (s, hour) = viewer.get("/api/v1/telemetry?window=1h")?;
    ensure!(s == 200 && hour["resolution_s"] == 1, "{hour}");
    let (s, bad) = viewer.get("/api/v1/telemetry?window=7y")?;
    ensure!(s == 400 || s == 422, "bad window: {s} {bad}");
    Ok(())
}

#[test]
fn telemetry_off_collects_nothing() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let q = QuarryProcess::start_with(data.path(), &[("QUARRY_TELEMETRY", "off")])?;
    smb_put_get(&q)?;
    let after = scrape(&q)?;
    ensure!(counter(&after, "quarry_smb_bytes_total", "write") == 0.0);
    ensure!(counter(&after, "quarry_smb_bytes_total", "read") == 0.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvme_bytes_in_metrics_match_initiator_io() -> anyhow::Result<()> {
    let q = QuarryProcess::start()?;
    let nqn = "nqn.2026-01.io.quarry:metrics";
    let api = q.admin()?;
    api.export_volume("mv", 64 << 20, nqn, None)?;

    let mut o = Options::new(q.nvme, nqn);
    o.io_queues = 1;
    let mut c = Controller::connect(&o).await?;
    let bs = 4096u32;
    let chunk = 64 * bs as usize;
    let (writes, reads) = (16usize, 24usize);
    for i in 0..writes {
        let data = vec![(i % 256) as u8; chunk];
        let r = c.write(0, 1, (i * 64) as u64, data, bs, false).await?;
        quarry_tests::nvme_initiator::check(&r, "Write")?;
    }
    for i in 0..reads {
        c.read(0, 1, ((i % writes) * 64) as u64, 64, bs).await?;
    }
    let (m, t) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let m = scrape(&q)?;
        let (s, t) = q.admin()?.get("/api/v1/telemetry")?;
        ensure!(s == 200, "{t}");
        Ok((m, t))
    })
    .await??;
    let w = counter(&m, "quarry_nvme_bytes_total", "write");
    let r = counter(&m, "quarry_nvme_bytes_total", "read");
    let (want_w, want_r) = ((writes * chunk) as f64, (reads * chunk) as f64);
    ensure!(within_1pct(w, want_w), "written {w} vs {want_w}");
    ensure!(within_1pct(r, want_r), "read {r} vs {want_r}");
    let vr = value(
        &m,
        "quarry_nvme_volume_bytes_total",
        &[("volume", "mv"), ("direction", "read")],
    );
    ensure!(vr == want_r, "volume mv read {vr}");
    let vw = value(
        &m,
        "quarry_nvme_volume_operations_total",
        &[("volume", "mv"), ("op", "write")],
    );
    ensure!(vw == writes as f64, "volume mv writes {vw}");
    let hr = histogram_count(&m, "quarry_nvme_io_duration_seconds", "read");
    ensure!(hr == reads as f64, "read latency histogram counted {hr}");
    let vol = t["volumes"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["volume"] == "mv"))
        .context("volume mv in telemetry")?;
    ensure!(
        vol["reads_total"] == reads && vol["writes_total"] == writes,
        "{vol}"
    );
    // The initiator is still connected: its address is a client with every command.
    let client = t["clients"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["protocol"] == "nvme_tcp"))
        .context("nvme client in telemetry")?;
    ensure!(client["client"] == "127.0.0.1", "{client}");
    ensure!(client["read_bytes_total"] == want_r as u64, "{client}");
    ensure!(
        client["operations_total"] == (reads + writes) as u64,
        "{client}"
    );
    drop(c);
    Ok(())
}
