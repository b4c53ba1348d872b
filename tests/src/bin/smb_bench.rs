//! SMB benchmark (issue 8): Quarry against a private Samba `smbd` on the same machine and
//! file system, driven by the same client, A/B alternating (the order of the two servers
//! swaps every run), once with signing and once with encryption. Prints one table: each
//! workload's figure for Quarry and for Samba, the ratio, each server's CPU per GiB (or per
//! thousand files) from /proc (Quarry's process; smbd's parent plus its reaped and live
//! children), and how busy the server and the client were, so a client-bound figure shows
//! as one. Raw output and the table go to `--out`. Run on demand, never part of the test
//! suite's pass/fail:
//!
//! ```sh
//! cargo build --release -p quarry -p quarry-tests
//! QUARRY_BIN=target/release/quarry target/release/smb_bench [--runs 2] [--out DIR] [shape flags, --help]
//! ```
//!
//! The client is the `smb` crate (`quarry_tests::smb_workloads`), every rank or reader its
//! own connection, with an allocator that keeps the memory it frees
//! (`smb_workloads::keep_freed_memory`), so the client's cost is its protocol work.
//! Workloads, scaled from MLPerf Storage v2 to a 2-core machine with the shapes kept:
//! checkpoint save (8 ranks x 512 MiB of model and optimizer state in 1-8 MiB writes,
//! FLUSH; figure over the slowest rank) and restore after dropping the page cache;
//! a 3D-UNet training epoch (200 files of 16 MiB ±50% read whole in one shuffled order by 4
//! readers); inference fan-out (16 clients read the same 2 GiB weights file); small files (20,000
//! files of 16-128 KiB in 100 directories: create+write, list, read); one directory of
//! 100,000 entries listed. `smbclient` (one stream put and get) is the cross-check. The
//! machine's ceilings are measured in the same run: loopback TCP with iperf3 (one stream,
//! and as many streams as the fan-out has sessions; before and after the workloads, the
//! higher kept) and fio O_DIRECT on the share's file system. So is the read floor
//! (`quarry_tests::read_floor`): the CPU per GiB of a cached READ's copy, GMAC or seal, and
//! loopback send, timed alone, against which the cached read rows set both servers' CPU
//! and the most any server making those passes could move beside this client.
//!
//! With `--baseline BIN`, the other server is a second Quarry, the build at `BIN`, in place
//! of Samba: two builds A/B alternating in one run on the same machine state, for changes
//! too small to see across separate runs. Every run's figures are kept, and the summary
//! gives each server's mean CPU per unit over the runs beside the best run's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use quarry_hugemem::HugeBuf;
use quarry_tests::loopback::{Ceiling, IPERF_SECS};
use quarry_tests::procstat::{cpu_seconds, own_cpu_seconds, tree_cpu_seconds};
use quarry_tests::read_floor::{self, ReadFloor};
use quarry_tests::samba::{Smbd, SmbdConfig};
use quarry_tests::smb_workloads::{self as wl, Outcome, Target};
use quarry_tests::{free_port, QuarryProcess};
use serde_json::json;

const USER: &str = "quarrybench";
const PASS: &str = "bench-Secret-42";
const SHARE: &str = "bench";
/// Samba's asynchronous I/O as a tuned deployment would set it: READs and WRITEs of more
/// than 128 KiB on its thread pool, the small files' (at most 128 KiB a request) on the
/// connection's process. Measured against both of Samba's plain choices (all or none), it
/// serves the large workloads as the first and the small files as the second
/// (tests/bench/RESULTS.md, 2026-11-30).
const AIO_FROM: usize = 128 * 1024 + 1;

/// The bench's shape; defaults are the issue's MLPerf shapes scaled to this machine.
struct Args {
    ranks: usize,
    rank_mib: u64,
    /// Writes each checkpoint rank keeps in flight (1: each waits for the one before).
    write_depth: usize,
    /// Reads each checkpoint rank, training reader and fan-out session keeps in flight.
    read_depth: usize,
    train_files: usize,
    train_mib: u64,
    readers: usize,
    fanout: usize,
    fanout_mib: u64,
    small_files: usize,
    small_dirs: usize,
    workers: usize,
    list_entries: u64,
    xcheck_mib: u64,
    runs: usize,
    modes: Vec<&'static str>,
    out: PathBuf,
    /// MiB of memory touched and freed just before each measured phase (0: none). A
    /// diagnostic for virtual machines whose host takes back the guest's free memory
    /// (virtio-balloon free page reporting): there, the first write to each such page
    /// traps to the host, and a server that grows the page cache pays for it. Freed just
    /// before a phase, this memory is backed again for the next few seconds, as all
    /// memory is on bare metal.
    prefault_mib: usize,
    /// Another Quarry build to compare with instead of Samba (`--baseline BIN`).
    baseline: Option<PathBuf>,
}

