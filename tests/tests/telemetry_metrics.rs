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

/// The value of counter `name` with `direction` label `dir` (0 when absent).
fn counter(s: &prometheus_parse::Scrape, name: &str, dir: &str) -> f64 {
    s.samples
        .iter()
        .find(|x| x.metric == name && x.labels.get("direction") == Some(dir))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Gauge(v) => v,
            _ => f64::NAN,
        })
        .unwrap_or(0.0)
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
    telemetry_json_agrees(&q)?;
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
    let (s, b) = api.post(
        "/api/v1/volumes",
        &json!({"name": "mv", "size_bytes": 64u64 << 20}),
    )?;
    ensure!(s < 300, "{b}");
    let (s, b) = api.post(
        "/api/v1/nvme/subsystems",
        &json!({"nqn": nqn, "allow_any_host": true}),
    )?;
    ensure!(s < 300, "{b}");
    let (s, b) = api.post(
        &format!("/api/v1/nvme/subsystems/{nqn}/namespaces"),
        &json!({"volume": "mv"}),
    )?;
    ensure!(s < 300, "{b}");

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
    let m = tokio::task::spawn_blocking(move || scrape(&q)).await??;
    let w = counter(&m, "quarry_nvme_bytes_total", "write");
    let r = counter(&m, "quarry_nvme_bytes_total", "read");
    let (want_w, want_r) = ((writes * chunk) as f64, (reads * chunk) as f64);
    ensure!(within_1pct(w, want_w), "written {w} vs {want_w}");
    ensure!(within_1pct(r, want_r), "read {r} vs {want_r}");
    Ok(())
}
