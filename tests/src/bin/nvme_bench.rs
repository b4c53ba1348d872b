//! NVMe/TCP benchmark (issue 8): the Rust test initiator against a Quarry namespace,
//! side by side with fio on the namespace's backing file (the ceiling), in one run.
//! Prints IOPS, MB/s, p50/p99 latency and the server's CPU per I/O, and keeps fio's raw
//! JSON. The loopback TCP ceiling (iperf3, one stream per queue) is measured in the same
//! run: every byte to or from Quarry crosses it, so where fio's figure is above it, the
//! fio ratio a TCP target can reach on this host is capped by the network. Run on demand,
//! never part of the test suite's pass/fail:
//!
//! ```sh
//! cargo build --release -p quarry -p quarry-tests
//! QUARRY_BIN=target/release/quarry target/release/nvme_bench [--seconds 10] [--size-mib 1024] [--out DIR] [--incapsule-kib N] [--only TEXT]
//! ```

use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use quarry_nvmeof::spec::{admin_opc, io_opc};
use quarry_tests::loopback::{Ceiling, IPERF_SECS};
use quarry_tests::nvme_initiator::{rw_sqe, Command, Controller, Options, Queue};
use quarry_tests::procstat::{cpu_seconds, own_cpu_seconds};
use quarry_tests::QuarryProcess;
use serde_json::{json, Value};
use tokio::sync::Mutex;

const NQN: &str = "nqn.2026-11.io.quarry:bench";
const VOLUME: &str = "bench";

/// One workload shape, run the same way against Quarry and fio.
#[derive(Debug, Clone, Copy)]
struct Shape {
    name: &'static str,
    write: bool,
    random: bool,
    block: u32,
    queues: u16,
    depth: usize,
}

const SHAPES: [Shape; 6] = [
    Shape {
        name: "4k randread QD1",
        write: false,
        random: true,
        block: 4096,
        queues: 1,
        depth: 1,
    },
    Shape {
        name: "4k randread QD32x4",
        write: false,
        random: true,
        block: 4096,
        queues: 4,
        depth: 32,
    },
    Shape {
        name: "4k randwrite QD1",
        write: true,
        random: true,
        block: 4096,
        queues: 1,
        depth: 1,
    },
    Shape {
        name: "4k randwrite QD32x4",
        write: true,
        random: true,
        block: 4096,
        queues: 4,
        depth: 32,
    },
    Shape {
        name: "128k seqread QD32x4",
        write: false,
        random: false,
        block: 128 * 1024,
        queues: 4,
        depth: 32,
    },
    Shape {
        name: "128k seqwrite QD32x4",
        write: true,
        random: false,
        block: 128 * 1024,
        queues: 4,
        depth: 32,
    },
];

/// What one run measured.
#[derive(Debug, Default, Clone)]
struct Figures {
    ios: u64,
    secs: f64,
    p50_us: f64,
    p99_us: f64,
    server_cpu_s: Option<f64>,
    /// CPU seconds of this process over the run: the test initiator, which shares the
    /// host's cores with the server, so what it spends the server cannot use.
    client_cpu_s: Option<f64>,
}

impl Figures {
    fn iops(&self) -> f64 {
        self.ios as f64 / self.secs
    }
    fn mbps(&self, block: u32) -> f64 {
        self.iops() * f64::from(block) / 1e6
    }
}

struct Args {
    seconds: u64,
    size_mib: u64,
    out: PathBuf,
    incapsule_kib: Option<u32>,
    /// Only the workloads whose name contains this (an A/B of one workload).
    only: Option<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        seconds: 10,
        size_mib: 1024,
        out: PathBuf::from("target/bench/nvme"),
        incapsule_kib: None,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => a.seconds = value()?.parse()?,
            "--size-mib" => a.size_mib = value()?.parse()?,
            "--out" => a.out = PathBuf::from(value()?),
            "--incapsule-kib" => a.incapsule_kib = Some(value()?.parse()?),
            "--only" => a.only = Some(value()?),
            "-h" | "--help" => {
                println!("nvme_bench [--seconds N] [--size-mib N] [--out DIR] [--incapsule-kib N] [--only TEXT]");
                println!("  --incapsule-kib N: send writes up to N KiB in their capsule (default: what the target's IOCCSZ allows), larger ones through R2T");
                println!("  --only TEXT: run only the workloads whose name contains TEXT (e.g. \"128k seqwrite\")");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(
        a.seconds >= 1 && a.size_mib >= 64,
        "--seconds >= 1, --size-mib >= 64"
    );
    Ok(a)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)])
}

