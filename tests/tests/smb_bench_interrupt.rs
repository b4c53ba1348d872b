//! An interrupted `smb_bench` leaves neither its servers nor its temporary directories: a
//! full run's directories hold tens of GiB, and its servers keep their ports.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Live processes whose command line mentions `dir` (zombies have none).
fn processes_mentioning(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

#[test]
fn an_interrupted_bench_stops_its_servers_and_removes_its_directories() {
    let quarry = quarry_tests::quarry_bin().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut bench = Command::new(env!("CARGO_BIN_EXE_smb_bench"))
        .env("QUARRY_BIN", &quarry)
        .env("TMPDIR", tmp.path())
        .arg("--baseline")
        .arg(&quarry)
        .args(["--runs", "1", "--ranks", "1", "--rank-mib", "8"])
        .args(["--train-files", "2", "--train-mib", "1", "--fanout", "2"])
        .args([
            "--fanout-mib",
            "8",
            "--small-files",
            "100",
            "--list-entries",
            "100",
        ])
        .args(["--xcheck-mib", "8", "--out"])
        .arg(out.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = bench.stdout.take().unwrap();
    // Both servers run and both shares hold their data sets once this line is out; the
    // workloads come next, with no helper (iperf3, fio) of the bench's own still running.
    // The pipe stays open until the bench has exited: a closed one would fail its output.
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("Ceilings before the workloads"));
    assert!(ready, "the bench ended before its servers were up");
    let servers = processes_mentioning(tmp.path());
    assert_eq!(
        servers.len(),
        2,
        "two servers under {}: {servers:?}",
        tmp.path().display()
    );

    // SAFETY: signals the bench this test started.
    unsafe { libc::kill(bench.id() as i32, libc::SIGTERM) };
    let status = bench.wait().unwrap();
    drop(lines);
    assert_eq!(status.code(), Some(130), "the bench's exit: {status}");

    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(left.is_empty(), "directories left behind: {left:?}");
    // The servers were killed before the bench exited; give the kernel a moment to let go
    // of their process entries.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_mentioning(tmp.path()).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = processes_mentioning(tmp.path());
    assert!(running.is_empty(), "servers still running: {running:?}");
}
