//! The managed btrfs pool: device validation, creation, import at start, health checks
//! (missing or failing devices, btrfs error counters, capacity) that raise events, and the
//! long operations (create, add, remove, replace, scrub) run as jobs.
//!
//! A device counts as *failed* when its node is gone, its size dropped to zero, or its
//! btrfs superblock cannot be read back with `O_DIRECT` (so a drive that vanished or
//! returns errors is noticed even when btrfs itself has not marked it missing yet).

use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use super::btrfs::{self, DeviceErrors, PoolError, QUICK};
use super::devices::{self, BlockDevice, DeviceKind};
use super::{Backend, DirectoryPool};
use crate::db::events::Severity;
use crate::db::pool::{Job, JobState, PoolRecord};
use crate::db::{Actor, Db, DbResult};
use crate::state::{AppState, ConfigChange};

/// btrfs label of every Quarry pool.
pub const LABEL: &str = "quarry";
/// Default health poll interval (`QUARRY_POOL_POLL_SECS` overrides it).
pub const DEFAULT_POLL: Duration = Duration::from_secs(30);
/// Capacity share at which a warning is raised.
pub const CAPACITY_WARN: f64 = 0.85;
/// Data profiles a pool can be created with.
pub const PROFILES: [&str; 5] = ["single", "raid0", "raid1", "raid10", "raid1c3"];

/// How often the health poller runs.
pub fn poll_interval() -> Duration {
    std::env::var("QUARRY_POOL_POLL_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_POLL)
}

/// Loop devices are test devices: accepted only with `QUARRY_ALLOW_LOOP_DEVICES=1`.
pub fn loop_devices_allowed() -> bool {
    std::env::var("QUARRY_ALLOW_LOOP_DEVICES").is_ok_and(|v| v == "1")
}

/// State of one pool device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceState {
    /// Present and readable.
    Online,
    /// btrfs lists it as missing.
    Missing,
    /// Present but gone to zero size or unreadable.
    Failed,
}

/// State of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    /// Every device online.
    #[default]
    Healthy,
    /// Mounted, but a device is missing or failed.
    Degraded,
    /// Not mounted.
    Failed,
    /// Being created.
    Creating,
}

/// One device of the managed pool at the last check.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeviceStatus {
    /// Device node, or `devid:N` for a missing device (what replace takes as `old`).
    pub path: String,
    /// btrfs device id.
    pub devid: u64,
    /// Online, missing or failed.
    pub state: DeviceState,
    /// Size in bytes.
    pub size_bytes: u64,
    /// btrfs error counters since the device joined.
    pub errors: DeviceErrors,
}

/// Result of a health check.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Pool state.
    pub state: PoolState,
    /// Devices.
    pub devices: Vec<DeviceStatus>,
    /// Why the pool is not healthy.
    pub reason: Option<String>,
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> PoolError {
    let context = context.into();
    move |source| PoolError::Io { context, source }
}

/// Whether `path` is the root of a btrfs subvolume (inode 256).
pub fn is_subvolume(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.ino() == 256 && m.is_dir())
}

/// Metadata profile for a data profile over `n` devices, or why it cannot be done.
pub fn profile_args(profile: &str, n: usize) -> Result<(&'static str, &'static str), PoolError> {
    let (data, min, meta): (&'static str, usize, &'static str) = match profile {
        "single" => ("single", 1, if n >= 2 { "raid1" } else { "dup" }),
        "raid0" => ("raid0", 2, "raid1"),
        "raid1" => ("raid1", 2, "raid1"),
        "raid10" => ("raid10", 2, if n >= 3 { "raid1c3" } else { "raid1" }),
        "raid1c3" => ("raid1c3", 3, "raid1c3"),
        other => {
            return Err(PoolError::Invalid(format!(
                "unknown profile {other}; use one of {}",
                PROFILES.join(", ")
            )))
        }
    };
    if n < min {
        return Err(PoolError::Invalid(format!(
            "profile {profile} needs at least {min} devices, {n} given"
        )));
    }
    Ok((data, meta))
}

/// Smallest device count a profile keeps working with (for device removal).
fn min_devices(profile: &str) -> usize {
    match profile {
        "single" => 1,
        "raid1c3" => 3,
        _ => 2,
    }
}

/// Checks that every path is a discovered block device nobody uses: not mounted, not
/// partitioned, not held, not in the pool, and (unless `force`) without any file system
/// or partition table signature `blkid` recognises.
pub fn validate_new_devices(
    paths: &[String],
    force: bool,
    in_pool: &[String],
) -> Result<Vec<BlockDevice>, PoolError> {
    if paths.is_empty() {
        return Err(PoolError::Invalid("no devices given".into()));
    }
    let found = devices::discover_system();
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        if paths.iter().take(i).any(|q| q == p) {
            return Err(PoolError::Invalid(format!("{p} is listed twice")));
        }
        let Some(d) = found.iter().find(|d| &d.path == p) else {
            return Err(PoolError::Invalid(format!(
                "{p} is not a block device this appliance discovered (see GET /api/v1/devices)"
            )));
        };
        if d.kind == DeviceKind::Loop && !loop_devices_allowed() {
            return Err(PoolError::Invalid(format!(
                "{p} is a loop device; loop devices are for tests only"
            )));
        }
        if in_pool.contains(p) {
            return Err(PoolError::Conflict(format!("{p} is already in the pool")));
        }
        if let Some(why) = devices::busy_reason(d) {
            return Err(PoolError::Conflict(format!(
                "{why}; it cannot join the pool"
            )));
        }
        if !force {
            if let Some(sig) = signature(p)? {
                return Err(PoolError::Conflict(format!(
                    "{p} holds {sig}; pass \"force\": true to overwrite it"
                )));
            }
        }
        out.push(d.clone());
    }
    Ok(out)
}

