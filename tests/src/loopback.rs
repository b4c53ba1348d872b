//! The machine's loopback TCP ceiling, measured with iperf3 (the tool issue 8 names), for
//! the benchmarks to print beside their own figures: on one host, client and server share
//! the cores and every byte crosses loopback TCP, so no TCP server's rate can pass it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context};

use crate::free_port;

/// Seconds of each iperf3 run.
pub const IPERF_SECS: u32 = 5;

/// Loopback TCP ceiling from iperf3 (the tool): `streams` parallel streams from
/// 127.0.0.1 to a one-off server for [`IPERF_SECS`]; MB/s received, all streams together.
/// The raw JSON is kept in `out`, named after the stream count and `tag` (which tells
/// apart several measurements of one run).
pub fn iperf3_loopback_mbps(streams: usize, tag: &str, out: &Path) -> anyhow::Result<f64> {
    let port = free_port()?;
    let mut server = Command::new("iperf3")
        .args(["--server", "--one-off", "--bind", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("running iperf3 (apt-get install iperf3)")?;
    // The server needs a moment to listen; a client that finds nothing there fails at once
    // (with --json, iperf3 3.12 reports that in the JSON's "error" and still exits 0).
    let mut attempt = 0;
    let (output, v) = loop {
        let output = Command::new("iperf3")
            .args(["--client", "127.0.0.1", "--json", "--port"])
            .arg(port.to_string())
            .args(["--time", &IPERF_SECS.to_string()])
            .args(["--parallel", &streams.to_string()])
            .output()
            .context("running iperf3 (apt-get install iperf3)")?;
        let v: Option<serde_json::Value> = serde_json::from_slice(&output.stdout).ok();
        let ok = output.status.success() && v.as_ref().is_some_and(|v| v.get("error").is_none());
        attempt += 1;
        if ok || attempt >= 50 {
            break (output, v);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = server.kill();
    let _ = server.wait();
    let name = if tag.is_empty() {
        format!("iperf3-{streams}.json")
    } else {
        format!("iperf3-{streams}-{tag}.json")
    };
    std::fs::write(out.join(name), &output.stdout)?;
    let v = v.context("iperf3 printed no JSON")?;
    ensure!(
        output.status.success() && v.get("error").is_none(),
        "iperf3 failed: {}{}",
        v.get("error").map(|e| e.to_string()).unwrap_or_default(),
        String::from_utf8_lossy(&output.stderr)
    );
    let bits = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 JSON without end.sum_received.bits_per_second")?;
    Ok(bits / 8.0 / 1e6)
}
