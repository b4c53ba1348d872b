//! Telemetry: data-path counters, latency histograms, the in-memory time series, and their
//! two views: `GET /metrics` (Prometheus text, `exposition`) and `GET /api/v1/telemetry`
//! (JSON for the UI and automation, [`report`](mod@report)).
//!
//! The counters are process-wide and live in one registry built on first use. The data
//! path reaches them through handles created up front: [`smb_bytes`] and [`nvme_bytes`]
//! for protocol totals, a [`ShareOps`] per share (taken at SMB tree connect) for per-share
//! operations, bytes and errors, [`smb_latency`]/[`nvme_latency`] histograms, and the
//! session registry's per-client counters. Every one of them is a relaxed atomic add: no
//! lock and no map lookup per request. Per-volume NVMe counters are the target's own
//! SMART counters, read at scrape time.
//!
//! `QUARRY_TELEMETRY=off` in the environment disables collection (the calls return at
//! once), for benchmarking the cost of telemetry. Every metric is documented in
//! `docs/metrics.md`.

mod exposition;
mod histogram;
pub mod report;
mod series;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use quarry_nvmeof::target::{IoCounters, IoKind};
use quarry_smb::server::OpKind;

pub use exposition::{metrics, render};
pub use histogram::{HistogramSnapshot, LatencyHistogram};
pub use report::{report, TelemetryQuery, TelemetryReport, Window};
pub use series::{sample_every_second, Sample};

/// Direction of a transfer, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client read data (server sent it).
    Read,
    /// The client wrote data (server received it).
    Write,
}