/// Per-queue generator state: xorshift for random offsets, a cursor for sequential.
struct Gen {
    rng: u64,
    cursor: u64,
    blocks: u64,
    base: u64,
}

impl Gen {
    fn next_lba(&mut self, random: bool, lbas_per_io: u64) -> u64 {
        let slot = if random {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng % self.blocks
        } else {
            let s = self.cursor;
            self.cursor = (self.cursor + 1) % self.blocks;
            s
        };
        self.base + slot * lbas_per_io
    }
}

/// Runs one shape for `secs` on the controller's first `shape.queues` I/O queues.
async fn run_quarry(
    queues: &[Arc<Mutex<Queue>>],
    shape: Shape,
    lbas: u64,
    secs: u64,
    server_pid: Option<u32>,
) -> anyhow::Result<Figures> {
    let lbas_per_io = u64::from(shape.block / 4096);
    // Each queue works its own slice, so sequential streams do not overlap.
    let slice = lbas / u64::from(shape.queues);
    let cpu0 = server_pid.and_then(cpu_seconds);
    let client0 = own_cpu_seconds();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let payload = bytes::Bytes::from(vec![0xa5u8; shape.block as usize]);
    let mut tasks = Vec::new();
    for (i, q) in queues.iter().take(usize::from(shape.queues)).enumerate() {
        let q = q.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let mut q = q.lock().await;
            let mut gen = Gen {
                rng: 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1),
                cursor: 0,
                blocks: slice / lbas_per_io,
                base: i as u64 * slice,
            };
            let mut lat = Vec::with_capacity(1 << 20);
            let t0 = Instant::now();
            q.pipeline(
                shape.depth,
                || {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    let lba = gen.next_lba(shape.random, lbas_per_io);
                    let nlb = shape.block / 4096;
                    let tag = t0.elapsed().as_nanos() as u64;
                    Some(if shape.write {
                        (
                            tag,
                            Command {
                                sqe: rw_sqe(io_opc::WRITE, 1, lba, nlb, false),
                                write: Some(payload.clone()),
                                read_len: 0,
                            },
                        )
                    } else {
                        (
                            tag,
                            Command {
                                sqe: rw_sqe(io_opc::READ, 1, lba, nlb, false),
                                write: None,
                                read_len: shape.block,
                            },
                        )
                    })
                },
                |tag, c| {
                    ensure!(
                        c.cqe.status().is_success(),
                        "I/O failed: {:?}",
                        c.cqe.status()
                    );
                    let ns = (t0.elapsed().as_nanos() as u64).saturating_sub(tag);
                    lat.push(u32::try_from(ns / 1000).unwrap_or(u32::MAX));
                    Ok(())
                },
            )
            .await?;
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = server_pid.and_then(cpu_seconds);
    let client1 = own_cpu_seconds();
    lat.sort_unstable();
    Ok(Figures {
        ios: lat.len() as u64,
        secs,
        p50_us: percentile(&lat, 0.50),
        p99_us: percentile(&lat, 0.99),
        server_cpu_s: cpu0.zip(cpu1).map(|(a, b)| b - a),
        client_cpu_s: client0.zip(client1).map(|(a, b)| b - a),
    })
}

