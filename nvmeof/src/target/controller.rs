//! The target (controller registry + configuration) and the per-controller state shared
//! by a controller's admin and I/O queues.
//!
//! Locking: the registry and each controller's admin state sit behind mutexes that only
//! Connect, admin commands and configuration changes take. The I/O data path reads an
//! `Arc` snapshot of the subsystem cached per queue and touches only atomics.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::config::{ConfigSource, IoExecutor, SubsystemConfig, TargetConfig, TargetIdentity};
use super::limits::*;

/// Receives a controller's traffic and tells it when an admin disconnected it.
/// Why: the appliance lists live NVMe controllers with their byte counts.
pub trait SessionObserver: Send + Sync {
    /// Bytes read by the host.
    fn bytes_read(&self, n: u64);
    /// Bytes written by the host.
    fn bytes_written(&self, n: u64);
    /// Whether an administrator asked to drop this controller.
    fn is_cancelled(&self) -> bool;
    /// A storage command finished after `elapsed` (from all its data being received to
    /// its completion), successfully or not. Why: I/O latency histograms. Must be cheap
    /// (atomics); the default ignores it.
    fn io_completed(&self, _kind: IoKind, _elapsed: std::time::Duration, _ok: bool) {}
}

/// The storage command families latency is reported for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// Read.
    Read,
    /// Write (including Write Zeroes).
    Write,
    /// Flush and Dataset Management.
    Other,
}

impl IoKind {
    /// The family of `op`.
    pub fn of(op: &super::io::BlockOp) -> IoKind {
        use super::io::BlockOp;
        match op {
            BlockOp::Read { .. } => IoKind::Read,
            BlockOp::Write { .. } | BlockOp::WriteZeroes { .. } => IoKind::Write,
            _ => IoKind::Other,
        }
    }
}

/// Creates a [`SessionObserver`] for each new controller.
pub trait SessionHooks: Send + Sync {
    /// Called once per admin-queue Connect that created a controller.
    fn controller_created(
        &self,
        peer: &str,
        hostnqn: &str,
        subnqn: &str,
        cntlid: u16,
    ) -> Arc<dyn SessionObserver>;
}

/// What a controller serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerKind {
    /// The discovery controller (no namespaces, discovery log).
    Discovery,
    /// An I/O controller of an NVM subsystem.
    Io,
}

/// An asynchronous event waiting for an AER command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Completion DW0 (type, info, log page).
    pub dw0: u32,
}

/// AEN: Notice type, Namespace Attribute Changed, log page Changed Namespace List.
pub const AEN_NS_CHANGED: AsyncEvent = AsyncEvent {
    // Type 2 (notice) | info 0x00 (namespace attribute changed) << 8 | LID 0x04 << 16.
    dw0: 0x02 | (0x04 << 16),
};

/// Admin-visible controller state, changed only by admin commands and config updates.
#[derive(Debug, Default)]
pub struct AdminState {
    /// Controller Configuration register.
    pub cc: u32,
    /// Controller Status register.
    pub csts: u32,
    /// Keep alive timeout in ms (0 = disabled).
    pub kato_ms: u32,
    /// Async event configuration (Set Features 0x0B).
    pub aen_config: u32,
    /// Volatile write cache enabled.
    pub write_cache: bool,
    /// I/O queues granted via Number of Queues (0's based is not used here: a count).
    pub io_queues_granted: Option<u16>,
    /// I/O queue IDs currently connected.
    pub io_queues: BTreeSet<u16>,
    /// CIDs of outstanding AER commands.
    pub aer_cids: Vec<u16>,
    /// Events waiting for an AER.
    pub events: Vec<AsyncEvent>,
    /// Namespace attribute notices are masked until the changed list is read.
    pub ns_event_masked: bool,
    /// NSIDs changed since the log was last read.
    pub changed_nsids: BTreeSet<u32>,
}

/// The controller's Error Information log: newest last, bounded.
#[derive(Debug, Default)]
pub struct ErrorLog {
    /// Errors recorded over the controller's life.
    pub count: u64,
    /// The most recent entries.
    pub entries: VecDeque<crate::spec::log::ErrorEntry>,
}

