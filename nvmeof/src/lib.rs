//! `quarry-nvmeof`: an NVMe over Fabrics target (NVMe/TCP first).
//!
//! Layers, bottom up:
//! - [`tcp`]: sans-I/O NVMe/TCP PDU codec (framing, digests, every length checked).
//! - [`spec`]: transport-independent NVMe structures (SQE/CQE, Identify, log pages).
//! - [`target`]: controllers, queues and commands as sans-I/O state machines.
//! - [`transport`]: the tokio TCP listener driving one [`target::Queue`] per connection.
//! - [`rdma`]: the NVMe/RDMA transport (RDMA-CM private data codec always; the verbs
//!   glue with the `rdma` feature) driving the same [`target::Queue`] per queue pair.
//!
//! Invariant: nothing below the transport knows about sockets, files or clocks.

#![deny(missing_docs)]
// Nothing a host sends may panic the target (tests are exempt through clippy.toml).
#![deny(clippy::indexing_slicing)]

pub mod rdma;
pub mod spec;
pub mod target;
pub mod tcp;
pub mod transport;