const HELP: &str = "smb_bench [--ranks 8] [--rank-mib 512] [--write-depth 1] [--read-depth 1] [--train-files 200] \
[--train-mib 16] [--readers 4] [--fanout 16] [--fanout-mib 2048] [--small-files 20000] \
[--small-dirs 100] [--workers 8] [--list-entries 100000] [--xcheck-mib 512] [--runs 2] \
[--only sign|encrypt] [--prefault-mib 0] [--out DIR] \
[--baseline QUARRY_BIN (compare with that build instead of Samba)]";

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        ranks: 8,
        rank_mib: 512,
        write_depth: 1,
        read_depth: 1,
        train_files: 200,
        train_mib: 16,
        readers: 4,
        fanout: 16,
        fanout_mib: 2048,
        small_files: 20_000,
        small_dirs: 100,
        workers: 8,
        list_entries: 100_000,
        xcheck_mib: 512,
        runs: 2,
        modes: vec!["sign", "encrypt"],
        out: PathBuf::from("target/bench/smb"),
        prefault_mib: 0,
        baseline: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--ranks" => a.ranks = value()?.parse()?,
            "--rank-mib" => a.rank_mib = value()?.parse()?,
            "--write-depth" => a.write_depth = value()?.parse()?,
            "--read-depth" => a.read_depth = value()?.parse()?,
            "--train-files" => a.train_files = value()?.parse()?,
            "--train-mib" => a.train_mib = value()?.parse()?,
            "--readers" => a.readers = value()?.parse()?,
            "--fanout" => a.fanout = value()?.parse()?,
            "--fanout-mib" => a.fanout_mib = value()?.parse()?,
            "--small-files" => a.small_files = value()?.parse()?,
            "--small-dirs" => a.small_dirs = value()?.parse()?,
            "--workers" => a.workers = value()?.parse()?,
            "--list-entries" => a.list_entries = value()?.parse()?,
            "--xcheck-mib" => a.xcheck_mib = value()?.parse()?,
            "--runs" => a.runs = value()?.parse()?,
            "--only" => {
                a.modes = match value()?.as_str() {
                    "sign" => vec!["sign"],
                    "encrypt" => vec!["encrypt"],
                    other => bail!("--only sign|encrypt, not {other}"),
                }
            }
            "--out" => a.out = PathBuf::from(value()?),
            "--prefault-mib" => a.prefault_mib = value()?.parse()?,
            "--baseline" => a.baseline = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{HELP}"),
        }
    }
    ensure!(
        a.ranks >= 1
            && a.rank_mib >= 2
            && a.write_depth >= 1
            && a.write_depth <= 64
            && a.read_depth >= 1
            && a.read_depth <= 64
            && a.train_files >= 1
            && a.train_mib >= 1
            && a.readers >= 1
            && a.fanout >= 1
            && a.fanout_mib >= 1
            && a.small_files >= a.small_dirs
            && a.small_dirs >= 1
            && a.small_dirs <= 1000
            && a.workers >= 1
            && a.xcheck_mib >= 1
            && a.runs >= 1,
        "every count must be at least 1, --rank-mib at least 2, --write-depth and --read-depth at most 64, \
         --small-dirs at most 1000 and at most --small-files"
    );
    ensure!(
        a.prefault_mib <= 64 << 10,
        "--prefault-mib is at most 65536 (64 GiB)"
    );
    Ok(a)
}

/// One SMB server under test.
struct Server {
    /// Names its raw output files and progress lines.
    name: &'static str,
    /// Names it in the table and the summary.
    title: &'static str,
    port: u16,
    /// Where the share lives on the local file system.
    share_dir: PathBuf,
    /// CPU seconds used so far by the server's processes.
    cpu: Box<dyn Fn() -> f64>,
}

/// The server Quarry is compared with, kept running until the table is written.
enum Reference {
    Samba(Smbd),
    /// Another Quarry build (`--baseline`).
    Quarry(Box<QuarryProcess>),
}

impl Reference {
    /// Stops the server (a Quarry the way `q.stop()` stops the one under test).
    fn stop(self) -> anyhow::Result<()> {
        match self {
            Reference::Samba(smbd) => drop(smbd),
            Reference::Quarry(p) => {
                p.stop()?;
            }
        }
        Ok(())
    }
}

/// What an interrupted bench must not leave behind ([`clean_up_on_interrupt`]).
#[derive(Default)]
struct Leftovers {
    /// Process ids of the servers it started.
    servers: Vec<u32>,
    /// Its temporary directories.
    dirs: Vec<PathBuf>,
}

/// This bench's [`Leftovers`], registered as it makes them.
static LEFTOVERS: std::sync::Mutex<Leftovers> = std::sync::Mutex::new(Leftovers {
    servers: Vec::new(),
    dirs: Vec::new(),
});

/// Registers a server process, or a directory, that an interrupted bench must not leave
/// behind.
fn leave_nothing(pid: Option<u32>, dir: Option<&Path>) {
    if let Ok(mut left) = LEFTOVERS.lock() {
        left.servers.extend(pid);
        left.dirs.extend(dir.map(Path::to_owned));
    }
}

/// On SIGINT or SIGTERM, kills the registered servers, removes the registered directories
/// and exits with status 130. The destructors that do this on a normal exit, or on an
/// error, never run when a signal ends the process, and a full run's directories hold
/// tens of GiB (two shares' data sets, checkpoints and small files).
fn clean_up_on_interrupt(rt: &tokio::runtime::Runtime) {
    use tokio::signal::unix::{signal, SignalKind};
    let _guard = rt.enter();
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        eprintln!("warning: no signal handler: an interrupted bench leaves its files behind");
        return;
    };
    rt.spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        let Leftovers { servers, dirs } = LEFTOVERS
            .lock()
            .map(|mut left| std::mem::take(&mut *left))
            .unwrap_or_default();
        for pid in servers {
            // SAFETY: signals a server this bench started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        for dir in &dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!(
            "interrupted: servers stopped, {} temporary directories removed",
            dirs.len()
        );
        std::process::exit(130);
    });
}