/// CC.EN.
pub const CC_EN: u32 = 1;
/// CSTS.RDY.
pub const CSTS_RDY: u32 = 1;
/// CSTS.SHST = shutdown complete.
pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;
/// AEN config bit: namespace attribute notices.
pub const AEN_CFG_NS_ATTR: u32 = 1 << 8;

/// A controller: created by an admin-queue Connect, shared by its queues.
pub struct Controller {
    /// Controller ID.
    pub cntlid: u16,
    /// Discovery or I/O.
    pub kind: ControllerKind,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN from Connect.
    pub hostnqn: String,
    /// Host identifier from Connect.
    pub hostid: [u8; 16],
    admin: Mutex<AdminState>,
    last_activity_ms: AtomicU64,
    errors: Mutex<ErrorLog>,
    ready: AtomicBool,
    dead: AtomicBool,
    waker: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    observer: Option<Arc<dyn SessionObserver>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("cntlid", &self.cntlid)
            .field("subnqn", &self.subnqn)
            .field("hostnqn", &self.hostnqn)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another queue panicked mid-update of plain data;
    // keep serving rather than cascading the panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Controller {
    /// Locks the admin state (admin queue and config updates only).
    pub fn admin(&self) -> MutexGuard<'_, AdminState> {
        lock(&self.admin)
    }

    /// Records host traffic for keep-alive accounting (any command counts).
    pub fn touch(&self, now_ms: u64) {
        self.last_activity_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Whether the keep-alive timer expired at `now_ms`. Why a grace factor: the host
    /// sends Keep Alive at KATO/2 on a busy TCG guest; nvmet also allows slack.
    pub fn keep_alive_expired(&self, now_ms: u64) -> bool {
        let kato = u64::from(self.admin().kato_ms);
        if kato == 0 {
            return false;
        }
        let last = self.last_activity_ms.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) > kato + KATO_GRACE_MS
    }

    /// Records a failed command in the Error Information log (only failures take
    /// this lock, never the successful data path).
    pub fn log_error(&self, sqid: u16, cid: u16, status: u16, nsid: u32, lba: u64) {
        let mut e = lock(&self.errors);
        e.count += 1;
        let entry = crate::spec::log::ErrorEntry {
            error_count: e.count,
            sqid,
            cid,
            status,
            lba,
            nsid,
        };
        if e.entries.len() >= ERROR_LOG_ENTRIES {
            e.entries.pop_front();
        }
        e.entries.push_back(entry);
    }

    /// The Error Information log page (newest first) and the lifetime error count.
    pub fn error_log(&self) -> (Vec<u8>, u64) {
        let e = lock(&self.errors);
        let len = ERROR_LOG_ENTRIES * crate::spec::log::ERROR_ENTRY_LEN;
        let mut b = Vec::with_capacity(len);
        for entry in e.entries.iter().rev().take(ERROR_LOG_ENTRIES) {
            b.extend_from_slice(&entry.encode());
        }
        b.resize(len, 0);
        (b, e.count)
    }

    /// CSTS.RDY as an atomic, so I/O queues check it without the admin lock.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Publishes CSTS.RDY (called with the admin state updated).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the controller was torn down; its queues must close.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
            || self.observer.as_ref().is_some_and(|o| o.is_cancelled())
    }

    /// Marks the controller dead and wakes its admin queue.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Release);
        self.wake();
    }

    /// Installs the function that wakes the admin queue's task (events, teardown).
    pub fn set_waker(&self, w: Arc<dyn Fn() + Send + Sync>) {
        *lock(&self.waker) = Some(w);
    }

    fn wake(&self) {
        let w = lock(&self.waker).clone();
        if let Some(w) = w {
            w();
        }
    }

    /// Notes namespaces that changed and queues a notice if the host enabled them.
    pub fn namespaces_changed(&self, nsids: &[u32]) {
        let mut a = self.admin();
        a.changed_nsids.extend(nsids.iter().copied());
        if a.aen_config & AEN_CFG_NS_ATTR != 0
            && !a.ns_event_masked
            && a.events.len() < MAX_PENDING_EVENTS
        {
            a.ns_event_masked = true;
            a.events.push(AEN_NS_CHANGED);
        }
        drop(a);
        self.wake();
    }

    /// Reports a storage command's latency to the session observer.
    pub fn io_completed(&self, kind: IoKind, elapsed: std::time::Duration, ok: bool) {
        if let Some(o) = &self.observer {
            o.io_completed(kind, elapsed, ok);
        }
    }

    /// Reports host traffic to the session observer.
    pub fn account(&self, read: u64, written: u64) {
        if let Some(o) = &self.observer {
            if read > 0 {
                o.bytes_read(read);
            }
            if written > 0 {
                o.bytes_written(written);
            }
        }
    }
}

