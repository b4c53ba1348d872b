//! What a small file's storage calls cost by the way they leave the async runtime
//! (issue 8, the small-file write).
//!
//! Quarry's SMB server runs a CREATE's and a WRITE's storage calls on tokio's blocking
//! pool, so a reactor worker never waits for the disk; tests/bench/RESULTS.md measured
//! those two hand-offs at about a quarter of the server's CPU per new file. This bench
//! takes the network and the protocol away and does only that storage work (create a
//! new file, write it whole, close it) from many tasks on a two-worker runtime, the way
//! the server's connections would, in one of these modes:
//! - `pool`: the create and the write each on tokio's blocking pool (what Quarry does);
//! - `uring`: the create and the write as io_uring operations on a ring of the task's
//!   own, waited for in tokio's reactor (what the issue names as the alternative; the
//!   kernel runs what it cannot do without waiting on its own io-wq threads);
//! - `inline`: both on the task itself, blocking its worker: the floor, which the server
//!   must not do.
//!
//! It prints files/s and the process's CPU per 1,000 files (kernel io-wq threads are the
//! process's threads, so they count), alternating the modes run by run. Files are never
//! deleted while it runs: on ext4 without a journal every create would step over inodes
//! freed in the last minute (RESULTS.md, 2026-12-01).
//!
//! `cargo run --release -p quarry-tests --bin handoff_bench -- --help`

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use io_uring::{opcode, types, IoUring};
use quarry_tests::smb_workloads::Rng;
use quarry_tests::xorshift_bytes;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// How a file's create and write leave the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Pool,
    Uring,
    Inline,
}

#[derive(Parser, Debug)]
#[command(about = "Cost of a small file's create and write by hand-off: pool, io_uring, inline")]
struct Args {
    /// Files per run.
    #[arg(long, default_value_t = 20_000)]
    files: usize,
    /// Directories the files are spread over.
    #[arg(long, default_value_t = 100)]
    dirs: usize,
    /// Concurrent tasks (the server's connections' requests in flight).
    #[arg(long, default_value_t = 16)]
    tasks: usize,
    /// Smallest file, KiB (sizes spread evenly up to --max-kib, as smb_bench's).
    #[arg(long, default_value_t = 16)]
    min_kib: usize,
    /// Largest file, KiB.
    #[arg(long, default_value_t = 128)]
    max_kib: usize,
    /// Runs of each mode, alternating.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Modes to run (all by default).
    #[arg(long, value_enum, value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Directory to work in (a temporary directory inside it, removed at the end).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Runtime worker threads (Quarry on this lab's 2 cores runs 2).
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

/// One file to make: its path and size.
struct Job {
    path: CString,
    len: usize,
}

/// Everything one run's tasks share.
struct Work {
    jobs: Vec<Job>,
    next: std::sync::atomic::AtomicUsize,
    data: Vec<u8>,
    mode: Mode,
}

/// Process CPU time (user + system) and voluntary context switches so far. From
/// `getrusage`, not `quarry_tests::procstat::own_cpu_seconds`: a run lasts about a second,
/// and /proc counts in clock ticks of 10 ms, `getrusage` in microseconds.
fn usage() -> (f64, i64) {
    // SAFETY: getrusage writes only into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF covers every thread of the process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime) + secs(ru.ru_stime), ru.ru_nvcsw)
}

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).context("path with a NUL byte")
}

const CREATE_FLAGS: i32 = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;