/// Starts the Quarry built at `bin` with the bench's user and share.
fn start_quarry(
    bin: &Path,
    name: &'static str,
    title: &'static str,
) -> anyhow::Result<(QuarryProcess, Server)> {
    let q = QuarryProcess::start_binary(bin)?;
    leave_nothing(q.pid(), q.data.parent());
    let api = q.admin()?;
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))?;
    api.create("/api/v1/shares", &json!({"name": SHARE, "users": [USER]}))?;
    let pid = q.pid().context("quarry pid")?;
    let server = Server {
        name,
        title,
        port: q.smb.port(),
        share_dir: q.data.join("pool").join("shares").join(SHARE),
        cpu: Box::new(move || cpu_seconds(pid).unwrap_or(0.0)),
    };
    Ok((q, server))
}

/// Runs one smbclient with `commands`; returns its wall time. Output is appended to `log`.
fn smbclient(port: u16, mode: &str, commands: &str, log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Ok(Command::new("smbclient")
        .arg(format!("//127.0.0.1/{SHARE}"))
        .args([
            "-p",
            &port.to_string(),
            "-U",
            &format!("{USER}%{PASS}"),
            "-m",
            "SMB3_11",
        ])
        .arg(format!("--client-protection={mode}"))
        .args(["-c", commands])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// Runs the clients in parallel; returns the slowest one's wall time.
fn parallel(port: u16, mode: &str, commands: &[String], log: &Path) -> anyhow::Result<f64> {
    let start = Instant::now();
    let children = commands
        .iter()
        .map(|c| smbclient(port, mode, c, log))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut slowest = 0.0f64;
    for mut c in children {
        let st = c.wait()?;
        ensure!(
            st.success(),
            "smbclient failed ({st}); see {}",
            log.display()
        );
        slowest = slowest.max(start.elapsed().as_secs_f64());
    }
    Ok(slowest)
}

/// The share file system's ceiling: fio sequential 1 MiB O_DIRECT write then read of
/// `size_mib` in `dir`; (write MB/s, read MB/s).
fn fio_ceiling(dir: &Path, size_mib: u64, out: &Path) -> anyhow::Result<(f64, f64)> {
    let mut figures = [0.0f64; 2];
    for (i, rw) in ["write", "read"].into_iter().enumerate() {
        let output = Command::new("fio")
            .args([
                "--name=ceiling",
                &format!("--directory={}", dir.display()),
                "--filename=fio-ceiling.bin",
                &format!("--rw={rw}"),
                "--bs=1M",
                "--iodepth=8",
                "--ioengine=io_uring",
                "--direct=1",
                &format!("--size={size_mib}M"),
                "--output-format=json",
            ])
            .output()
            .context("running fio (apt-get install fio)")?;
        ensure!(
            output.status.success(),
            "fio failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(out.join(format!("fio-{rw}.json")), &output.stdout)?;
        let v: serde_json::Value = serde_json::from_slice(&output.stdout).context("fio JSON")?;
        figures[i] = v["jobs"][0][rw]["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6;
    }
    let _ = std::fs::remove_file(dir.join("fio-ceiling.bin"));
    Ok((figures[0], figures[1]))
}

/// The weights file of the fan-out, prepared in each share (`--fanout-mib`).
const WEIGHTS: &str = "weights.bin";

/// The server's own data the bench writes into (cleared before every run).
const WRITTEN: [&str; 3] = ["ckpt", "small", "xcheck.bin"];

/// Where [`clear_written`] puts what a run wrote: a directory of the share that no
/// workload reads, so on the share's own file system; it goes with the bench's temporary
/// directories when the bench exits.
const SPENT: &str = ".bench-spent";

/// Empties what earlier runs wrote into the share and moves it aside (the prepared data
/// sets stay), without freeing its inodes until the bench exits.
///
/// Deleting would tax the runs that follow. On ext4 without a journal (this lab's root
/// file system, `/tmp` included), every new inode's allocation steps over each inode of its
/// group freed in the last minute (six while the freed inode's table block is not yet
/// written back), one lookup at a time, so the 20,000 small files an earlier run deleted
/// cost each create of the next run tens of microseconds, on either server: Quarry's CPU per
/// 1,000 small files went from 142.5 ms to 217 in a run after such a deletion, on a fresh
/// file system (RESULTS.md, 2026-12-01). Truncating frees the data; the inodes stay
/// allocated.
fn clear_written(share_dir: &Path) -> anyhow::Result<()> {
    static CLEARED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let spent = share_dir.join(SPENT);
    for name in WRITTEN {
        let p = share_dir.join(name);
        if std::fs::symlink_metadata(&p).is_err() {
            continue;
        }
        empty_tree(&p).with_context(|| format!("emptying {}", p.display()))?;
        std::fs::create_dir_all(&spent)?;
        let n = CLEARED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let aside = spent.join(format!("{n}-{name}"));
        std::fs::rename(&p, &aside)
            .with_context(|| format!("moving {} to {}", p.display(), aside.display()))?;
    }
    Ok(())
}

/// Truncates every regular file under `path` (or `path` itself) to nothing.
fn empty_tree(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            empty_tree(&entry?.path())?;
        }
    } else if meta.is_file() && meta.len() > 0 {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(0)?;
    }
    Ok(())
}

/// Writes the read-only data sets straight into the share's directory (not measured): the
/// training files and the directory of `list_entries` empty files.
fn prepare_datasets(
    share_dir: &Path,
    train: &[(String, u64)],
    weights_mib: u64,
    list_entries: u64,
) -> anyhow::Result<()> {
    let mut rng = wl::Rng::new(0xda7a);
    let mut block = vec![0u8; 1 << 20];
    for chunk in block.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
    }
    std::fs::create_dir_all(share_dir.join("train"))?;
    let weights = (WEIGHTS.to_string(), weights_mib << 20);
    for (name, len) in train.iter().chain([&weights]) {
        let path = share_dir.join(name.replace('\\', "/"));
        let mut f = std::fs::File::create(&path)?;
        let mut left = *len;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            std::io::Write::write_all(&mut f, &block[..n])?;
            left -= n as u64;
        }
    }
    let big = share_dir.join("bigdir");
    std::fs::create_dir_all(&big)?;
    for i in 0..list_entries {
        std::fs::File::create(big.join(format!("entry-{i:07}.json")))?;
    }
    Ok(())
}

