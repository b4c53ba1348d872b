//! The NVMe/RDMA transport: RDMA-CM listener, one reliable-connected queue pair per
//! NVMe queue, command capsules received into registered buffers, host data moved with
//! RDMA READ/WRITE on the keyed SGL descriptors, completions sent (with invalidate when
//! the host asks for it). The command handling is the transport-independent
//! [`crate::target::Queue`] in its [`crate::target::queue::Wire::Rdma`] mode: nothing of
//! the admin or I/O command sets is duplicated here.
//!
//! Layers:
//! - [`wire`]: sans-I/O codec of the RDMA-CM private data (always built, unit-tested).
//! - [`budget`]: bounds on registered memory (always built, unit-tested).
//! - with the `rdma` feature, the verbs glue over `rdma-sys` (libibverbs + librdmacm):
//!   the CM event loop (`listener`), queue pairs and their event loop with completion
//!   polling and an interrupt fallback (`conn`), and RAII wrappers (`verbs`).
//!
//! Without the feature, [`RdmaListener::bind`] and [`availability`] report why RDMA
//! is unavailable, so callers need no conditional compilation.

pub mod budget;
pub mod wire;

#[cfg(feature = "rdma")]
mod conn;
#[cfg(feature = "rdma")]
mod listener;
#[cfg(feature = "rdma")]
mod verbs;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::target::Target;

/// Size of one staging chunk of registered memory for RDMA READ/WRITE.
pub const CHUNK_SIZE: usize = 128 * 1024;
/// Staging chunks per queue pair: bounds the data a queue moves at once to 4 MiB
/// (four maximal 1 MiB commands); further transfers wait for chunks.
pub const CHUNKS_PER_QUEUE: u32 = 32;
/// Scatter/gather entries one RDMA READ or WRITE may use (one per chunk): a maximal
/// command ([`crate::target::limits::MAX_TRANSFER`]) needs 8.
pub const MAX_SGE: usize = 8;
/// Bytes of one capsule receive buffer: the SQE plus the largest in-capsule data.
pub const RECV_SLOT: usize =
    crate::spec::SQE_LEN + crate::target::limits::MAX_INCAPSULE_DATA_RDMA as usize;
/// Default bound on memory all RDMA queue pairs of a process may register (each I/O
/// queue takes about 6 MiB: 128 capsule buffers plus its staging chunks).
pub const DEFAULT_MEMORY_LIMIT: usize = 512 << 20;
/// Queue pairs one listener serves at once; further connection requests are rejected.
pub const MAX_QUEUE_PAIRS: usize = 256;

/// Registered bytes a queue pair with `recv_entries` capsule buffers and
/// `send_entries` completion slots takes from the [`budget::MemoryBudget`].
pub fn queue_memory(recv_entries: u16, send_entries: u16) -> usize {
    usize::from(recv_entries) * RECV_SLOT
        + usize::from(send_entries) * crate::spec::CQE_LEN
        + CHUNKS_PER_QUEUE as usize * CHUNK_SIZE
}

/// Why RDMA listeners cannot be used, or what they would run on.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// The binary was built without the `rdma` feature.
    #[error("this build has no NVMe/RDMA transport (built without the `rdma` feature)")]
    NotBuilt,
    /// No RDMA device (or no RDMA-CM) on this machine.
    #[error("{0}")]
    NoDevice(String),
    /// A verbs or RDMA-CM call failed.
    #[error("{op}: {source}")]
    Verbs {
        /// The call that failed.
        op: &'static str,
        /// errno as an I/O error.
        source: std::io::Error,
    },
}

/// Whether RDMA listeners can be bound here: the names of the RDMA devices found, or
/// why not (no feature, no device, no RDMA-CM).
pub fn availability() -> Result<Vec<String>, RdmaError> {
    #[cfg(feature = "rdma")]
    {
        verbs::devices()
    }
    #[cfg(not(feature = "rdma"))]
    {
        Err(RdmaError::NotBuilt)
    }
}

/// A bound RDMA-CM listener, not yet serving.
pub struct RdmaListener {
    local: SocketAddr,
    #[cfg(feature = "rdma")]
    inner: listener::Bound,
}

impl std::fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("local", &self.local)
            .finish()
    }
}

impl RdmaListener {
    /// Binds and listens on `addr` (RDMA-CM, TCP port space), so a bad address or a
    /// machine without RDMA is reported here, before anything is stored.
    pub fn bind(addr: SocketAddr) -> Result<Self, RdmaError> {
        #[cfg(feature = "rdma")]
        {
            let inner = listener::Bound::bind(addr)?;
            Ok(RdmaListener { local: addr, inner })
        }
        #[cfg(not(feature = "rdma"))]
        {
            let _ = addr;
            Err(RdmaError::NotBuilt)
        }
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves NVMe/RDMA on its own threads until `shutdown` is cancelled; queue pairs
    /// hand storage I/O to the target's executor or to the current tokio runtime's
    /// blocking pool. `advertised` overrides the address in discovery log entries.
    /// `budget` bounds the memory all queue pairs may register.
    pub fn serve(
        self,
        target: Arc<Target>,
        advertised: Option<String>,
        budget: Arc<budget::MemoryBudget>,
        shutdown: CancellationToken,
    ) {
        #[cfg(feature = "rdma")]
        {
            self.inner.serve(target, advertised, budget, shutdown);
        }
        #[cfg(not(feature = "rdma"))]
        {
            let _ = (target, advertised, budget, shutdown);
        }
    }
}