fn create_blocking(path: &CString) -> std::io::Result<OwnedFd> {
    // SAFETY: `path` is a valid C string; the descriptor returned is owned here.
    let fd = unsafe { libc::open(path.as_ptr(), CREATE_FLAGS, 0o644) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn write_blocking(fd: &OwnedFd, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: `data` is valid for its length for the whole call.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(std::io::Error::other("short write"));
    }
    Ok(())
}

/// A task's own ring, waited for in the reactor through a duplicate of its descriptor.
struct TaskRing {
    ring: IoUring,
    fd: AsyncFd<OwnedFd>,
}

impl TaskRing {
    fn new() -> Result<Self> {
        let ring = IoUring::new(8).context("io_uring_setup")?;
        // SAFETY: the ring's descriptor is open while `ring` lives; the duplicate is owned.
        let dup = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) }.try_clone_to_owned()?;
        // SAFETY: the AsyncFd owns the duplicate, open until the AsyncFd is dropped.
        let fd = unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }
            .map_err(|e| anyhow::anyhow!("registering the ring: {e}"))?;
        Ok(TaskRing { ring, fd })
    }

    /// Submits `entry` and waits for its completion; the result is the CQE's `res`.
    ///
    /// # Safety
    /// Whatever `entry` points at (path, buffer) must stay valid until this returns, and
    /// the future must not be dropped before it completes.
    async unsafe fn run(&mut self, entry: io_uring::squeue::Entry) -> Result<i32> {
        // SAFETY: the caller keeps the entry's memory valid until completion.
        unsafe { self.ring.submission().push(&entry) }.context("submission queue full")?;
        self.ring.submit().context("io_uring_enter")?;
        loop {
            if let Some(cqe) = self.ring.completion().next() {
                return Ok(cqe.result());
            }
            let mut guard = self.fd.readable().await?;
            if self.ring.completion().is_empty() {
                guard.clear_ready();
            }
        }
    }
}

/// One task: takes the next file until none is left and makes it in the run's mode.
async fn worker(work: Arc<Work>) -> Result<()> {
    let mut ring = match work.mode {
        Mode::Uring => Some(TaskRing::new()?),
        _ => None,
    };
    loop {
        let i = work.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(job) = work.jobs.get(i) else {
            return Ok(());
        };
        let data = work
            .data
            .get(..job.len)
            .context("file larger than the data")?;
        let path = &job.path;
        match ring.as_mut() {
            None if work.mode == Mode::Inline => {
                let fd = create_blocking(path)?;
                write_blocking(&fd, data)?;
            }
            None => {
                let path = path.clone();
                let fd = tokio::task::spawn_blocking(move || create_blocking(&path)).await??;
                let (w, len) = (work.clone(), job.len);
                tokio::task::spawn_blocking(move || write_blocking(&fd, &w.data[..len])).await??;
            }
            Some(ring) => {
                let open = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path.as_ptr())
                    .flags(CREATE_FLAGS)
                    .mode(0o644)
                    .build();
                // SAFETY: `path` lives until the call returns, which waits for completion.
                let fd = unsafe { ring.run(open).await? };
                if fd < 0 {
                    return Err(std::io::Error::from_raw_os_error(-fd)).context("create");
                }
                // SAFETY: the kernel made this descriptor for us.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                let write =
                    opcode::Write::new(types::Fd(fd.as_raw_fd()), data.as_ptr(), data.len() as u32)
                        .offset(0)
                        .build();
                // SAFETY: `data` is borrowed from `work`, alive for the whole call.
                let n = unsafe { ring.run(write).await? };
                if n != data.len() as i32 {
                    bail!("write returned {n}");
                }
            }
        }
    }
}

/// Makes `dirs` directories under `base` and plans `files` files spread over them, of
/// sizes between `min` and `max` bytes.
fn plan(
    base: &Path,
    dirs: usize,
    files: usize,
    min: usize,
    max: usize,
    rng: &mut Rng,
) -> Result<Vec<Job>> {
    std::fs::create_dir(base)?;
    let mut made = Vec::new();
    for d in 0..dirs {
        let p = base.join(format!("d{d:03}"));
        std::fs::create_dir(&p)?;
        made.push(p);
    }
    (0..files)
        .map(|i| {
            Ok(Job {
                path: cstr(&made[i % made.len()].join(format!("f{i:06}.bin")))?,
                len: rng.between(min as u64, max as u64) as usize,
            })
        })
        .collect()
}