/// Writes dirty pages back and drops the page cache (root only); false if that was refused.
fn drop_caches() -> bool {
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Reads files locally so that they are in the page cache for both servers alike.
fn warm(paths: impl IntoIterator<Item = PathBuf>) -> anyhow::Result<()> {
    // Into a page-aligned buffer: a vector this large starts 16 bytes into its mapping,
    // where this host's kernel copies at a quarter of its speed (RESULTS.md, "The
    // kernel's copy at a short forward distance").
    let mut buf = HugeBuf::new(8 << 20, 0).context("mapping the warming buffer")?;
    for p in paths {
        let mut f = std::fs::File::open(&p).with_context(|| format!("warming {}", p.display()))?;
        while std::io::Read::read(&mut f, &mut buf)? > 0 {}
    }
    Ok(())
}

/// How a figure is counted and what its CPU cost is expressed per.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    /// MB/s; CPU in seconds per GiB.
    Bytes,
    /// Files or entries per second; CPU in milliseconds per thousand.
    Files,
    /// Entries per second; CPU in milliseconds per thousand.
    Entries,
}

impl Unit {
    fn figure(self) -> &'static str {
        match self {
            Unit::Bytes => "MB/s",
            Unit::Files => "files/s",
            Unit::Entries => "entries/s",
        }
    }

    fn cpu(self) -> &'static str {
        match self {
            Unit::Bytes => "s/GiB",
            Unit::Files | Unit::Entries => "ms/1k",
        }
    }
}

/// One measured workload on one server.
#[derive(Clone, Copy)]
struct Figure {
    /// MB/s, files/s or entries/s.
    value: f64,
    /// Server CPU per GiB (bytes) or per thousand units.
    server_cpu: f64,
    /// The bench client's CPU, same unit.
    client_cpu: f64,
    /// Cores the server kept busy on average.
    server_cores: f64,
    /// Cores the client kept busy on average.
    client_cores: f64,
}

impl Figure {
    /// Whether the client kept at least as many cores busy as the server: then the
    /// client, not the server, set the pace on this shared machine.
    fn client_bound(&self) -> bool {
        self.client_cores >= self.server_cores
    }
}

/// The most any server could reach with this client on `cores` cores: the rate at which
/// the client alone would use every core, from its CPU per unit in `f` (a server costing
/// nothing). A client-bound row's ratio cannot pass this over the other server's figure.
fn client_cap(f: &Figure, unit: Unit, cores: usize) -> f64 {
    let cores = cores as f64;
    match unit {
        // s/GiB -> MB/s
        Unit::Bytes => cores / f.client_cpu * f64::from(1u32 << 30) / 1e6,
        // ms per 1,000 units -> units/s
        Unit::Files | Unit::Entries => cores / f.client_cpu * 1e6,
    }
}

/// The run with the highest figure: the table's row.
fn best_of(runs: &[Figure]) -> Option<Figure> {
    runs.iter()
        .copied()
        .reduce(|b, f| if f.value > b.value { f } else { b })
}

/// A server's CPU per unit over all runs: small changes show in the mean over runs
/// before they show in the best run.
struct CpuSpread {
    mean: f64,
    least: f64,
    most: f64,
}

impl CpuSpread {
    fn of(runs: &[Figure]) -> CpuSpread {
        let cpu = runs.iter().map(|f| f.server_cpu);
        CpuSpread {
            mean: cpu.clone().sum::<f64>() / runs.len().max(1) as f64,
            least: cpu.clone().fold(f64::INFINITY, f64::min),
            most: cpu.fold(0.0, f64::max),
        }
    }
}

impl std::fmt::Display for CpuSpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} ({:.3}-{:.3})", self.mean, self.least, self.most)
    }
}

/// Touches `mib` MiB of fresh memory and frees it (see [`Args::prefault_mib`]).
fn prefault(mib: usize) {
    if mib > 0 {
        // A nonzero fill writes every page; dropping the buffer unmaps it.
        let touched = vec![1u8; mib << 20];
        std::hint::black_box(&touched);
    }
}

/// Measures `run` against `server`, with the server's and the client's CPU.
fn measure(
    a: &Args,
    server: &Server,
    workload: usize,
    run: impl FnOnce() -> anyhow::Result<Outcome>,
) -> anyhow::Result<Figure> {
    let (name, unit) = WORKLOADS[workload];
    prefault(a.prefault_mib);
    eprint!("  {} {name}:", server.name);
    let (s0, c0) = ((server.cpu)(), own_cpu_seconds().unwrap_or(0.0));
    let o = run()?;
    eprintln!("    {:.1} s", o.secs);
    // Let smbd reap its per-connection children so their time lands in cutime.
    std::thread::sleep(Duration::from_millis(300));
    let (s, c) = ((server.cpu)() - s0, own_cpu_seconds().unwrap_or(0.0) - c0);
    let per = match unit {
        Unit::Bytes => o.bytes as f64 / f64::from(1u32 << 30),
        Unit::Files | Unit::Entries => o.units as f64 / 1000.0,
    };
    let scale = if unit == Unit::Bytes { 1.0 } else { 1000.0 };
    let value = match unit {
        Unit::Bytes => o.bytes as f64 / 1e6 / o.secs,
        Unit::Files | Unit::Entries => o.units as f64 / o.secs,
    };
    Ok(Figure {
        value,
        server_cpu: s / per * scale,
        client_cpu: c / per * scale,
        server_cores: s / o.secs,
        client_cores: c / o.secs,
    })
}

