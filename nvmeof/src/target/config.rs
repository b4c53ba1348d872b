//! What the target serves: the block storage trait and the configuration snapshot
//! (subsystems, namespaces, allowed hosts) the appliance swaps in when the API changes.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Backing storage of one namespace. Why a trait: the target knows nothing of files or
/// pools; the appliance implements it over volume files (tests over memory).
///
/// Every method may block (it is real I/O): the transport calls them on a blocking
/// pool, never on the reactor. Offsets and lengths are already range-checked against
/// [`BlockDevice::size_bytes`] by the controller.
pub trait BlockDevice: Send + Sync + 'static {
    /// Size of the device in bytes (the namespace is `size / block size` blocks).
    fn size_bytes(&self) -> u64;
    /// Reads exactly `buf.len()` bytes at `offset` (holes read as zeroes). `buf` may hold
    /// another read's bytes on entry (buffers are recycled): an `Ok` must have written
    /// every byte of it.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at `offset`; with `fua` the data is durable when this returns.
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()>;
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Makes `len` bytes at `offset` read as zeroes (allocated or not).
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Releases the storage of `len` bytes at `offset`; they then read as zeroes.
    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()>;
    /// The device as `Any`, so an [`IoExecutor`] supplied by the same code that made the
    /// device can recognise it (e.g. to submit its reads to io_uring). `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Called once with the request and its result when an [`IoExecutor`] finishes it.
pub type IoDone = Box<dyn FnOnce(super::io::IoRequest, io::Result<super::io::IoOutcome>) + Send>;

/// Runs storage requests off the queue's task. Why a trait: the transport must never
/// block its reactor on storage, and how to avoid that (a blocking thread pool, an
/// io_uring ring) is the embedding application's choice. Without one, the transport
/// runs [`super::io::IoRequest::execute`] on tokio's blocking pool.
pub trait IoExecutor: Send + Sync + 'static {
    /// Starts `req`; `done` must be called exactly once, from any thread.
    fn submit(&self, req: super::io::IoRequest, done: IoDone);

    /// A storage engine owned by one queue's task, if this executor offers one: the
    /// queue submits and reaps on its own task, with no hand-off to another thread
    /// and back per request (the cost of [`IoExecutor::submit`] at small block sizes).
    /// `None` (the default) keeps every request on [`IoExecutor::submit`].
    fn queue_io(&self) -> Option<Box<dyn QueueIo>> {
        None
    }
}

/// A finished storage request and its result.
pub type IoFinished = (super::io::IoRequest, io::Result<super::io::IoOutcome>);

/// Storage I/O driven by one queue's task (see [`IoExecutor::queue_io`]). Every
/// submitted request comes back exactly once through [`QueueIo::poll_done`]; dropping
/// the engine with requests in flight must neither block the task for long nor free
/// memory the kernel may still write.
pub trait QueueIo: Send {
    /// Queues `req`; it starts at the next [`QueueIo::flush`] at the latest.
    fn submit(&mut self, req: super::io::IoRequest);
    /// Starts everything queued since the last call (one system call for a turn's
    /// worth of commands).
    fn flush(&mut self);
    /// Moves finished requests into `out`: `Ready` when it moved any, else `Pending`
    /// with `cx`'s waker registered for the next completion.
    fn poll_done(
        &mut self,
        cx: &mut std::task::Context<'_>,
        out: &mut std::collections::VecDeque<IoFinished>,
    ) -> std::task::Poll<()>;
}

/// Per-namespace I/O counters for the SMART log; atomics so queues never lock.
/// The appliance keeps one per volume across configuration reloads.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Bytes read by hosts.
    pub bytes_read: AtomicU64,
    /// Bytes written by hosts.
    pub bytes_written: AtomicU64,
    /// Read commands completed.
    pub read_commands: AtomicU64,
    /// Write commands completed.
    pub write_commands: AtomicU64,
    /// Backing I/O failures.
    pub media_errors: AtomicU64,
}

impl IoCounters {
    /// Adds `v` to a counter (relaxed: these are statistics).
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }
}