impl Direction {
    fn label(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShareDirectionLabels {
    share: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShareOpLabels {
    share: String,
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VolumeDirectionLabels {
    volume: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VolumeOpLabels {
    volume: String,
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VolumeLabels {
    volume: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabels {
    protocol: String,
}

/// The SMB request families that get a latency histogram (the ones the users
/// watch: data transfer, opens and directory listings).
pub const SMB_TIMED: [OpKind; 4] = [
    OpKind::Read,
    OpKind::Write,
    OpKind::Create,
    OpKind::QueryDirectory,
];

/// Protocol-wide totals kept as plain atomics (the time series and the JSON view read
/// them; `/metrics` shows the per-share families instead).
#[derive(Debug, Default)]
struct ProtocolTotals {
    read: AtomicU64,
    written: AtomicU64,
    ops: AtomicU64,
    errors: AtomicU64,
}

/// Per-share SMB counters, cloned out of the metric families once per tree connect.
#[derive(Debug)]
pub struct ShareOps {
    name: String,
    read: Counter,
    written: Counter,
    ops: [Counter; OpKind::ALL.len()],
    errors: [Counter; OpKind::ALL.len()],
}

/// A volume's NVMe counters as the target keeps them, with what was last copied into the
/// metric families (a reopened volume gets fresh counters: only differences are added).
struct TrackedVolume {
    name: String,
    counters: Weak<IoCounters>,
    synced: [u64; 5],
}

/// The process-wide metrics.
struct Telemetry {
    enabled: bool,
    registry: Registry,
    smb: ProtocolTotals,
    nvme: ProtocolTotals,
    nvme_read: Counter,
    nvme_written: Counter,
    smb_shared_read: Counter,
    share_bytes: Family<ShareDirectionLabels, Counter>,
    share_ops: Family<ShareOpLabels, Counter>,
    share_errors: Family<ShareOpLabels, Counter>,
    shares: Mutex<HashMap<String, Arc<ShareOps>>>,
    smb_latency: [LatencyHistogram; SMB_TIMED.len()],
    nvme_latency_read: LatencyHistogram,
    nvme_latency_write: LatencyHistogram,
    volume_bytes: Family<VolumeDirectionLabels, Counter>,
    volume_ops: Family<VolumeOpLabels, Counter>,
    volume_errors: Family<VolumeLabels, Counter>,
    volumes: Mutex<Vec<TrackedVolume>>,
    sessions: Family<ProtocolLabels, Gauge>,
    gauges: exposition::StateGauges,
    series: Mutex<series::Series>,
}

impl Telemetry {
    fn new() -> Telemetry {
        let enabled = !matches!(
            std::env::var("QUARRY_TELEMETRY").as_deref(),
            Ok("off") | Ok("0") | Ok("false")
        );
        let mut registry = Registry::with_prefix("quarry");
        let share_bytes = Family::<ShareDirectionLabels, Counter>::default();
        registry.register_with_unit(
            "smb",
            "Bytes of file data moved by SMB READ and WRITE, by share and by direction seen from the client",
            Unit::Bytes,
            share_bytes.clone(),
        );
        let smb_shared_read = Counter::default();
        registry.register_with_unit(
            "smb_shared_read",
            "Bytes of SMB READ responses sent from another open's read of the same range (many clients reading one file), not read again",
            Unit::Bytes,
            smb_shared_read.clone(),
        );
        let share_ops = Family::<ShareOpLabels, Counter>::default();
        registry.register(
            "smb_operations",
            "SMB requests on a share's files, by share and request family",
            share_ops.clone(),
        );
        let share_errors = Family::<ShareOpLabels, Counter>::default();
        registry.register(
            "smb_errors",
            "SMB requests on a share's files answered with an error status, by share and request family",
            share_errors.clone(),
        );
        let smb_latency_family = Family::<OpLabels, LatencyHistogram>::default();
        registry.register_with_unit(
            "smb_request_duration",
            "Time from receiving an SMB request to its response being ready, by request family",
            Unit::Seconds,
            smb_latency_family.clone(),
        );
        let smb_latency = SMB_TIMED.map(|op| {
            smb_latency_family
                .get_or_create(&OpLabels {
                    op: op.name().into(),
                })
                .clone()
        });
        let nvme_family = Family::<DirectionLabels, Counter>::default();
        registry.register_with_unit(
            "nvme",
            "Bytes of block data moved by NVMe/TCP Read and Write commands, by direction",
            Unit::Bytes,
            nvme_family.clone(),
        );
        let direction = |d: Direction| {
            nvme_family
                .get_or_create(&DirectionLabels {
                    direction: d.label().into(),
                })
                .clone()
        };
        let (nvme_read, nvme_written) = (direction(Direction::Read), direction(Direction::Write));
        let nvme_latency_family = Family::<OpLabels, LatencyHistogram>::default();
        registry.register_with_unit(
            "nvme_io_duration",
            "Time from an NVMe Read or Write command being ready (its data received) to its completion",
            Unit::Seconds,
            nvme_latency_family.clone(),
        );
        let nvme_latency = |op: &str| {
            nvme_latency_family
                .get_or_create(&OpLabels { op: op.into() })
                .clone()
        };
        let (nvme_latency_read, nvme_latency_write) = (nvme_latency("read"), nvme_latency("write"));
        let volume_bytes = Family::<VolumeDirectionLabels, Counter>::default();
        registry.register_with_unit(
            "nvme_volume",
            "Bytes of block data read and written by NVMe hosts, by volume",
            Unit::Bytes,
            volume_bytes.clone(),
        );
        let volume_ops = Family::<VolumeOpLabels, Counter>::default();
        registry.register(
            "nvme_volume_operations",
            "NVMe Read and Write commands completed, by volume",
            volume_ops.clone(),
        );
        let volume_errors = Family::<VolumeLabels, Counter>::default();
        registry.register(
            "nvme_volume_errors",
            "NVMe commands whose backing I/O failed, by volume",
            volume_errors.clone(),
        );
        let sessions = Family::<ProtocolLabels, Gauge>::default();
        registry.register(
            "sessions",
            "Live SMB sessions and NVMe/TCP controllers, by protocol",
            sessions.clone(),
        );
        let gauges = exposition::StateGauges::register(&mut registry);
        Telemetry {
            enabled,
            registry,
            smb: ProtocolTotals::default(),
            nvme: ProtocolTotals::default(),
            nvme_read,
            nvme_written,
            smb_shared_read,
            share_bytes,
            share_ops,
            share_errors,
            shares: Mutex::new(HashMap::new()),
            smb_latency,
            nvme_latency_read,
            nvme_latency_write,
            volume_bytes,
            volume_ops,
            volume_errors,
            volumes: Mutex::new(Vec::new()),
            sessions,
            gauges,
            series: Mutex::new(series::Series::default()),
        }
    }
}

fn global() -> &'static Telemetry {
    static T: OnceLock<Telemetry> = OnceLock::new();
    T.get_or_init(Telemetry::new)
}

/// Whether collection is on (`QUARRY_TELEMETRY` is not `off`).
pub fn enabled() -> bool {
    global().enabled
}

/// Counts `bytes` of READ data answered from another open's read of the same range
/// (data-path hook of the shared reads).
pub fn smb_shared_read_bytes(bytes: u64) {
    let t = global();
    if t.enabled {
        t.smb_shared_read.inc_by(bytes);
    }
}

/// Counts `bytes` of SMB file data moved in `direction` (data-path hook).
pub fn smb_bytes(direction: Direction, bytes: u64) {
    let t = global();
    if !t.enabled {
        return;
    }
    let c = match direction {
        Direction::Read => &t.smb.read,
        Direction::Write => &t.smb.written,
    };
    c.fetch_add(bytes, Ordering::Relaxed);
}

/// Counts `bytes` of NVMe block data moved in `direction` (data-path hook).
pub fn nvme_bytes(direction: Direction, bytes: u64) {
    let t = global();
    if !t.enabled {
        return;
    }
    match direction {
        Direction::Read => {
            t.nvme_read.inc_by(bytes);
            t.nvme.read.fetch_add(bytes, Ordering::Relaxed);
        }
        Direction::Write => {
            t.nvme_written.inc_by(bytes);
            t.nvme.written.fetch_add(bytes, Ordering::Relaxed);
        }
    }
}

/// The counters of share `name`, created on first use (called at tree connect, never per
/// request).
pub fn share_ops(name: &str) -> Arc<ShareOps> {
    let t = global();
    let key = name.to_lowercase();
    let mut shares = t.shares.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = shares.get(&key) {
        return s.clone();
    }
    let counter = |family: &Family<ShareOpLabels, Counter>, op: OpKind| {
        family
            .get_or_create(&ShareOpLabels {
                share: name.to_string(),
                op: op.name().into(),
            })
            .clone()
    };
    let bytes = |d: Direction| {
        t.share_bytes
            .get_or_create(&ShareDirectionLabels {
                share: name.to_string(),
                direction: d.label().into(),
            })
            .clone()
    };
    let ops = Arc::new(ShareOps {
        name: name.to_string(),
        read: bytes(Direction::Read),
        written: bytes(Direction::Write),
        ops: OpKind::ALL.map(|op| counter(&t.share_ops, op)),
        errors: OpKind::ALL.map(|op| counter(&t.share_errors, op)),
    });
    shares.insert(key, ops.clone());
    ops
}

/// Records one finished SMB request on `share` (data-path hook); returns whether it
/// failed, for the caller's per-client counters.
pub fn smb_op(share: &ShareOps, op: OpKind, bytes: u64, elapsed: Duration, status: u32) -> bool {
    let t = global();
    let failed = quarry_smb::proto::status::is_error(status);
    if !t.enabled {
        return failed;
    }
    let i = op.index();
    if let Some(ops) = share.ops.get(i) {
        ops.inc();
    }
    t.smb.ops.fetch_add(1, Ordering::Relaxed);
    if failed {
        if let Some(errors) = share.errors.get(i) {
            errors.inc();
        }
        t.smb.errors.fetch_add(1, Ordering::Relaxed);
    }
    match op {
        OpKind::Read if bytes > 0 => {
            share.read.inc_by(bytes);
        }
        OpKind::Write if bytes > 0 => {
            share.written.inc_by(bytes);
        }
        _ => {}
    }
    if let Some(h) = smb_latency(op) {
        h.observe(elapsed);
    }
    failed
}

/// The latency histogram of an SMB request family, if it has one ([`SMB_TIMED`]).
pub fn smb_latency(op: OpKind) -> Option<&'static LatencyHistogram> {
    let i = SMB_TIMED.iter().position(|o| *o == op)?;
    global().smb_latency.get(i)
}

/// The latency histogram of NVMe reads or writes.
pub fn nvme_latency(kind: IoKind) -> Option<&'static LatencyHistogram> {
    let t = global();
    match kind {
        IoKind::Read => Some(&t.nvme_latency_read),
        IoKind::Write => Some(&t.nvme_latency_write),
        IoKind::Other => None,
    }
}

/// Records one finished NVMe storage command (data-path hook).
pub fn nvme_io(kind: IoKind, elapsed: Duration, ok: bool) {
    let t = global();
    if !t.enabled {
        return;
    }
    t.nvme.ops.fetch_add(1, Ordering::Relaxed);
    if !ok {
        t.nvme.errors.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(h) = nvme_latency(kind) {
        h.observe(elapsed);
    }
}

/// Starts reporting the NVMe counters of `volume` (called when the NVMe service opens
/// a volume file; the counters are read at scrape time).
pub fn track_volume(volume: &str, counters: &Arc<IoCounters>) {
    let t = global();
    let mut v = t.volumes.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|tv| tv.counters.strong_count() > 0);
    v.push(TrackedVolume {
        name: volume.to_string(),
        counters: Arc::downgrade(counters),
        synced: [0; 5],
    });
}

/// Copies the NVMe volume counters into the metric families (differences since the last
/// copy, so totals survive a volume file being reopened) and drops closed volumes.
fn sync_volumes(t: &Telemetry) {
    let mut v = t.volumes.lock().unwrap_or_else(|p| p.into_inner());
    v.retain_mut(|tv| {
        let Some(c) = tv.counters.upgrade() else {
            return false;
        };
        let now = [
            c.bytes_read.load(Ordering::Relaxed),
            c.bytes_written.load(Ordering::Relaxed),
            c.read_commands.load(Ordering::Relaxed),
            c.write_commands.load(Ordering::Relaxed),
            c.media_errors.load(Ordering::Relaxed),
        ];
        let mut d = now;
        for (d, synced) in d.iter_mut().zip(tv.synced) {
            *d = d.saturating_sub(synced);
        }
        tv.synced = now;
        let name = tv.name.clone();
        let bytes = |dir: Direction| {
            t.volume_bytes
                .get_or_create(&VolumeDirectionLabels {
                    volume: name.clone(),
                    direction: dir.label().into(),
                })
                .clone()
        };
        bytes(Direction::Read).inc_by(d[0]);
        bytes(Direction::Write).inc_by(d[1]);
        let ops = |op: &str| {
            t.volume_ops
                .get_or_create(&VolumeOpLabels {
                    volume: name.clone(),
                    op: op.into(),
                })
                .clone()
        };
        ops("read").inc_by(d[2]);
        ops("write").inc_by(d[3]);
        t.volume_errors
            .get_or_create(&VolumeLabels {
                volume: name.clone(),
            })
            .inc_by(d[4]);
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_operations_count_bytes_errors_and_latency() {
        let s = share_ops("TelemetryUnitShare");
        let before = smb_latency(OpKind::Read).unwrap().snapshot().count();
        assert!(!smb_op(
            &s,
            OpKind::Read,
            4096,
            Duration::from_micros(50),
            0
        ));
        assert!(smb_op(
            &s,
            OpKind::Create,
            0,
            Duration::from_micros(20),
            0xC000_0034
        ));
        assert!(!smb_op(
            &s,
            OpKind::QueryDirectory,
            0,
            Duration::from_micros(20),
            0x8000_0006
        ));
        assert_eq!(s.read.get(), 4096);
        assert_eq!(s.ops[OpKind::Read.index()].get(), 1);
        assert_eq!(s.errors[OpKind::Create.index()].get(), 1);
        assert_eq!(s.errors[OpKind::QueryDirectory.index()].get(), 0);
        assert!(smb_latency(OpKind::Read).unwrap().snapshot().count() > before);
        assert!(Arc::ptr_eq(&s, &share_ops("telemetryunitshare")));
    }

    /// On-demand microbenchmark (release mode) of everything telemetry does per SMB
    /// READ/WRITE (protocol bytes, the share's operation/byte counters and latency
    /// histogram, the client's counters) and per NVMe command, single-threaded and with
    /// two threads hitting the same counters; prints ns per request and the share of a
    /// request's server time that is (1 MiB at 1 GB/s = 1 ms; a 4 KiB NVMe read at
    /// 100k IOPS per core = 10 µs):
    /// `cargo test --release -p quarry --lib hook_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark: run on demand with --ignored"]
    fn hook_cost_per_request() {
        const N: u32 = 5_000_000;
        let registry = crate::sessions::SessionRegistry::default();
        let (guard, _cancel) = registry.register(
            crate::sessions::Protocol::Smb,
            "bench".into(),
            "127.0.0.1:1".parse().expect("literal address"),
            String::new(),
        );
        let client = guard.counters();
        let share = share_ops("hookbench");
        let smb = |n: u32| {
            for i in 0..n {
                smb_bytes(Direction::Read, 1 << 20);
                let failed = smb_op(
                    &share,
                    OpKind::Read,
                    1 << 20,
                    Duration::from_nanos(u64::from(i % 4096) * 250),
                    0,
                );
                client.op(failed);
            }
        };
        let nvme = |n: u32| {
            for i in 0..n {
                nvme_bytes(Direction::Read, 4096);
                nvme_io(
                    IoKind::Read,
                    Duration::from_nanos(u64::from(i % 4096) * 25),
                    true,
                );
                client.op(false);
            }
        };
        let time = |f: &(dyn Fn(u32) + Sync), threads: u32| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| f(N));
                }
            });
            start.elapsed().as_nanos() as f64 / f64::from(N)
        };
        smb(N / 10);
        for (name, f, request_ns) in [
            ("SMB READ 1 MiB", &smb as &(dyn Fn(u32) + Sync), 1_000_000.0),
            ("NVMe read 4 KiB", &nvme as &(dyn Fn(u32) + Sync), 10_000.0),
        ] {
            for threads in [1, 2] {
                let ns = time(f, threads);
                println!(
                    "{name}: {threads} thread(s): {ns:.1} ns per request = {:.4}% of a {:.0} µs request",
                    ns / request_ns * 100.0,
                    request_ns / 1000.0
                );
            }
        }
    }

    #[test]
    fn volume_counters_survive_a_reopen() {
        let t = global();
        let first = Arc::new(IoCounters::default());
        track_volume("unitvol", &first);
        IoCounters::add(&first.bytes_read, 100);
        sync_volumes(t);
        drop(first);
        let second = Arc::new(IoCounters::default());
        track_volume("unitvol", &second);
        IoCounters::add(&second.bytes_read, 30);
        sync_volumes(t);
        let c = t.volume_bytes.get_or_create(&VolumeDirectionLabels {
            volume: "unitvol".into(),
            direction: "read".into(),
        });
        assert_eq!(c.get(), 130);
    }
}