/// fio on the backing file with the same shape (O_DIRECT, io_uring), raw JSON kept.
fn run_fio(file: &Path, shape: Shape, size: u64, secs: u64, out: &Path) -> anyhow::Result<Figures> {
    let rw = match (shape.write, shape.random) {
        (false, true) => "randread",
        (true, true) => "randwrite",
        (false, false) => "read",
        (true, false) => "write",
    };
    let size_per_job = size / u64::from(shape.queues);
    let output = Process::new("fio")
        .args([
            "--name=ceiling",
            &format!("--filename={}", file.display()),
            &format!("--rw={rw}"),
            &format!("--bs={}", shape.block),
            &format!("--iodepth={}", shape.depth),
            &format!("--numjobs={}", shape.queues),
            &format!("--size={size_per_job}"),
            "--offset_increment",
            &size_per_job.to_string(),
            "--ioengine=io_uring",
            "--direct=1",
            "--time_based",
            &format!("--runtime={secs}"),
            "--group_reporting",
            "--output-format=json",
        ])
        .output()
        .context("running fio (apt-get install fio)")?;
    ensure!(
        output.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let raw = out.join(format!("fio-{}.json", shape.name.replace(' ', "_")));
    std::fs::write(&raw, &output.stdout)?;
    let v: Value = serde_json::from_slice(&output.stdout).context("fio JSON")?;
    let job = &v["jobs"][0];
    let side = if shape.write {
        &job["write"]
    } else {
        &job["read"]
    };
    let ios = side["total_ios"].as_u64().unwrap_or(0);
    let runtime_ms = side["runtime"].as_f64().unwrap_or(0.0);
    let pct = |p: &str| side["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(Figures {
        ios,
        secs: (runtime_ms / 1000.0).max(1e-9),
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        server_cpu_s: None,
        client_cpu_s: None,
    })
}

