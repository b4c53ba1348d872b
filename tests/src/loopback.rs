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

/// The loopback ceiling for `streams` streams, measured once before a bench's workloads;
/// [`Ceiling::settle`] measures again after them and keeps the higher figure: on a shared
/// host one 5 s iperf3 run can come out well below what the machine carries a few minutes
/// later (1.8 against 3.0 GB/s within half an hour here), which would put a server above
/// its own ceiling.
pub struct Ceiling {
    /// Parallel streams.
    pub streams: usize,
    /// MB/s measured before the workloads.
    pub before: f64,
}

impl Ceiling {
    /// Measures the ceiling before the workloads (raw JSON `iperf3-N-before.json` in `out`).
    pub fn before(streams: usize, out: &Path) -> anyhow::Result<Ceiling> {
        Ok(Ceiling {
            streams,
            before: iperf3_loopback_mbps(streams, "before", out)?,
        })
    }

    /// Measures again after the workloads (`iperf3-N-after.json`); the higher MB/s of the two.
    pub fn settle(&self, out: &Path) -> anyhow::Result<f64> {
        Ok(self
            .before
            .max(iperf3_loopback_mbps(self.streams, "after", out)?))
    }
}

/// Loopback TCP ceiling from iperf3 (the tool): `streams` parallel streams from
/// 127.0.0.1 to a one-off server for [`IPERF_SECS`]; MB/s received, all streams together.
/// The raw JSON is kept in `out` as `iperf3-{streams}-{tag}.json`.
fn iperf3_loopback_mbps(streams: usize, tag: &str, out: &Path) -> anyhow::Result<f64> {
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
    std::fs::write(
        out.join(format!("iperf3-{streams}-{tag}.json")),
        &output.stdout,
    )?;
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