/// What `blkid -p` recognises on a device (file system or partition table), if anything.
fn signature(dev: &str) -> Result<Option<String>, PoolError> {
    let (ok, out, err, status) = btrfs::run_status("blkid", &["-p", "-o", "export", dev], QUICK)?;
    if !ok {
        // Exit 2: nothing found. Anything else is a real failure.
        if status.ends_with('2') {
            return Ok(None);
        }
        return Err(PoolError::Failed {
            command: format!("blkid -p -o export {dev}"),
            status,
            stderr: err.trim().to_string(),
        });
    }
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.to_string()))
    };
    Ok(Some(match (field("TYPE="), field("PTTYPE=")) {
        (Some(t), _) => format!("a {t} file system"),
        (None, Some(p)) => format!("a {p} partition table"),
        _ => "a signature".into(),
    }))
}

fn mountinfo() -> String {
    fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

/// The block devices holding a member of the btrfs file system `uuid`, probed afresh
/// (`blkid -c /dev/null`: a cached answer can name a device that now holds something else).
pub fn member_devices(uuid: &str) -> Result<Vec<String>, PoolError> {
    let token = format!("UUID={uuid}");
    let (ok, out, err, status) = btrfs::run_status(
        "blkid",
        &["-c", "/dev/null", "-t", &token, "-o", "device"],
        QUICK,
    )?;
    if !ok && !status.ends_with('2') {
        return Err(PoolError::Failed {
            command: format!("blkid -t {token}"),
            status,
            stderr: err.trim().to_string(),
        });
    }
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// Mounts the pool `uuid` on `mnt` unless it is mounted there, naming every member
/// device found (`-o device=`) so the kernel's device registry cannot be stale; falls
/// back to a degraded mount when a device is missing. Returns whether it is degraded.
pub fn mount(uuid: &str, mnt: &Path) -> Result<bool, PoolError> {
    if btrfs::is_btrfs_mountpoint(&mountinfo(), mnt) {
        return Ok(false);
    }
    fs::create_dir_all(mnt).map_err(io_err(format!("creating {}", mnt.display())))?;
    let members = member_devices(uuid)?;
    let Some(first) = members.first() else {
        return Err(PoolError::Conflict(format!(
            "no device holding the pool {uuid} was found"
        )));
    };
    let mut scan = vec!["device", "scan"];
    scan.extend(members.iter().map(String::as_str));
    let _ = btrfs::run("btrfs", &scan, QUICK);
    let devices = members
        .iter()
        .map(|d| format!("device={d}"))
        .collect::<Vec<_>>()
        .join(",");
    let m = mnt.to_string_lossy();
    match btrfs::run("mount", &["-t", "btrfs", "-o", &devices, first, &m], QUICK) {
        Ok(_) => Ok(false),
        Err(first_err) => {
            tracing::warn!(error = %first_err, "mounting the pool failed; trying a degraded mount");
            let opts = format!("{devices},degraded");
            btrfs::run("mount", &["-t", "btrfs", "-o", &opts, first, &m], QUICK).map(|_| true)
        }
    }
}

/// Creates the btrfs file system over `devs`, mounts it on the pool root and creates the
/// `shares` and `volumes` subvolumes. Blocking.
pub fn create_fs(
    root: &Path,
    devs: &[String],
    profile: &str,
    force: bool,
) -> Result<PoolRecord, PoolError> {
    let (data, meta) = profile_args(profile, devs.len())?;
    for d in devs {
        if force {
            btrfs::run("wipefs", &["-a", d], QUICK)?;
        }
    }
    let mut args = vec!["-f", "-L", LABEL, "-d", data, "-m", meta];
    args.extend(devs.iter().map(String::as_str));
    let out = btrfs::run("mkfs.btrfs", &args, btrfs::LONG)?;
    let uuid = btrfs::parse_mkfs_uuid(&out)
        .ok_or_else(|| PoolError::Invalid("mkfs.btrfs printed no UUID".into()))?;
    for sub in ["shares", "volumes"] {
        // The directory pool's empty directories are hidden by the mount; remove them so
        // nothing is left behind beneath it.
        let _ = fs::remove_dir(root.join(sub));
    }
    mount(&uuid, root)?;
    for sub in ["shares", "volumes"] {
        let p = root.join(sub);
        if !p.exists() {
            let ps = p.to_string_lossy();
            btrfs::run("btrfs", &["subvolume", "create", &ps], QUICK)?;
        }
    }
    Ok(PoolRecord {
        uuid,
        label: LABEL.into(),
        profile: profile.into(),
        created_at: crate::db::now(),
    })
}

/// Reads a device's primary btrfs superblock with `O_DIRECT` and checks its magic.
fn probe(dev: &str) -> Result<(), String> {
    let name = dev.trim_start_matches("/dev/");
    let size = fs::read_to_string(format!("/sys/class/block/{name}/size"))
        .map_err(|_| format!("{dev} is gone"))?;
    if size.trim() == "0" {
        return Err(format!("{dev} has no capacity left (medium gone)"));
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .map_err(|e| format!("{dev} cannot be opened: {e}"))?;
    // O_DIRECT wants an aligned buffer: take the 4 KiB-aligned window of a larger one.
    let mut buf = vec![0u8; 8192];
    let skip = buf.as_ptr().align_offset(4096);
    let window = buf
        .get_mut(skip..skip + 4096)
        .ok_or_else(|| "buffer alignment".to_string())?;
    let n = f
        .read_at(window, 64 * 1024)
        .map_err(|e| format!("{dev} cannot be read: {e}"))?;
    if n < 0x48 || window.get(0x40..0x48) != Some(&b"_BHRfS_M"[..]) {
        return Err(format!("{dev} no longer holds the pool's superblock"));
    }
    Ok(())
}

/// Checks the mounted pool: devices, their error counters, missing devices. Blocking.
pub fn check(root: &Path) -> Health {
    if !btrfs::is_btrfs_mountpoint(&mountinfo(), root) {
        return Health {
            state: PoolState::Failed,
            devices: Vec::new(),
            reason: Some("the pool is not mounted".into()),
        };
    }
    let r = root.to_string_lossy();
    let show = btrfs::run("btrfs", &["filesystem", "show", "--raw", &r], QUICK)
        .ok()
        .and_then(|t| btrfs::parse_filesystem_show(&t))
        .unwrap_or_default();
    let stats = btrfs::run("btrfs", &["device", "stats", &r], QUICK)
        .map(|t| btrfs::parse_device_stats(&t))
        .unwrap_or_default();
    let mut reasons = Vec::new();
    let devices: Vec<DeviceStatus> = show
        .devices
        .iter()
        .map(|d| {
            let path = d
                .path
                .clone()
                .unwrap_or_else(|| format!("devid:{}", d.devid));
            let errors = stats
                .iter()
                .find(|(p, _)| *p == path || *p == format!("devid:{}", d.devid))
                .map(|(_, e)| *e)
                .unwrap_or_default();
            let state = match &d.path {
                None => {
                    reasons.push(format!("device {} is missing", d.devid));
                    DeviceState::Missing
                }
                Some(p) => match probe(p) {
                    Ok(()) => DeviceState::Online,
                    Err(why) => {
                        reasons.push(why);
                        DeviceState::Failed
                    }
                },
            };
            DeviceStatus {
                path,
                devid: d.devid,
                state,
                size_bytes: d.size,
                errors,
            }
        })
        .collect();
    if show.missing && reasons.is_empty() {
        reasons.push("btrfs reports missing devices".into());
    }
    let state = if reasons.is_empty() {
        PoolState::Healthy
    } else {
        PoolState::Degraded
    };
    Health {
        state,
        devices,
        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
    }
}

/// Raises or resolves the events a health check implies.
pub fn raise_events(db: &Db, health: &Health, capacity: Option<super::Capacity>) -> DbResult<()> {
    match health.state {
        PoolState::Healthy | PoolState::Creating => {
            db.resolve_condition("pool.degraded", "pool")?;
            db.resolve_condition("pool.failed", "pool")?;
        }
        PoolState::Degraded => {
            let why = health.reason.clone().unwrap_or_default();
            db.raise_condition(
                Severity::Critical,
                "pool.degraded",
                "pool",
                &format!("the pool is degraded: {why}"),
            )?;
        }
        PoolState::Failed => {
            let why = health.reason.clone().unwrap_or_default();
            db.raise_condition(
                Severity::Critical,
                "pool.failed",
                "pool",
                &format!("the pool is unavailable: {why}"),
            )?;
        }
    }
    for d in &health.devices {
        let total = d.errors.total();
        if total > 0 {
            db.raise_condition(
                Severity::Warning,
                "device.errors",
                &d.path,
                &format!(
                    "{} has btrfs errors: {} write, {} read, {} flush, {} corruption, {} generation",
                    d.path,
                    d.errors.write_io_errs,
                    d.errors.read_io_errs,
                    d.errors.flush_io_errs,
                    d.errors.corruption_errs,
                    d.errors.generation_errs
                ),
            )?;
        } else {
            db.resolve_condition("device.errors", &d.path)?;
        }
    }
    if let Some(c) = capacity.filter(|c| c.size_bytes > 0) {
        let used = c.used_bytes as f64 / c.size_bytes as f64;
        if used >= CAPACITY_WARN {
            db.raise_condition(
                Severity::Warning,
                "pool.capacity",
                "pool",
                &format!("the pool is {:.0} % full", used * 100.0),
            )?;
        } else {
            db.resolve_condition("pool.capacity", "pool")?;
        }
    }
    Ok(())
}

/// Discovers devices and records their identity and (for NVMe) SMART health; raises
/// `device.health` for critical warnings, media errors or wear. Blocking.
pub fn poll_devices(db: &Db) -> DbResult<()> {
    for mut d in devices::discover_system() {
        let mut health = serde_json::json!({});
        if let Some(ctrl) = d.controller.clone() {
            let node = format!("/dev/{ctrl}");
            // Identity from Identify Controller where sysfs left a field empty.
            if d.model.is_empty() || d.serial.is_empty() || d.firmware.is_empty() {
                if let Ok(id) = super::nvme_admin::read_identity(Path::new(&node)) {
                    for (field, value) in [
                        (&mut d.model, id.model),
                        (&mut d.serial, id.serial),
                        (&mut d.firmware, id.firmware),
                    ] {
                        if field.is_empty() {
                            *field = value;
                        }
                    }
                }
            }
            match super::nvme_admin::read_smart(Path::new(&node)) {
                Ok(h) => {
                    let bad = h.critical_warning != 0
                        || h.media_errors > 0
                        || h.percentage_used >= 90
                        || h.available_spare_pct < h.spare_threshold_pct;
                    if bad {
                        db.raise_condition(
                            Severity::Warning,
                            "device.health",
                            &d.path,
                            &format!(
                                "{}: critical warning {:#x}, {} media errors, {} % used, {} % spare",
                                d.path,
                                h.critical_warning,
                                h.media_errors,
                                h.percentage_used,
                                h.available_spare_pct
                            ),
                        )?;
                    } else {
                        db.resolve_condition("device.health", &d.path)?;
                    }
                    health = serde_json::to_value(&h).unwrap_or_default();
                }
                Err(e) => tracing::debug!(device = %d.path, error = %e, "SMART log unreadable"),
            }
        }
        db.upsert_device(&d, &health)?;
    }
    Ok(())
}

/// One health round: check, store, raise events.
pub async fn health_round(state: &AppState) {
    let pool = state.pool.clone();
    if !pool.is_btrfs() {
        return;
    }
    let db = state.db.clone();
    let res = tokio::task::spawn_blocking(move || {
        let h = pool.store_health_of(check);
        let cap = pool.capacity().ok();
        raise_events(&db, &h, cap)
    })
    .await;
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "recording pool health failed"),
        Err(e) => tracing::warn!(error = %e, "pool health check task failed"),
    }
}

/// Polls pool health and device health every [`poll_interval`] (or when kicked).
pub async fn run_poller(
    state: AppState,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let interval = poll_interval();
    loop {
        health_round(&state).await;
        if state.pool.is_btrfs() && state.pool.is_mounted() {
            let (db, pool) = (state.db.clone(), state.pool.clone());
            if let Ok(Err(e)) =
                tokio::task::spawn_blocking(move || run_snapshot_schedules(&db, &pool)).await
            {
                tracing::warn!(error = %e, "running snapshot schedules failed");
            }
            if let Err(e) = run_scrub_schedule(&state).await {
                tracing::warn!(error = %e, "running the scrub schedule failed");
            }
        }
        let db = state.db.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || poll_devices(&db)).await {
            tracing::warn!(error = %e, "recording device health failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(interval) => {}
            _ = state.pool.kick.notified() => {}
        }
    }
}

/// Settings key of the scrub interval in seconds (absent or 0: no scheduled scrub).
pub const SCRUB_INTERVAL_KEY: &str = "pool.scrub_interval_s";

/// Shortest schedule interval the API accepts: 60 s, or `QUARRY_SCHEDULE_MIN_SECS` (tests).
pub fn min_schedule_secs() -> u64 {
    std::env::var("QUARRY_SCHEDULE_MIN_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(60)
}

/// Takes due scheduled snapshots and prunes scheduled snapshots beyond each schedule's
/// `keep`. Blocking.
pub fn run_snapshot_schedules(db: &Db, pool: &DirectoryPool) -> DbResult<()> {
    use crate::db::snapshots::{SnapshotOf, AUTO_PREFIX};
    let now = crate::db::now();
    for sched in db.list_schedules()? {
        if now.saturating_sub(sched.last_run) < sched.interval_s.min(i64::MAX as u64) as i64 {
            continue;
        }
        let of = match (&sched.share, &sched.volume) {
            (Some(s), _) => SnapshotOf::Share(s.clone()),
            (None, Some(v)) => SnapshotOf::Volume(v.clone()),
            _ => continue,
        };
        db.schedule_ran(sched.id, now)?;
        let name = format!(
            "{AUTO_PREFIX}{}",
            crate::api::routes::snapshots::default_name()
        );
        let taken = db.create_snapshot(&Actor::system(), &of, &name, |owner, rel| match &of {
            SnapshotOf::Share(_) => pool.snapshot_share(owner, rel),
            SnapshotOf::Volume(_) => pool.snapshot_volume(owner, rel),
        });
        if let Err(e) = taken {
            tracing::warn!(schedule = sched.id, error = %e, "scheduled snapshot failed");
            db.raise_event(
                Severity::Warning,
                "snapshot.failed",
                &name,
                &format!("scheduled snapshot {name} failed: {e}"),
            )?;
            continue;
        }
        let autos: Vec<_> = db
            .list_snapshots(sched.share.as_deref(), sched.volume.as_deref())?
            .into_iter()
            .filter(|s| s.name.starts_with(AUTO_PREFIX))
            .collect();
        let excess = autos.len().saturating_sub(sched.keep as usize);
        for old in autos.into_iter().take(excess) {
            db.delete_snapshot(&Actor::system(), old.id, |s| {
                pool.delete_snapshot_data(&s.path)
            })?;
        }
    }
    Ok(())
}

/// Starts a scrub job when the scrub interval has passed since the last one.
pub async fn run_scrub_schedule(state: &AppState) -> DbResult<()> {
    let interval = state
        .db
        .call(|db| db.setting(SCRUB_INTERVAL_KEY))
        .await?
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    if interval <= 0 {
        return Ok(());
    }
    let jobs = state
        .db
        .call(|db| db.list_jobs(crate::db::pool::MAX_JOBS_LISTED))
        .await?;
    let last = jobs
        .iter()
        .filter(|j| j.kind == "pool.scrub")
        .map(|j| j.created_at)
        .max();
    if jobs
        .iter()
        .any(|j| j.kind == "pool.scrub" && matches!(j.state, JobState::Queued | JobState::Running))
    {
        return Ok(());
    }
    // Without a previous scrub, the first is due one interval after the pool appeared.
    let since = match last {
        Some(t) => t,
        None => state
            .db
            .call(|db| db.pool_record())
            .await?
            .map(|r| r.created_at)
            .unwrap_or(0),
    };
    if crate::db::now().saturating_sub(since) < interval {
        return Ok(());
    }
    let (pool, db) = (state.pool.clone(), state.db.clone());
    spawn_job(
        state,
        Actor::system(),
        "pool.scrub",
        serde_json::json!({ "scheduled": true }),
        Box::new(move |ctx| scrub(&pool, &db, &ctx)),
    )
    .await
    .map(|_| ())
}

/// Imports the recorded managed pool at start: mounts it (degraded if need be) and
/// switches the pool to it. Blocking.
pub fn import(db: &Db, pool: &DirectoryPool) -> anyhow::Result<()> {
    let Some(rec) = db.pool_record()? else {
        return Ok(());
    };
    pool.set_backend(Backend::Btrfs {
        uuid: rec.uuid.clone(),
        profile: rec.profile.clone(),
    });
    match mount(&rec.uuid, pool.root()) {
        Ok(degraded) => {
            tracing::info!(uuid = %rec.uuid, degraded, "imported the managed pool");
        }
        Err(e) => {
            tracing::error!(uuid = %rec.uuid, error = %e, "importing the managed pool failed");
            let _ = db.raise_condition(
                Severity::Critical,
                "pool.failed",
                "pool",
                &format!("the pool could not be mounted: {e}"),
            );
        }
    }
    pool.store_health_of(check);
    Ok(())
}

/// What a job reports while it runs.
#[derive(Clone)]
pub struct JobCtx {
    db: Db,
    id: i64,
}

impl JobCtx {
    /// Records progress (0..1).
    pub fn progress(&self, p: f64) {
        let _ = self
            .db
            .update_job(self.id, JobState::Running, p, None, None);
    }
}

type JobFn = Box<dyn FnOnce(JobCtx) -> Result<serde_json::Value, PoolError> + Send>;

/// Re-checks a managed pool's health at once, so that a job's effect (a device added,
/// removed, replaced or grown) shows in `GET /pool` by the time the job reports its end,
/// not a poller round later.
fn refresh_health(pool: &DirectoryPool) {
    if pool.is_btrfs() {
        pool.store_health_of(check);
    }
}

/// Records a job and runs `f` on a blocking thread, then refreshes the pool's health
/// before recording how the job ended; the API answers at once with the job.
pub async fn spawn_job(
    state: &AppState,
    actor: Actor,
    kind: &'static str,
    detail: serde_json::Value,
    f: JobFn,
) -> DbResult<Job> {
    let job = state
        .db
        .call(move |db| db.create_job(&actor, kind, detail))
        .await?;
    let (db, id, st) = (state.db.clone(), job.id, state.clone());
    tokio::spawn(async move {
        let _ = db.update_job(id, JobState::Running, 0.0, None, None);
        let ctx = JobCtx { db: db.clone(), id };
        let pool = st.pool.clone();
        let res = tokio::task::spawn_blocking(move || {
            let res = f(ctx);
            refresh_health(&pool);
            res
        })
        .await;
        let db2 = db.clone();
        let _ = tokio::task::spawn_blocking(move || match res {
            Ok(Ok(detail)) => {
                tracing::info!(job = id, kind, "job succeeded");
                db2.update_job(id, JobState::Succeeded, 1.0, None, Some(&detail))
            }
            Ok(Err(e)) => {
                tracing::warn!(job = id, kind, error = %e, "job failed");
                let _ = db2.raise_event(
                    Severity::Warning,
                    "job.failed",
                    kind,
                    &format!("job {id} ({kind}) failed: {e}"),
                );
                db2.update_job(id, JobState::Failed, 0.0, Some(&e.to_string()), None)
            }
            Err(e) => db2.update_job(id, JobState::Failed, 0.0, Some(&e.to_string()), None),
        })
        .await;
        st.pool.kick.notify_one();
    });
    Ok(job)
}

/// Marks jobs a previous process left unfinished. A replace btrfs resumes by itself on
/// mount is followed again; anything else is failed as interrupted.
pub fn recover_jobs(state: &AppState) -> DbResult<()> {
    for job in state.db.unfinished_jobs()? {
        if job.kind == "pool.replace" && state.pool.is_btrfs() {
            let root = state.pool.root().to_path_buf();
            let ctx = JobCtx {
                db: state.db.clone(),
                id: job.id,
            };
            let (db, kick) = (state.db.clone(), state.clone());
            let old = job
                .detail
                .get("old")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            tokio::spawn(async move {
                let pool = kick.pool.clone();
                let res = tokio::task::spawn_blocking(move || {
                    let res = match watch_replace(&root, &ctx) {
                        // Finished before the restart (btrfs only reports the current
                        // mount's replace): done if the old device left the pool.
                        Err(PoolError::Conflict(_))
                            if !check(&root).devices.iter().any(|d| d.path == old) =>
                        {
                            Ok(())
                        }
                        other => other,
                    };
                    refresh_health(&pool);
                    res
                })
                .await;
                let _ = match res {
                    Ok(Ok(())) => db.update_job(job.id, JobState::Succeeded, 1.0, None, None),
                    Ok(Err(e)) => {
                        db.update_job(job.id, JobState::Failed, 0.0, Some(&e.to_string()), None)
                    }
                    Err(e) => {
                        db.update_job(job.id, JobState::Failed, 0.0, Some(&e.to_string()), None)
                    }
                };
                kick.pool.kick.notify_one();
            });
        } else {
            state.db.update_job(
                job.id,
                JobState::Failed,
                job.progress,
                Some("interrupted by an appliance restart"),
                None,
            )?;
        }
    }
    Ok(())
}

fn watch_replace(root: &Path, ctx: &JobCtx) -> Result<(), PoolError> {
    let r = root.to_string_lossy();
    loop {
        let out = btrfs::run("btrfs", &["replace", "status", "-1", &r], QUICK)?;
        match btrfs::parse_replace_status(&out) {
            btrfs::ReplaceStatus::Running(p) => ctx.progress(p),
            btrfs::ReplaceStatus::Finished => return Ok(()),
            btrfs::ReplaceStatus::NeverStarted => {
                return Err(PoolError::Conflict("no replace is running".into()))
            }
            btrfs::ReplaceStatus::Stopped(why) => {
                return Err(PoolError::Conflict(format!("replace stopped: {why}")))
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn pool_paths(pool: &DirectoryPool) -> Vec<String> {
    check(pool.root())
        .devices
        .into_iter()
        .map(|d| d.path)
        .collect()
}

/// Starts `btrfs replace` of `old` (a path or `devid:N`) by `new` and follows it.
pub fn replace(
    pool: &DirectoryPool,
    old: &str,
    new: &str,
    force: bool,
    ctx: &JobCtx,
) -> Result<serde_json::Value, PoolError> {
    let health = check(pool.root());
    let dev = health
        .devices
        .iter()
        .find(|d| d.path == old)
        .ok_or_else(|| PoolError::Invalid(format!("{old} is not a device of the pool")))?;
    let r = pool.root().to_string_lossy().into_owned();
    let devid = dev.devid.to_string();
    let mut args = vec!["replace", "start", "-r"];
    if force {
        args.push("-f");
    }
    args.extend(["-B", devid.as_str(), new, r.as_str()]);
    // `replace start -B` blocks until the copy ends (without -B, btrfs-progs forks and
    // the kernel may not have started yet when it returns); progress comes from
    // `replace status` meanwhile.
    let mut child = std::process::Command::new("btrfs")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| PoolError::Spawn {
            program: "btrfs".into(),
            source,
        })?;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if status.success() {
                    break;
                }
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut stderr);
                }
                return Err(PoolError::Failed {
                    command: format!("btrfs {}", args.join(" ")),
                    status: status.to_string(),
                    stderr: stderr.trim().to_string(),
                });
            }
            Ok(None) => {}
            Err(source) => {
                return Err(PoolError::Spawn {
                    program: "btrfs".into(),
                    source,
                })
            }
        }
        if let Ok(out) = btrfs::run("btrfs", &["replace", "status", "-1", &r], QUICK) {
            if let btrfs::ReplaceStatus::Running(p) = btrfs::parse_replace_status(&out) {
                ctx.progress(p);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // Writes made while mounted degraded may have gone to single-copy chunks: convert
    // anything not in the pool's profiles back ("soft" skips chunks already right).
    if let Backend::Btrfs { profile, .. } = pool.backend() {
        let n = check(pool.root()).devices.len();
        if let Ok((data, meta)) = profile_args(&profile, n) {
            let d = format!("-dconvert={data},soft");
            let m = format!("-mconvert={meta},soft");
            btrfs::run("btrfs", &["balance", "start", &d, &m, &r], btrfs::LONG)?;
        }
    }
    Ok(serde_json::json!({ "old": old, "new": new, "devid": dev.devid }))
}

/// Checks a replace request before its job starts.
pub fn validate_replace(
    pool: &DirectoryPool,
    old: &str,
    new: &str,
    force: bool,
) -> Result<(), PoolError> {
    let paths = pool_paths(pool);
    if !paths.iter().any(|p| p == old) {
        return Err(PoolError::Invalid(format!(
            "{old} is not a device of the pool (missing devices are named devid:N)"
        )));
    }
    validate_new_devices(&[new.to_string()], force, &paths).map(|_| ())
}

/// Checks an add request before its job starts.
pub fn validate_add(pool: &DirectoryPool, new: &str, force: bool) -> Result<(), PoolError> {
    validate_new_devices(&[new.to_string()], force, &pool_paths(pool)).map(|_| ())
}

/// Adds a device and rebalances over it.
pub fn add_device(
    pool: &DirectoryPool,
    new: &str,
    force: bool,
    ctx: &JobCtx,
) -> Result<serde_json::Value, PoolError> {
    let r = pool.root().to_string_lossy().into_owned();
    let mut args = vec!["device", "add"];
    if force {
        args.push("-f");
    }
    args.extend([new, r.as_str()]);
    btrfs::run("btrfs", &args, QUICK)?;
    ctx.progress(0.3);
    btrfs::run(
        "btrfs",
        &["balance", "start", "--full-balance", &r],
        btrfs::LONG,
    )?;
    Ok(serde_json::json!({ "added": new }))
}

/// Grows the pool onto every device's full size (after drives were swapped for larger
/// ones or namespaces grown): `btrfs filesystem resize DEVID:max` per online device.
pub fn expand(pool: &DirectoryPool, ctx: &JobCtx) -> Result<serde_json::Value, PoolError> {
    let r = pool.root().to_string_lossy().into_owned();
    let devices: Vec<DeviceStatus> = check(pool.root())
        .devices
        .into_iter()
        .filter(|d| d.state == DeviceState::Online)
        .collect();
    let before: u64 = devices.iter().map(|d| d.size_bytes).sum();
    for (i, d) in devices.iter().enumerate() {
        let arg = format!("{}:max", d.devid);
        btrfs::run("btrfs", &["filesystem", "resize", &arg, &r], QUICK)?;
        ctx.progress((i + 1) as f64 / devices.len().max(1) as f64);
    }
    let after: u64 = check(pool.root())
        .devices
        .iter()
        .map(|d| d.size_bytes)
        .sum();
    Ok(serde_json::json!({ "raw_bytes_before": before, "raw_bytes_after": after }))
}

/// Checks a remove request before its job starts.
pub fn validate_remove(pool: &DirectoryPool, path: &str) -> Result<(), PoolError> {
    let paths = pool_paths(pool);
    if !paths.iter().any(|p| p == path) {
        return Err(PoolError::Invalid(format!(
            "{path} is not a device of the pool"
        )));
    }
    let profile = match pool.backend() {
        Backend::Btrfs { profile, .. } => profile,
        Backend::Directory => return Err(PoolError::Conflict("no managed pool".into())),
    };
    if paths.len() <= min_devices(&profile) {
        return Err(PoolError::Conflict(format!(
            "profile {profile} cannot lose a device of {}: add one first",
            paths.len()
        )));
    }
    Ok(())
}

/// Removes a device; btrfs migrates its data to the others first.
pub fn remove_device(pool: &DirectoryPool, path: &str) -> Result<serde_json::Value, PoolError> {
    let r = pool.root().to_string_lossy().into_owned();
    let target = path.strip_prefix("devid:").unwrap_or(path);
    let target = if path.starts_with("devid:") {
        "missing"
    } else {
        target
    };
    btrfs::run("btrfs", &["device", "remove", target, &r], btrfs::LONG)?;
    Ok(serde_json::json!({ "removed": path }))
}

/// Scrubs the pool and reports what was found and repaired (raising an event).
pub fn scrub(pool: &DirectoryPool, db: &Db, ctx: &JobCtx) -> Result<serde_json::Value, PoolError> {
    let r = pool.root().to_string_lossy().into_owned();
    let total = raw_used(&r).unwrap_or(0).max(1);
    btrfs::run("btrfs", &["scrub", "start", &r], QUICK)?;
    let status = loop {
        std::thread::sleep(Duration::from_millis(500));
        let out = btrfs::run("btrfs", &["scrub", "status", "-R", &r], QUICK)?;
        let s = btrfs::parse_scrub_status(&out);
        if s.status == "running" {
            ctx.progress(s.bytes_scrubbed as f64 / total as f64);
            continue;
        }
        break s;
    };
    let errors = status.read_errors + status.csum_errors + status.verify_errors;
    let (sev, msg) = if status.uncorrectable_errors > 0 {
        (
            Severity::Critical,
            format!(
                "scrub found {errors} errors: {} repaired, {} unrepairable",
                status.corrected_errors, status.uncorrectable_errors
            ),
        )
    } else if errors > 0 {
        (
            Severity::Warning,
            format!(
                "scrub found {errors} errors and repaired {}",
                status.corrected_errors
            ),
        )
    } else {
        (Severity::Info, "scrub finished without errors".to_string())
    };
    let _ = db.raise_event(sev, "pool.scrub", "pool", &msg);
    if status.status != "finished" {
        return Err(PoolError::Conflict(format!(
            "scrub ended {}",
            status.status
        )));
    }
    Ok(serde_json::json!({
        "status": status.status,
        "bytes_scrubbed": status.bytes_scrubbed,
        "read_errors": status.read_errors,
        "csum_errors": status.csum_errors,
        "verify_errors": status.verify_errors,
        "corrected_errors": status.corrected_errors,
        "uncorrectable_errors": status.uncorrectable_errors,
    }))
}

fn raw_used(root: &str) -> Option<u64> {
    let out = btrfs::run("btrfs", &["filesystem", "usage", "-b", root], QUICK).ok()?;
    out.lines().find_map(|l| {
        let v = l.trim().strip_prefix("Used:")?;
        v.split_whitespace().next()?.parse().ok()
    })
}

/// Creates the managed pool (the `pool.create` job's body) and switches to it.
pub fn create(
    state: &AppState,
    devs: &[String],
    profile: &str,
    force: bool,
) -> Result<serde_json::Value, PoolError> {
    let pool: Arc<DirectoryPool> = state.pool.clone();
    let rec = create_fs(pool.root(), devs, profile, force)?;
    state
        .db
        .record_pool(&Actor::system(), &rec)
        .map_err(|e| PoolError::Conflict(e.to_string()))?;
    pool.set_backend(Backend::Btrfs {
        uuid: rec.uuid.clone(),
        profile: rec.profile.clone(),
    });
    pool.store_health_of(check);
    state.notify(ConfigChange::Shares);
    state.notify(ConfigChange::Volumes);
    Ok(serde_json::json!({ "uuid": rec.uuid, "profile": rec.profile, "devices": devs }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_need_enough_devices() {
        assert!(matches!(
            profile_args("raid1", 1),
            Err(PoolError::Invalid(_))
        ));
        assert_eq!(profile_args("raid1", 2).unwrap(), ("raid1", "raid1"));
        assert_eq!(profile_args("raid10", 4).unwrap(), ("raid10", "raid1c3"));
        assert_eq!(profile_args("single", 1).unwrap(), ("single", "dup"));
        assert!(matches!(
            profile_args("raid5", 4),
            Err(PoolError::Invalid(_))
        ));
    }

    #[test]
    fn health_raises_and_resolves_events() {
        use crate::db::events::EventFilter;
        let db = Db::open_in_memory().unwrap();
        let failing = DeviceStatus {
            path: "/dev/loop9".into(),
            devid: 2,
            state: DeviceState::Failed,
            size_bytes: 1 << 30,
            errors: DeviceErrors {
                write_io_errs: 3,
                ..DeviceErrors::default()
            },
        };
        let degraded = Health {
            state: PoolState::Degraded,
            devices: vec![failing.clone()],
            reason: Some("/dev/loop9 cannot be read".into()),
        };
        let full = crate::pool::Capacity {
            size_bytes: 100,
            used_bytes: 90,
            available_bytes: 10,
        };
        raise_events(&db, &degraded, Some(full)).unwrap();
        raise_events(&db, &degraded, Some(full)).unwrap();
        let open = |db: &Db| {
            db.events(EventFilter::default(), 100, None)
                .unwrap()
                .into_iter()
                .filter(|e| e.resolved_at.is_none())
                .map(|e| e.kind)
                .collect::<Vec<_>>()
        };
        let mut kinds = open(&db);
        kinds.sort();
        assert_eq!(kinds, ["device.errors", "pool.capacity", "pool.degraded"]);
        let healthy = Health {
            state: PoolState::Healthy,
            devices: vec![DeviceStatus {
                state: DeviceState::Online,
                errors: DeviceErrors::default(),
                ..failing
            }],
            reason: None,
        };
        let roomy = crate::pool::Capacity {
            used_bytes: 10,
            available_bytes: 90,
            ..full
        };
        raise_events(&db, &healthy, Some(roomy)).unwrap();
        assert!(open(&db).is_empty());
    }

    #[test]
    fn unknown_devices_are_refused() {
        assert!(matches!(
            validate_new_devices(&["/dev/does-not-exist".into()], false, &[]),
            Err(PoolError::Invalid(_))
        ));
        assert!(matches!(
            validate_new_devices(&[], false, &[]),
            Err(PoolError::Invalid(_))
        ));
    }
}