async fn keep_alive(c: &mut Controller) -> anyhow::Result<()> {
    let r = c
        .admin_exec(
            quarry_nvmeof::spec::Sqe::new(admin_opc::KEEP_ALIVE, 0),
            None,
            0,
        )
        .await?;
    ensure!(r.cqe.status().is_success(), "keep alive failed");
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    std::fs::create_dir_all(&a.out)?;
    let size = a.size_mib << 20;
    let wanted = |name: &str| a.only.as_deref().is_none_or(|o| name.contains(o));
    // Loopback TCP ceiling for each queue count the chosen shapes use, first measured
    // before the workloads (again after them, below).
    let mut streams: Vec<u16> = SHAPES
        .iter()
        .filter(|s| wanted(s.name))
        .map(|s| s.queues)
        .collect();
    streams.sort_unstable();
    streams.dedup();
    let mut tcp_before = Vec::new();
    for n in streams {
        tcp_before.push(Ceiling::before(usize::from(n), &a.out)?);
    }
    let p = QuarryProcess::start()?;
    let api = p.admin()?;
    let (s, b) = api.post(
        "/api/v1/volumes",
        &json!({"name": VOLUME, "size_bytes": size}),
    )?;
    ensure!(s == 201, "volume: {s} {b}");
    let (s, b) = api.post(
        "/api/v1/nvme/subsystems",
        &json!({"nqn": NQN, "allow_any_host": true}),
    )?;
    ensure!(s == 201, "subsystem: {s} {b}");
    let (s, b) = api.post(
        &format!("/api/v1/nvme/subsystems/{NQN}/namespaces"),
        &json!({"volume": VOLUME}),
    )?;
    ensure!(s == 201, "namespace: {s} {b}");
    let backing = p
        .data
        .join("pool")
        .join("volumes")
        .join(format!("{VOLUME}.vol"));
    ensure!(
        backing.exists(),
        "backing file {} not found",
        backing.display()
    );

    let mut o = Options::new(p.nvme, NQN);
    o.io_queues = 4;
    o.max_incapsule = a.incapsule_kib.map(|k| k.saturating_mul(1024));
    let mut c = Controller::connect(&o).await?;
    let queues: Vec<Arc<Mutex<Queue>>> = std::mem::take(&mut c.io)
        .into_iter()
        .map(|q| Arc::new(Mutex::new(q)))
        .collect();
    let lbas = size / 4096;
    let pid = p.pid();
    let backing_fs = quarry_tests::fs_description(&backing);
    println!(
        "NVMe/TCP bench: quarry {} vs fio on its backing file (on {backing_fs}), {} MiB volume, {} s per run, raw output in {}",
        quarry_tests::quarry_bin()?.display(),
        a.size_mib,
        a.seconds,
        a.out.display()
    );
    // Precondition: write the whole volume once, so reads hit allocated blocks.
    let fill = Shape {
        name: "fill",
        write: true,
        random: false,
        block: 128 * 1024,
        queues: 4,
        depth: 16,
    };
    let fill_secs = (a.size_mib / 32).clamp(5, 20);
    run_quarry(&queues, fill, lbas, fill_secs, None).await?;
    keep_alive(&mut c).await?;

    let mut rows = Vec::new();
    for shape in SHAPES.into_iter().filter(|s| wanted(s.name)) {
        let q = run_quarry(&queues, shape, lbas, a.seconds, pid).await?;
        keep_alive(&mut c).await?;
        let f = run_fio(&backing, shape, size, a.seconds, &a.out)?;
        keep_alive(&mut c).await?;
        rows.push((shape, q, f));
    }

    // Measured again now that the workloads are done (iperf3 never runs beside them).
    let mut tcp = Vec::new();
    for ceiling in &tcp_before {
        tcp.push((ceiling.streams, ceiling.settle(&a.out)?));
    }
    let tcp_for = |queues: u16| {
        tcp.iter()
            .find(|(n, _)| *n == usize::from(queues))
            .map_or(f64::NAN, |(_, mbps)| *mbps)
    };

    let mut table = format!("Backing file on {backing_fs}\n");
    table.push_str(&format!(
        "{:<22} {:>10} {:>9} {:>8} {:>8} {:>10} {:>9} {:>8} {:>8} {:>7} {:>7} {:>12} {:>12}\n",
        "workload",
        "quarry IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "fio IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "ratio",
        "of TCP",
        "srv CPU us/IO",
        "cli CPU us/IO"
    ));
    for (shape, q, f) in &rows {
        let per_io = |cpu_s: Option<f64>| {
            cpu_s
                .map(|s| format!("{:.1}", s * 1e6 / q.ios.max(1) as f64))
                .unwrap_or_else(|| "n/a".into())
        };
        table.push_str(&format!(
            "{:<22} {:>10.0} {:>9.1} {:>8.0} {:>8.0} {:>10.0} {:>9.1} {:>8.0} {:>8.0} {:>6.0}% {:>6.0}% {:>12} {:>12}\n",
            shape.name,
            q.iops(),
            q.mbps(shape.block),
            q.p50_us,
            q.p99_us,
            f.iops(),
            f.mbps(shape.block),
            f.p50_us,
            f.p99_us,
            100.0 * q.iops() / f.iops().max(1e-9),
            100.0 * q.mbps(shape.block) / tcp_for(shape.queues),
            per_io(q.server_cpu_s),
            per_io(q.client_cpu_s)
        ));
    }
    let ceilings: Vec<String> = tcp
        .iter()
        .map(|(n, mbps)| {
            format!(
                "{mbps:.0} MB/s with {n} stream{}",
                if *n == 1 { "" } else { "s" }
            )
        })
        .collect();
    table.push_str(&format!(
        "Loopback TCP ceiling measured in this run (iperf3, {IPERF_SECS} s, the higher of before and after the workloads): {}.\n",
        ceilings.join(", ")
    ));
    for (shape, _, f) in &rows {
        let (fio, net) = (f.mbps(shape.block), tcp_for(shape.queues));
        if fio > net {
            table.push_str(&format!(
                "{}: fio's {fio:.0} MB/s is above the loopback ceiling ({net:.0} MB/s); over TCP on this host the most is {:.0}% of fio.\n",
                shape.name,
                100.0 * net / fio
            ));
        }
    }
    print!("{table}");
    std::fs::write(a.out.join("table.txt"), &table)?;
    println!(
        "ratio = Quarry over NVMe/TCP loopback / fio directly on the backing file (the ceiling).\n\
         of TCP = Quarry's MB/s / iperf3's loopback TCP MB/s with one stream per queue.\n\
         The initiator runs on the same 2 cores as the server: CPU per I/O is the deciding figure;\n\
         cli CPU is the initiator's, which the server could not use."
    );
    drop(c);
    p.stop()?;
    Ok(())
}