/// Bytes of the training set each pass of the read floor reads (see [`ReadFloor`]).
const FLOOR_BUDGET: u64 = 1 << 30;
/// Passes of the read floor each time it is measured; each pass's least cost is kept.
const FLOOR_PASSES: usize = 2;

/// Measures the read floor over the training set in `share_dir`, read into the page cache
/// first; raw figures go to `floor-{tag}.txt` in `out`.
fn read_floor(
    share_dir: &Path,
    train: &[(String, u64)],
    tag: &str,
    out: &Path,
) -> anyhow::Result<ReadFloor> {
    let files: Vec<PathBuf> = train
        .iter()
        .map(|(n, _)| share_dir.join(n.replace('\\', "/")))
        .collect();
    warm(files.iter().cloned())?;
    let f = ReadFloor::measure(&files, FLOOR_BUDGET, FLOOR_PASSES)?;
    std::fs::write(out.join(format!("floor-{tag}.txt")), format!("{f:?}\n"))?;
    Ok(f)
}

/// The sentence on a cached-read row that sets its figures against the read floor: how
/// many times the floor each server spent, and the most any server making the same passes
/// could move beside this client.
#[allow(clippy::too_many_arguments)]
fn floor_note(
    name: &str,
    mode: &str,
    floor: &ReadFloor,
    q: &Figure,
    o: &Figure,
    them: &str,
    cores: usize,
    tcp: f64,
) -> String {
    let (cost, passes) = match (name, mode) {
        ("training read", "sign") => (floor.signed(), "page-cache copy, GMAC, loopback send"),
        ("training read", _) => (floor.sealed(), "page-cache copy, AES-GCM, loopback send"),
        // A signed fan-out's sessions read the same bytes: Quarry copies them out of the
        // page cache once for several READs, so only the hash and the send are per READ.
        ("fan-out read", "sign") => (
            floor.gmac + floor.send,
            "GMAC, loopback send; Quarry copies a range out of the page cache once for the \
             sessions that read it",
        ),
        ("fan-out read", _) => (floor.sealed(), "page-cache copy, AES-GCM, loopback send"),
        _ => return String::new(),
    };
    if cost <= 0.0 {
        return String::new();
    }
    let cap = read_floor::joint_cap_mbps(cost, q.client_cpu, cores);
    let against = if name == "fan-out read" {
        format!("{:.0}% of loopback TCP", cap / tcp * 100.0)
    } else {
        format!("{:.2}x {them}'s figure", cap / o.value)
    };
    format!(
        "; read floor: a cached READ's passes ({passes}) cost this host at least {cost:.2} \
         s/GiB in this run; Quarry spent {:.2}x that, {them} {:.2}x; with the client's \
         {:.2} s/GiB, no server making them could pass {cap:.0} MB/s on {cores} cores \
         ({against})",
        q.server_cpu / cost,
        o.server_cpu / cost,
        q.client_cpu,
    )
}

/// The workloads in table order: name and unit.
const WORKLOADS: [(&str, Unit); 11] = [
    ("checkpoint write", Unit::Bytes),
    ("checkpoint read (cold)", Unit::Bytes),
    ("training read", Unit::Bytes),
    ("fan-out read", Unit::Bytes),
    ("small files write", Unit::Files),
    ("small files list", Unit::Entries),
    ("small files read", Unit::Files),
    ("metadata open/stat/close", Unit::Files),
    ("list one large directory", Unit::Entries),
    ("same directory again (warm)", Unit::Entries),
    ("smbclient 1 stream put+get", Unit::Bytes),
];

/// Runs every workload once against `server`; figures in [`WORKLOADS`] order.
fn run_all(
    a: &Args,
    rt: &tokio::runtime::Runtime,
    server: &Server,
    mode: &str,
    train: &[(String, u64)],
    xcheck_src: &Path,
    log: &Path,
) -> anyhow::Result<Vec<Figure>> {
    let t = Target {
        port: server.port,
        share: SHARE.into(),
        user: USER.into(),
        password: PASS.into(),
        encrypt: mode == "encrypt",
        credits: None,
    };
    clear_written(&server.share_dir)?;
    // No run pays for the writeback of an earlier run's (or the other server's) dirty data.
    if !Command::new("sync").status().is_ok_and(|s| s.success()) {
        eprintln!("warning: sync failed: the run may pay for earlier runs' writeback");
    }
    let mut figs = Vec::new();
    figs.push(measure(a, server, 0, || {
        rt.block_on(wl::checkpoint_write(&t, a.ranks, a.rank_mib, a.write_depth))
    })?);
    if !drop_caches() {
        eprintln!("warning: could not drop the page cache (not root?): checkpoint read is warm");
    }
    figs.push(measure(a, server, 1, || {
        rt.block_on(wl::checkpoint_read(&t, a.ranks, a.rank_mib, a.read_depth))
    })?);
    warm(
        train
            .iter()
            .map(|(n, _)| server.share_dir.join(n.replace('\\', "/"))),
    )?;
    figs.push(measure(a, server, 2, || {
        rt.block_on(wl::training_read(&t, train, a.readers, a.read_depth))
    })?);
    warm([server.share_dir.join(WEIGHTS)])?;
    figs.push(measure(a, server, 3, || {
        rt.block_on(wl::fanout_read(
            &t,
            WEIGHTS,
            a.fanout_mib << 20,
            a.fanout,
            a.read_depth,
        ))
    })?);
    let (files, dirs, workers) = (a.small_files, a.small_dirs, a.workers);
    figs.push(measure(a, server, 4, || {
        rt.block_on(wl::small_write(&t, files, dirs, workers))
    })?);
    figs.push(measure(a, server, 5, || {
        rt.block_on(wl::small_list(&t, files, dirs, workers))
    })?);
    figs.push(measure(a, server, 6, || {
        rt.block_on(wl::small_read(&t, files, dirs, workers))
    })?);
    figs.push(measure(a, server, 7, || {
        rt.block_on(wl::small_stat(&t, files, dirs, workers))
    })?);
    figs.push(measure(a, server, 8, || {
        rt.block_on(wl::list_large(&t, "bigdir", a.list_entries))
    })?);
    // The first listing runs after the page cache was dropped (for the cold checkpoint
    // read), so the kernel reads every entry's inode; this one shows the servers' own cost.
    figs.push(measure(a, server, 9, || {
        rt.block_on(wl::list_large(&t, "bigdir", a.list_entries))
    })?);
    figs.push(measure(a, server, 10, || {
        let start = Instant::now();
        let cmd = format!(
            "put {} xcheck.bin; get xcheck.bin /dev/null",
            xcheck_src.display()
        );
        parallel(server.port, mode, &[cmd], log)?;
        let bytes = a.xcheck_mib * (2 << 20);
        Ok(Outcome {
            bytes,
            units: bytes,
            secs: start.elapsed().as_secs_f64(),
        })
    })?);
    Ok(figs)
}

