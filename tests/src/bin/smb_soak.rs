//! SMB soak (issue 8's bench, on demand): runs the bench's small-file phases (list, read,
//! open/stat/close, each with a fresh set of clients) against one Quarry over and over, each
//! phase under a deadline, to catch a request that is never answered. Written to hunt the
//! bench's rare stall with both sides idle (tests/bench/RESULTS.md), which turned out to be
//! the client's (tests/vendor/smb/QUARRY-PATCH.md); a bench run is too long to repeat until
//! a fault recurs, this loop is not.
//!
//! ```sh
//! cargo build --release -p quarry -p quarry-tests
//! QUARRY_BIN=target/release/quarry target/release/smb_soak [--iterations 1000] [--files 2000] \
//!     [--deadline-secs 30] [--hold-secs 3600] [--encrypt] [--phases list,read,stat]
//! ```
//!
//! On a phase past its deadline it prints which one, both ends of the SMB connections with
//! their queues (`ss`) and the end of Quarry's log, then keeps Quarry and the stalled
//! clients as they are for `--hold-secs` so that they can be looked at (`gdb -p`, `/proc`),
//! stops Quarry and exits 1. A phase that fails prints its error and exits 1 at once.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use quarry_tests::smb_workloads::{self as wl, Target};
use quarry_tests::QuarryProcess;
use serde_json::json;

const USER: &str = "quarrysoak";
const PASS: &str = "soak-Secret-42";
const SHARE: &str = "soak";
/// The bench's shape: files spread over this many directories, this many clients a phase.
const DIRS: usize = 100;
const WORKERS: usize = 8;

/// The soak's shape and limits.
#[derive(clap::Parser)]
#[command(about = "Loops the small-file phases against one Quarry, each under a deadline")]
struct Args {
    /// Rounds of the three phases.
    #[arg(long, default_value_t = 1000)]
    iterations: usize,
    /// Small files written once and then listed, read and stat'ed each round.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(DIRS as u64..))]
    files: u64,
    /// Seconds a phase (its clients' logons included) may take before it counts as stalled.
    #[arg(long, default_value_t = 30)]
    deadline_secs: u64,
    /// Seconds Quarry and the stalled clients are kept up for inspection after a stall.
    #[arg(long, default_value_t = 3600)]
    hold_secs: u64,
    /// Encrypt every message (otherwise signed).
    #[arg(long)]
    encrypt: bool,
    /// Only these phases (comma-separated, of list, read, stat), so that one phase can be
    /// looped alone, say under `perf record -p` of Quarry.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(PHASES))]
    phases: Vec<String>,
}

/// The phases looped, by name.
const PHASES: [&str; 3] = ["list", "read", "stat"];

async fn run_phase(t: &Target, phase: &str, files: usize) -> anyhow::Result<wl::Outcome> {
    match phase {
        "list" => wl::small_list(t, files, DIRS, WORKERS).await,
        "read" => wl::small_read(t, files, DIRS, WORKERS).await,
        _ => wl::small_stat(t, files, DIRS, WORKERS).await,
    }
}

/// Prints what a stalled phase leaves behind: both ends of every SMB connection with their
/// send and receive queues (bytes sent and not yet read show who owes what), and the end
/// of the server's log.
fn report_stall(q: &QuarryProcess) {
    let port = q.smb.port();
    match Command::new("ss")
        .args([
            "-tnpi",
            "state",
            "established",
            &format!("( sport = :{port} or dport = :{port} )"),
        ])
        .output()
    {
        Ok(o) => println!("{}", String::from_utf8_lossy(&o.stdout)),
        Err(e) => println!("ss: {e}"),
    }
    let log = q.log_text();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    for line in tail.into_iter().rev() {
        println!("  | {line}");
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let files = usize::try_from(a.files)?;
    let (deadline, hold) = (
        Duration::from_secs(a.deadline_secs),
        Duration::from_secs(a.hold_secs),
    );
    let looped: Vec<&str> = PHASES
        .into_iter()
        .filter(|p| a.phases.is_empty() || a.phases.iter().any(|q| q == p))
        .collect();
    let q = QuarryProcess::start()?;
    let api = q.admin()?;
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))?;
    api.create("/api/v1/shares", &json!({"name": SHARE, "users": [USER]}))?;
    let t = Target {
        port: q.smb.port(),
        share: SHARE.into(),
        user: USER.into(),
        password: PASS.into(),
        encrypt: a.encrypt,
        credits: None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "SMB soak: quarry {} (pid {}, SMB port {}, log {}), {} small files, {} iterations of {:?}, {} s deadline per phase, {}",
        quarry_tests::quarry_bin()?.display(),
        q.pid().map_or_else(|| "?".into(), |p| p.to_string()),
        t.port,
        q.log.display(),
        files,
        a.iterations,
        looped,
        deadline.as_secs(),
        if a.encrypt { "encrypted" } else { "signed" }
    );
    rt.block_on(async {
        tokio::time::timeout(deadline * 10, wl::small_write(&t, files, DIRS, WORKERS)).await
    })
    .context("writing the files took too long")??;

    let start = Instant::now();
    let mut slowest = [0f64; PHASES.len()];
    for i in 0..a.iterations {
        for (p, phase) in PHASES.iter().enumerate() {
            if !looped.contains(phase) {
                continue;
            }
            let began = Instant::now();
            let outcome = rt.block_on(async {
                let work = run_phase(&t, phase, files);
                tokio::pin!(work);
                tokio::select! {
                    done = &mut work => Some(done),
                    _ = tokio::time::sleep(deadline) => {
                        // The phase's clients stay connected while this reports and holds.
                        println!(
                            "STALL: iteration {i}, phase {phase}: no end after {} s ({:.0} s into the soak)",
                            deadline.as_secs(),
                            start.elapsed().as_secs_f64()
                        );
                        report_stall(&q);
                        println!("Quarry stays up for {} s for inspection.", hold.as_secs());
                        tokio::time::sleep(hold).await;
                        None
                    }
                }
            });
            match outcome {
                Some(Ok(_)) => slowest[p] = slowest[p].max(began.elapsed().as_secs_f64()),
                Some(Err(e)) => bail!("iteration {i}, phase {phase}: {e:#}"),
                // Returning (rather than exiting) stops Quarry on the way out.
                None => bail!("iteration {i}, phase {phase}: stalled"),
            }
        }
        if (i + 1) % 50 == 0 {
            println!(
                "{} iterations, {:.0} s; slowest phase so far (connects included): list {:.2} s, read {:.2} s, stat {:.2} s",
                i + 1,
                start.elapsed().as_secs_f64(),
                slowest[0],
                slowest[1],
                slowest[2]
            );
        }
    }
    println!(
        "no stall: {} iterations ({} phases, {} client connections) in {:.0} s; slowest phase: list {:.2} s, read {:.2} s, stat {:.2} s",
        a.iterations,
        a.iterations * PHASES.len(),
        a.iterations * PHASES.len() * WORKERS,
        start.elapsed().as_secs_f64(),
        slowest[0],
        slowest[1],
        slowest[2]
    );
    Ok(())
}