/// One namespace of a subsystem.
#[derive(Clone)]
pub struct NamespaceConfig {
    /// Namespace ID (1-based).
    pub nsid: u32,
    /// Namespace UUID (also used to derive the NGUID).
    pub uuid: [u8; 16],
    /// log2 of the logical block size (9 or 12).
    pub lba_shift: u8,
    /// Size in bytes as of this snapshot. Why not ask the device: a resize must be
    /// visible as a difference between two snapshots (that is what raises the notice),
    /// and the device object is shared by both.
    pub size_bytes: u64,
    /// The backing storage.
    pub device: Arc<dyn BlockDevice>,
    /// Counters reported in the SMART log.
    pub counters: Arc<IoCounters>,
    /// A name for logs (the volume name).
    pub label: String,
}

impl std::fmt::Debug for NamespaceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceConfig")
            .field("nsid", &self.nsid)
            .field("label", &self.label)
            .field("size", &self.size_bytes)
            .finish()
    }
}

impl NamespaceConfig {
    /// Number of logical blocks.
    pub fn blocks(&self) -> u64 {
        self.size_bytes.min(self.device.size_bytes()) >> self.lba_shift
    }
}

/// One NVM subsystem.
#[derive(Debug, Clone)]
pub struct SubsystemConfig {
    /// Subsystem NQN.
    pub nqn: String,
    /// Serial number reported in Identify Controller.
    pub serial: String,
    /// Whether any host NQN may connect.
    pub allow_any_host: bool,
    /// Host NQNs allowed when `allow_any_host` is false.
    pub hosts: Vec<String>,
    /// Namespaces, any order.
    pub namespaces: Vec<NamespaceConfig>,
}

impl SubsystemConfig {
    /// Whether `hostnqn` may connect to (and discover) this subsystem.
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }

    /// The namespace with `nsid`, if active.
    pub fn namespace(&self, nsid: u32) -> Option<&NamespaceConfig> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }
}

/// A complete, immutable configuration; replaced as a whole on every change.
#[derive(Debug, Clone, Default)]
pub struct TargetConfig {
    /// Every subsystem.
    pub subsystems: Vec<SubsystemConfig>,
    /// Every port (listener) I/O queues may connect to, for the discovery log. Empty
    /// means "only the port the discovery controller was reached on".
    pub ports: Vec<PortConfig>,
}

/// One NVMe/TCP port as the discovery log describes it. Why here and not taken from
/// the connection: a discovery controller reached on one address must list every
/// address a host may use, including ones bound later through the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Port ID reported in discovery log entries (unique per port).
    pub portid: u16,
    /// Address to report; a wildcard (`0.0.0.0`, `::`) or empty address means "the
    /// address the discovery connection arrived on".
    pub traddr: String,
    /// TCP port (or RDMA-CM port space TCP port) as text.
    pub trsvcid: String,
    /// Transport type reported ([`crate::spec::log::TRTYPE_TCP`] or
    /// [`crate::spec::log::TRTYPE_RDMA`]).
    pub trtype: u8,
}

impl PortConfig {
    /// Whether [`PortConfig::traddr`] stands for "any local address".
    pub fn is_wildcard(&self) -> bool {
        matches!(self.traddr.as_str(), "" | "0.0.0.0" | "::" | "[::]")
    }
}

impl TargetConfig {
    /// The subsystem named `nqn`.
    pub fn subsystem(&self, nqn: &str) -> Option<&SubsystemConfig> {
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }
}

/// Static facts about the target reported to hosts.
#[derive(Debug, Clone)]
pub struct TargetIdentity {
    /// Model number in Identify Controller. The same on every transport: a host that
    /// reaches one subsystem over NVMe/TCP and NVMe/RDMA sees one model on both paths.
    pub model: String,
    /// Firmware revision in Identify Controller and the firmware slot log.
    pub firmware: String,
}

/// The model number Quarry reports: the product and the protocol family, no transport.
pub const MODEL: &str = "Quarry NVMe-oF";

impl Default for TargetIdentity {
    fn default() -> Self {
        TargetIdentity {
            model: MODEL.to_string(),
            firmware: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Where the configuration comes from. Why: the appliance promises that a namespace or
/// host added through its API is visible to a host that connects after the API call
/// returns, so the transport asks the source for news before every admin Connect
/// instead of relying only on asynchronous change notifications.
///
/// `load` may block (database reads, opening volume files): the transport calls it on
/// the blocking pool.
pub trait ConfigSource: Send + Sync {
    /// The current configuration if it changed since the last call, else `None`.
    fn load_if_changed(&self) -> Result<Option<TargetConfig>, String>;
}