/// Runs `work` on `rt` with `tasks` tasks and waits for all of them, even after one
/// failed: a task dropped while an io_uring operation is in flight would free memory the
/// kernel still uses, and each task ends only between operations.
fn run(rt: &tokio::runtime::Runtime, work: &Arc<Work>, tasks: usize) -> Result<()> {
    rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(worker(work.clone())))
            .collect();
        let mut first = Ok(());
        for h in handles {
            let ended = h.await.map_err(anyhow::Error::from).and_then(|r| r);
            if first.is_ok() {
                first = ended;
            }
        }
        first
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    let modes = if args.modes.is_empty() {
        vec![Mode::Pool, Mode::Uring, Mode::Inline]
    } else {
        args.modes.clone()
    };
    if args.min_kib == 0 || args.max_kib < args.min_kib {
        bail!("sizes: 0 < --min-kib <= --max-kib");
    }
    if args.dirs == 0 || args.tasks == 0 || args.workers == 0 || args.runs == 0 {
        bail!("--dirs, --tasks, --workers and --runs must be at least 1");
    }
    let root = tempfile::Builder::new()
        .prefix("handoff-bench")
        .tempdir_in(&args.dir)
        .context("temporary directory")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .enable_all()
        .build()?;
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let data = xorshift_bytes(args.max_kib * 1024, 0x5eed);
    println!(
        "{} files of {}-{} KiB in {} directories, {} tasks, {} workers, in {}",
        args.files,
        args.min_kib,
        args.max_kib,
        args.dirs,
        args.tasks,
        args.workers,
        root.path().display()
    );
    println!("run  mode    files/s  CPU ms/1k  sleeps/file");
    let mut results: Vec<(Mode, f64, f64)> = Vec::new();
    for run_no in 0..args.runs {
        for &mode in &modes {
            let jobs = plan(
                &root.path().join(format!("{run_no}-{mode:?}")),
                args.dirs,
                args.files,
                args.min_kib * 1024,
                args.max_kib * 1024,
                &mut rng,
            )?;
            let work = Arc::new(Work {
                jobs,
                next: 0.into(),
                data: data.clone(),
                mode,
            });
            let (cpu0, sw0) = usage();
            let start = Instant::now();
            run(&rt, &work, args.tasks)?;
            let secs = start.elapsed().as_secs_f64();
            let (cpu1, sw1) = usage();
            let n = args.files as f64;
            let rate = n / secs;
            let cpu = (cpu1 - cpu0) * 1e6 / n;
            println!(
                "{run_no:>3}  {:<6} {rate:>8.0}  {cpu:>9.1}  {:>11.2}",
                format!("{mode:?}").to_lowercase(),
                (sw1 - sw0) as f64 / n
            );
            results.push((mode, rate, cpu));
        }
    }
    // Medians: this lab's VM makes single runs swing (RESULTS.md, 2026-12-01).
    println!("\nmedians (each mode's CPU per file against the pool's):");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    };
    let of = |mode: Mode, pick: fn(&(Mode, f64, f64)) -> f64| {
        median(results.iter().filter(|r| r.0 == mode).map(pick).collect())
    };
    let pool_cpu = modes.contains(&Mode::Pool).then(|| of(Mode::Pool, |r| r.2));
    for &mode in &modes {
        let cpu = of(mode, |r| r.2);
        let against = pool_cpu.map_or(String::new(), |p| format!("  {:.2}x", cpu / p));
        println!(
            "  {:<6} {:>8.0} files/s  {:>7.1} ms CPU per 1,000 files{against}",
            format!("{mode:?}").to_lowercase(),
            of(mode, |r| r.1),
            cpu
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_makes_every_file_whole() {
        let root = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let mut rng = Rng::new(7);
        let data = xorshift_bytes(8192, 11);
        for mode in [Mode::Pool, Mode::Uring, Mode::Inline] {
            let base = root.path().join(format!("{mode:?}"));
            let jobs = plan(&base, 3, 40, 1, 8192, &mut rng).expect("plan");
            let sizes: Vec<usize> = jobs.iter().map(|j| j.len).collect();
            let work = Arc::new(Work {
                jobs,
                next: 0.into(),
                data: data.clone(),
                mode,
            });
            run(&rt, &work, 4).expect("run");
            for (i, len) in sizes.into_iter().enumerate() {
                let path = base.join(format!("d{:03}/f{i:06}.bin", i % 3));
                let got = std::fs::read(&path).expect("file made");
                assert_eq!(got, data[..len], "{mode:?} file {i}");
            }
        }
    }
}