/// Why a Connect was refused; mapped to Connect status codes by the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// A field of the Connect command or data is invalid (`data`: in the data).
    #[error("invalid Connect parameter at byte {offset} (in data: {data})")]
    InvalidParam {
        /// Field offset (IPO).
        offset: u16,
        /// Whether the offset is in the Connect data (IATTR).
        data: bool,
    },
    /// The host NQN is not allowed.
    #[error("host not allowed")]
    InvalidHost,
    /// No controller ID is free.
    #[error("controller busy")]
    Busy,
}

/// The target: configuration snapshot plus every live controller.
pub struct Target {
    config_gen: AtomicU64,
    config: Mutex<Arc<TargetConfig>>,
    controllers: Mutex<HashMap<u16, Arc<Controller>>>,
    next_cntlid: Mutex<u16>,
    /// Reported identity.
    pub identity: TargetIdentity,
    hooks: Option<Arc<dyn SessionHooks>>,
    discovery_genctr: AtomicU64,
    source: Mutex<Option<Arc<dyn ConfigSource>>>,
    executor: Mutex<Option<Arc<dyn IoExecutor>>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("config_gen", &self.config_gen)
            .finish()
    }
}

impl Target {
    /// A target serving `config`.
    pub fn new(
        config: TargetConfig,
        identity: TargetIdentity,
        hooks: Option<Arc<dyn SessionHooks>>,
    ) -> Arc<Self> {
        Arc::new(Target {
            config_gen: AtomicU64::new(1),
            config: Mutex::new(Arc::new(config)),
            controllers: Mutex::new(HashMap::new()),
            next_cntlid: Mutex::new(1),
            identity,
            hooks,
            discovery_genctr: AtomicU64::new(1),
            source: Mutex::new(None),
            executor: Mutex::new(None),
        })
    }

    /// Installs the executor the transport hands storage requests to (else tokio's
    /// blocking pool). Set it before serving: queues pick it up when they start.
    pub fn set_executor(&self, executor: Arc<dyn IoExecutor>) {
        *lock(&self.executor) = Some(executor);
    }

    /// The installed storage executor, if any.
    pub fn executor(&self) -> Option<Arc<dyn IoExecutor>> {
        lock(&self.executor).clone()
    }

    /// Installs the configuration source consulted by [`Target::refresh`].
    pub fn set_source(&self, source: Arc<dyn ConfigSource>) {
        *lock(&self.source) = Some(source);
    }

    /// Whether a configuration source is installed (the transport then refreshes
    /// before admin Connects).
    pub fn has_source(&self) -> bool {
        lock(&self.source).is_some()
    }

    /// Asks the source for a newer configuration and applies it. Blocking.
    pub fn refresh(&self) -> Result<(), String> {
        let Some(src) = lock(&self.source).clone() else {
            return Ok(());
        };
        if let Some(cfg) = src.load_if_changed()? {
            self.update_config(cfg);
        }
        Ok(())
    }

