//! On-demand benchmark (ignored in the test suite): SMB throughput with telemetry on and
//! with `QUARRY_TELEMETRY=off`, alternating runs of smbclient put+get of one file, and
//! the best and median run of each printed, with the server's CPU seconds per GiB moved
//! (from /proc: on two cores smbclient is usually the bottleneck, so the server's CPU
//! cost shows telemetry's price more steadily than throughput does). Run it on a quiet machine in release mode:
//!
//! ```sh
//! cargo build --release -p quarry
//! cargo test --release -p quarry-tests --test telemetry_bench -- --ignored --nocapture
//! ```
//!
//! `BENCH_MIB` sets the file size (default 256), `BENCH_ROUNDS` the runs per mode
//! (default 3).

use std::process::Command;
use std::time::Instant;

use anyhow::ensure;
use quarry_tests::QuarryProcess;
use serde_json::json;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One put+get of `file` (of `bytes`) against a fresh server; returns MB/s and the
/// server's CPU seconds per GiB moved.
fn run(telemetry_off: bool, dir: &std::path::Path, bytes: usize) -> anyhow::Result<(f64, f64)> {
    let data = tempfile::tempdir()?;
    let env: &[(&str, &str)] = if telemetry_off {
        &[("QUARRY_TELEMETRY", "off")]
    } else {
        &[]
    };
    let q = QuarryProcess::start_with(data.path(), env)?;
    let api = q.admin()?;
    let (s, b) = api.post(
        "/api/v1/users",
        &json!({"name": "bench", "password": "bench-secret-1"}),
    )?;
    ensure!(s == 201, "{b}");
    let (s, b) = api.post("/api/v1/shares", &json!({"name": "b"}))?;
    ensure!(s == 201, "{b}");
    let pid = q.pid().ok_or_else(|| anyhow::anyhow!("no server pid"))?;
    let cpu = || quarry_tests::procstat::cpu_seconds(pid).unwrap_or(f64::NAN);
    let cpu_before = cpu();
    let start = Instant::now();
    let out = Command::new("smbclient")
        .arg("//127.0.0.1/b")
        .args([
            "-p",
            &q.smb.port().to_string(),
            "-U",
            "bench%bench-secret-1",
        ])
        .args(["-c", "put f.bin; get f.bin g.bin"])
        .current_dir(dir)
        .output()?;
    let secs = start.elapsed().as_secs_f64();
    let cpu_used = cpu() - cpu_before;
    ensure!(out.status.success(), "smbclient failed");
    let moved = (2 * bytes) as f64;
    Ok((moved / secs / 1e6, cpu_used / (moved / (1u64 << 30) as f64)))
}

#[test]
#[ignore = "benchmark: run on demand with --ignored"]
fn smb_throughput_with_and_without_telemetry() -> anyhow::Result<()> {
    let mib = env_num("BENCH_MIB", 256);
    let rounds = env_num("BENCH_ROUNDS", 3);
    let bytes = mib << 20;
    let dir = tempfile::tempdir()?;
    let block: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 13 % 251) as u8).collect();
    let mut f = Vec::with_capacity(bytes);
    for _ in 0..mib {
        f.extend_from_slice(&block);
    }
    std::fs::write(dir.path().join("f.bin"), &f)?;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    let (mut cpu_on, mut cpu_off) = (Vec::new(), Vec::new());
    // One discarded warm-up run, then rounds that alternate which mode goes first (the
    // first run of a pair is systematically slower: page cache, the previous server's
    // data directory being freed).
    run(false, dir.path(), bytes)?;
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for telemetry_off in order {
            let (mbs, cpu) = run(telemetry_off, dir.path(), bytes)?;
            if telemetry_off {
                off.push(mbs);
                cpu_off.push(cpu);
            } else {
                on.push(mbs);
                cpu_on.push(cpu);
            }
        }
    }
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (b_on, b_off) = (best(&on), best(&off));
    println!("telemetry on : {on:.1?} MB/s, best {b_on:.1}");
    println!("telemetry off: {off:.1?} MB/s, best {b_off:.1}");
    let median = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().unwrap_or(0.0)
    };
    let (m_on, m_off) = (median(&on), median(&off));
    println!(
        "on/off = {:.2}% (best), {:.2}% (median)",
        b_on / b_off * 100.0,
        m_on / m_off * 100.0
    );
    let (c_on, c_off) = (median(&cpu_on), median(&cpu_off));
    println!(
        "server CPU s/GiB: on {cpu_on:.3?} (median {c_on:.3}), off {cpu_off:.3?} (median {c_off:.3}); on/off = {:.2}%",
        c_on / c_off * 100.0
    );
    Ok(())
}