/// What the issue asks of each workload, for the summary under the table.
fn target_of(workload: &str, mode: &str) -> &'static str {
    match (workload, mode) {
        ("checkpoint write" | "checkpoint read (cold)" | "training read", "sign") => {
            "target: >= 2x Samba's throughput at <= 1/3 of its CPU/GiB"
        }
        ("checkpoint write" | "checkpoint read (cold)" | "training read", _) => {
            "target: >= 3x Samba's throughput at <= 1/3 of its CPU/GiB"
        }
        ("small files write" | "small files list" | "small files read", _) => {
            "target: >= 2x Samba's files/s"
        }
        ("list one large directory", _) => {
            "target: >= 2x Samba's entries/s (inodes cold: listed after the page cache was dropped)"
        }
        ("same directory again (warm)", _) => {
            "no target of its own: the listing above with the kernel's inode cache warm"
        }
        ("metadata open/stat/close", _) => {
            "no target of its own (small files: >= 2x Samba's files/s)"
        }
        ("fan-out read", _) => "target: >= 80% of the loopback TCP ceiling",
        _ => "cross-check, no target",
    }
}

fn main() -> anyhow::Result<()> {
    if let Ok(filter) = std::env::var("BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    let a = args()?;
    wl::keep_freed_memory();
    std::fs::create_dir_all(&a.out)?;
    let out = a.out.canonicalize()?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    clean_up_on_interrupt(&rt);
    let work = tempfile::tempdir()?;
    leave_nothing(None, Some(work.path()));
    let quarry_bin = quarry_tests::quarry_bin()?;
    let versus = match &a.baseline {
        Some(bin) => format!("the quarry at {}", bin.display()),
        None => "Samba smbd".into(),
    };
    println!(
        "SMB bench: quarry {} vs {versus}; client: the smb crate; {} ranks x {} MiB (write depth {}), read depth {}, {} training files of {} MiB ±50% ({} readers), fan-out {} x {} MiB, {} small files in {} dirs ({} workers), a {}-entry directory; best of {} A/B runs; raw output in {}",
        quarry_bin.display(),
        a.ranks,
        a.rank_mib,
        a.write_depth,
        a.read_depth,
        a.train_files,
        a.train_mib,
        a.readers,
        a.fanout,
        a.fanout_mib,
        a.small_files,
        a.small_dirs,
        a.workers,
        a.list_entries,
        a.runs,
        out.display()
    );
    let train = wl::training_set(a.train_files, a.train_mib);
    let xcheck_src = work.path().join("xcheck.bin");
    {
        let mut rng = wl::Rng::new(0x0c0c);
        let mut f = std::fs::File::create(&xcheck_src)?;
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..a.xcheck_mib {
            for chunk in block.chunks_mut(8) {
                chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
            }
            std::io::Write::write_all(&mut f, &block)?;
        }
    }

    let (q, quarry) = start_quarry(&quarry_bin, "quarry", "Quarry")?;
    let (reference, other) = match &a.baseline {
        Some(bin) => {
            let (p, server) = start_quarry(bin, "baseline", "Baseline")?;
            (Reference::Quarry(Box::new(p)), server)
        }
        None => {
            let port = free_port()?;
            let smbd = Smbd::start(
                &work.path().join("smbd"),
                &SmbdConfig {
                    port,
                    share: SHARE,
                    user: USER,
                    password: PASS,
                    aio_from: AIO_FROM,
                },
            )?;
            let pid = smbd.pid();
            // Its directory is inside `work`.
            leave_nothing(Some(pid), None);
            let server = Server {
                name: "samba",
                title: "Samba",
                port,
                share_dir: smbd.share_dir.clone(),
                cpu: Box::new(move || tree_cpu_seconds(pid).unwrap_or(0.0)),
            };
            (Reference::Samba(smbd), server)
        }
    };
    for s in [&quarry, &other] {
        prepare_datasets(&s.share_dir, &train, a.fanout_mib, a.list_entries)
            .with_context(|| format!("preparing {}'s data sets", s.name))?;
    }

    let share_fs = quarry_tests::fs_description(&quarry.share_dir);
    let other_fs = quarry_tests::fs_description(&other.share_dir);
    ensure!(
        share_fs == other_fs,
        "the two shares are on different file systems ({share_fs} and {other_fs}): their figures would not compare"
    );
    println!("Both shares are on {share_fs}");

    // Loopback TCP with one stream, and with as many streams as the fan-out opens
    // sessions (its ceiling); measured again after the workloads (below).
    let tcp_one = Ceiling::before(1, &out)?;
    let tcp_fanout = Ceiling::before(a.fanout, &out)?;
    let (fio_w, fio_r) = fio_ceiling(&quarry.share_dir, 1024, &out)?;
    println!(
        "Ceilings before the workloads: loopback TCP (iperf3, {IPERF_SECS} s) {:.0} MB/s with one stream, {:.0} MB/s with {} streams; the share's file system with fio O_DIRECT 1 MiB: write {fio_w:.0} MB/s, read {fio_r:.0} MB/s",
        tcp_one.before,
        tcp_fanout.before,
        a.fanout
    );
    let floor_before = read_floor(&quarry.share_dir, &train, "before", &out)?;
    println!(
        "Read floor before the workloads (s/GiB on one core): page-cache copy {:.3}, GMAC {:.3}, AES-128-GCM {:.3}, loopback send {:.3}",
        floor_before.copy, floor_before.gmac, floor_before.seal, floor_before.send
    );
    let mut measured = Vec::new();
    for &mode in &a.modes {
        // Every run's figures, per workload, for each server.
        let mut runs: Vec<[Vec<Figure>; 2]> = vec![[Vec::new(), Vec::new()]; WORKLOADS.len()];
        for run in 0..a.runs {
            let order = if run % 2 == 0 { [0, 1] } else { [1, 0] };
            for si in order {
                let server = [&quarry, &other][si];
                let log = out.join(format!("{}-{mode}-run{run}.log", server.name));
                let figs = run_all(&a, &rt, server, mode, &train, &xcheck_src, &log).with_context(
                    || {
                        let tail = match (si, &reference) {
                            (0, _) => q.log_text(),
                            (_, Reference::Quarry(p)) => p.log_text(),
                            (_, Reference::Samba(_)) => String::new(),
                        };
                        let tail: Vec<&str> = tail.lines().rev().take(20).collect();
                        format!(
                            "{} with {mode}, run {run}{}",
                            server.name,
                            tail.into_iter()
                                .rev()
                                .fold(String::new(), |acc, l| acc + "\n  | " + l)
                        )
                    },
                )?;
                let mut raw = String::new();
                for ((name, unit), f) in WORKLOADS.iter().zip(&figs) {
                    raw.push_str(&format!(
                        "{name}: {:.1} {} server {:.3} client {:.3} {} cores {:.2}/{:.2}\n",
                        f.value,
                        unit.figure(),
                        f.server_cpu,
                        f.client_cpu,
                        unit.cpu(),
                        f.server_cores,
                        f.client_cores
                    ));
                }
                println!("{} {mode} run {run}:\n{raw}", server.name);
                std::fs::write(
                    out.join(format!("{}-{mode}-run{run}.txt", server.name)),
                    &raw,
                )?;
                for (slot, fig) in runs.iter_mut().zip(figs) {
                    slot[si].push(fig);
                }
            }
        }
        measured.push((mode, runs));
    }

    let (tcp_one, tcp) = (tcp_one.settle(&out)?, tcp_fanout.settle(&out)?);
    let floor = floor_before.least(&read_floor(&quarry.share_dir, &train, "after", &out)?);
    let ceilings = format!(
        "Ceilings measured in this run: loopback TCP (iperf3, {IPERF_SECS} s, the higher of before and after the workloads) {tcp_one:.0} MB/s with one stream, {tcp:.0} MB/s with {} streams (the fan-out's ceiling); the share's file system ({share_fs}) with fio O_DIRECT 1 MiB: write {fio_w:.0} MB/s, read {fio_r:.0} MB/s\n\n\
         Read floor (the least of before and after the workloads, {} MiB of the training set a pass): what one core spends per GiB on the passes a signed or sealed READ from the page cache makes, alone: page-cache copy {:.3} s, AES-128-GMAC {:.3} s, AES-128-GCM {:.3} s, loopback send {:.3} s. Signed: {:.3} s/GiB; sealed: {:.3} s/GiB.\n",
        a.fanout,
        floor.bytes >> 20,
        floor.copy,
        floor.gmac,
        floor.seal,
        floor.send,
        floor.signed(),
        floor.sealed(),
    );
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let them = other.title;
    for (mode, runs) in measured {
        for ((name, unit), [qruns, sruns]) in WORKLOADS.iter().zip(runs) {
            let (qf, sf) = (
                best_of(&qruns).context("no quarry figure")?,
                best_of(&sruns).with_context(|| format!("no {} figure", other.name))?,
            );
            let ratio = qf.value / sf.value;
            let cpu_ratio = if sf.server_cpu > 0.0 {
                qf.server_cpu / sf.server_cpu
            } else {
                0.0
            };
            let bound = |f: &Figure| {
                if f.client_bound() {
                    "client-bound"
                } else {
                    "server-bound"
                }
            };
            rows.push(format!(
                "| {name} | {mode} | {:.0} {fu} | {:.0} {fu} | {ratio:.2}x | {:.2} | {:.2} | {cpu_ratio:.2} | {:.2}/{:.2} {} | {:.2}/{:.2} {} |",
                qf.value,
                sf.value,
                qf.server_cpu,
                sf.server_cpu,
                qf.server_cores,
                qf.client_cores,
                bound(&qf),
                sf.server_cores,
                sf.client_cores,
                bound(&sf),
                fu = unit.figure(),
            ));
            let reached = if *name == "fan-out read" {
                format!(
                    "{:.0}% of loopback TCP ({} streams)",
                    qf.value / tcp * 100.0,
                    a.fanout
                )
            } else {
                format!("{ratio:.2}x {them}'s figure, {cpu_ratio:.2}x its server CPU")
            };
            let cap = if qf.client_bound() && qf.client_cpu > 0.0 {
                let cap = client_cap(&qf, *unit, threads);
                let against = if *name == "fan-out read" {
                    format!("{:.0}% of loopback TCP", cap / tcp * 100.0)
                } else {
                    format!("{:.2}x {them}'s figure", cap / sf.value)
                };
                format!(
                    "; client-bound: the client alone spends {:.2} {} here, so with it no server \
                     could pass {cap:.0} {} on {threads} cores ({against})",
                    qf.client_cpu,
                    unit.cpu(),
                    unit.figure()
                )
            } else {
                String::new()
            };
            // Checkpoints move their bytes to or from the device (written, then flushed;
            // read after the page cache was dropped), so the file system's own rate bounds
            // them as the client does the cached reads.
            let fio = match *name {
                "checkpoint write" => Some(("write", fio_w)),
                "checkpoint read (cold)" => Some(("read", fio_r)),
                _ => None,
            };
            let device = match fio {
                Some((rw, f)) if f > 0.0 => format!(
                    "; the share's file system itself did {f:.0} MB/s of O_DIRECT 1 MiB {rw}s \
                     with fio in this run ({:.2}x {them}'s figure), of which Quarry reached {:.0}%",
                    f / sf.value,
                    qf.value / f * 100.0
                ),
                _ => String::new(),
            };
            let target = match reference {
                Reference::Samba(_) => format!(" ({})", target_of(name, mode)),
                Reference::Quarry(_) => String::new(),
            };
            let spread = if a.runs > 1 {
                let (q, o) = (CpuSpread::of(&qruns), CpuSpread::of(&sruns));
                let ratio = if o.mean > 0.0 {
                    format!(" ({:.2}x)", q.mean / o.mean)
                } else {
                    String::new()
                };
                format!(
                    "; server CPU over the {} runs, mean (least-most): Quarry {q}, {them} {o} {}{ratio}",
                    a.runs,
                    unit.cpu(),
                )
            } else {
                String::new()
            };
            let floor_note = floor_note(name, mode, &floor, &qf, &sf, them, threads, tcp);
            summary.push(format!(
                "- {name}, {mode}: {reached}{target}{cap}{device}{floor_note}{spread}"
            ));
        }
    }
    let mut table = format!(
        "| workload | protection | Quarry | {them} | Quarry/{them} | Quarry server CPU | {them} server CPU | Quarry/{them} CPU | Quarry run: cores server/client | {them} run: cores server/client |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
    );
    for r in rows {
        table.push_str(&r);
        table.push('\n');
    }
    let prefaulted = if a.prefault_mib > 0 {
        format!(
            " Before each measured phase, {} MiB of memory was touched and freed \
             (--prefault-mib), so the page cache grew into memory the host had backed.",
            a.prefault_mib
        )
    } else {
        String::new()
    };
    let notes = format!(
        "CPU is in s/GiB for MB/s rows and in ms per thousand files or entries otherwise. \
         'client-bound': the client used at least as many cores as the server; on this \
         machine the client shares the {threads} cores with the server, so CPU per unit is \
         the deciding figure there.{prefaulted}\n\n{}\n",
        summary.join("\n")
    );
    println!("{ceilings}\n{table}\n{notes}");
    std::fs::write(
        out.join("table.md"),
        format!("{ceilings}\n{table}\n{notes}"),
    )?;
    // A stopped server's process id may be reused: an interrupt from here on removes the
    // directories only.
    if let Ok(mut left) = LEFTOVERS.lock() {
        left.servers.clear();
    }
    reference.stop()?;
    q.stop()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, bytes: usize) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![7u8; bytes]).unwrap();
    }

    /// Clearing frees the data but no inode: every file a run wrote still exists, empty,
    /// outside the names the next run writes, and clearing twice keeps both runs' files.
    #[test]
    fn clearing_empties_and_keeps_every_file_a_run_wrote() {
        use std::os::unix::fs::MetadataExt;
        let share = tempfile::tempdir().unwrap();
        let s = share.path();
        let mut inodes = Vec::new();
        for run in 0..2 {
            let made = [
                s.join("small/d000/f000000.dat"),
                s.join("small/d001/f000001.dat"),
                s.join("ckpt/rank0.model"),
                s.join("xcheck.bin"),
            ];
            for p in &made {
                write(p, 5000 + run);
                inodes.push(std::fs::metadata(p).unwrap().ino());
            }
            write(&s.join("train/t0.bin"), 300);
            clear_written(s).unwrap();
            for name in WRITTEN {
                assert!(!s.join(name).exists(), "{name} left in the share");
            }
        }
        let mut kept = Vec::new();
        let mut stack = vec![s.join(SPENT)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let (path, meta) = {
                    let e = entry.unwrap();
                    (e.path(), e.metadata().unwrap())
                };
                if meta.is_dir() {
                    stack.push(path);
                } else {
                    assert_eq!(meta.len(), 0, "{} not emptied", path.display());
                    kept.push(meta.ino());
                }
            }
        }
        inodes.sort_unstable();
        kept.sort_unstable();
        assert_eq!(kept, inodes);
        assert_eq!(
            std::fs::metadata(s.join("train/t0.bin")).unwrap().len(),
            300
        );
    }
}