    /// Configuration generation; queues refresh their cached snapshot when it moves.
    pub fn config_generation(&self) -> u64 {
        self.config_gen.load(Ordering::Acquire)
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<TargetConfig> {
        lock(&self.config).clone()
    }

    /// Discovery log generation counter.
    pub fn discovery_genctr(&self) -> u64 {
        self.discovery_genctr.load(Ordering::Relaxed)
    }

    /// Replaces the configuration. Controllers whose subsystem gained, lost or resized
    /// namespaces get a Namespace Attribute Changed notice; controllers whose subsystem
    /// vanished or no longer allows their host are torn down.
    pub fn update_config(&self, new: TargetConfig) {
        let new = Arc::new(new);
        let old = std::mem::replace(&mut *lock(&self.config), new.clone());
        self.config_gen.fetch_add(1, Ordering::AcqRel);
        self.discovery_genctr.fetch_add(1, Ordering::Relaxed);
        let ctrls: Vec<Arc<Controller>> = lock(&self.controllers).values().cloned().collect();
        for c in ctrls {
            if c.kind != ControllerKind::Io {
                continue;
            }
            let Some(ns) = new.subsystem(&c.subnqn) else {
                c.kill();
                continue;
            };
            if !ns.allows(&c.hostnqn) {
                c.kill();
                continue;
            }
            let changed = changed_nsids(old.subsystem(&c.subnqn), ns);
            if !changed.is_empty() {
                c.namespaces_changed(&changed);
            }
        }
    }

    /// Creates a controller for an admin-queue Connect.
    #[allow(clippy::too_many_arguments)]
    pub fn create_controller(
        &self,
        subnqn: &str,
        hostnqn: &str,
        hostid: [u8; 16],
        requested_cntlid: u16,
        kato_ms: u32,
        now_ms: u64,
        peer: &str,
    ) -> Result<Arc<Controller>, ConnectError> {
        let kind = if subnqn == crate::spec::DISCOVERY_NQN {
            ControllerKind::Discovery
        } else {
            let cfg = self.config();
            let sub = cfg.subsystem(subnqn).ok_or(ConnectError::InvalidParam {
                offset: 256,
                data: true,
            })?;
            if !sub.allows(hostnqn) {
                return Err(ConnectError::InvalidHost);
            }
            ControllerKind::Io
        };
        if requested_cntlid != DYNAMIC_CNTLID {
            return Err(ConnectError::InvalidParam {
                offset: 16,
                data: true,
            });
        }
        let mut map = lock(&self.controllers);
        if map.len() >= MAX_CONTROLLERS {
            return Err(ConnectError::Busy);
        }
        let cntlid = {
            let mut next = lock(&self.next_cntlid);
            let mut id = *next;
            let mut tries = 0u32;
            while map.contains_key(&id) {
                id = if id >= MAX_CNTLID { 1 } else { id + 1 };
                tries += 1;
                if tries > u32::from(MAX_CNTLID) {
                    return Err(ConnectError::Busy);
                }
            }
            *next = if id >= MAX_CNTLID { 1 } else { id + 1 };
            id
        };
        let observer = self
            .hooks
            .as_ref()
            .map(|h| h.controller_created(peer, hostnqn, subnqn, cntlid));
        let ctrl = Arc::new(Controller {
            cntlid,
            kind,
            subnqn: subnqn.to_string(),
            hostnqn: hostnqn.to_string(),
            hostid,
            admin: Mutex::new(AdminState {
                kato_ms,
                write_cache: true,
                ..Default::default()
            }),
            last_activity_ms: AtomicU64::new(now_ms),
            errors: Mutex::new(ErrorLog::default()),
            ready: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            waker: Mutex::new(None),
            observer,
        });
        map.insert(cntlid, ctrl.clone());
        Ok(ctrl)
    }

    /// Finds the controller an I/O-queue Connect names.
    pub fn find_controller(
        &self,
        subnqn: &str,
        hostnqn: &str,
        hostid: &[u8; 16],
        cntlid: u16,
    ) -> Option<Arc<Controller>> {
        let map = lock(&self.controllers);
        let c = map.get(&cntlid)?;
        (c.subnqn == subnqn && c.hostnqn == hostnqn && &c.hostid == hostid && !c.is_dead())
            .then(|| c.clone())
    }

    /// Tears a controller down (admin queue gone, keep-alive expired, Disconnect).
    pub fn remove_controller(&self, cntlid: u16) {
        if let Some(c) = lock(&self.controllers).remove(&cntlid) {
            c.kill();
        }
    }

    /// Number of live controllers (for tests and metrics).
    pub fn controller_count(&self) -> usize {
        lock(&self.controllers).len()
    }
}

fn changed_nsids(old: Option<&SubsystemConfig>, new: &SubsystemConfig) -> Vec<u32> {
    let mut out = BTreeSet::new();
    let old_ns: Vec<(u32, u64)> = old
        .map(|o| o.namespaces.iter().map(|n| (n.nsid, n.blocks())).collect())
        .unwrap_or_default();
    for n in &new.namespaces {
        if !old_ns.contains(&(n.nsid, n.blocks())) {
            out.insert(n.nsid);
        }
    }
    for (id, _) in &old_ns {
        if new.namespace(*id).is_none() {
            out.insert(*id);
        }
    }
    out.into_iter().collect()
}
