//! The Quarry appliance: everything that knows about SQLite, HTTP/JSON, systemd and the pool.
//!
//! The protocol crates (`quarry-smb`, `quarry-nvmeof`) know nothing of this crate; the
//! `*_service` modules implement their storage traits over [`pool`] and feed them the
//! configuration held in [`db`]. See ARCHITECTURE.md for the request flow.

// Nothing an admin, a client or the kernel hands us may panic the appliance: no index or
// slice that can fall outside its buffer (tests are exempt, clippy.toml).
#![deny(clippy::indexing_slicing)]

pub mod alerts;
pub mod api;
pub mod cli;
pub mod credentials;
pub mod db;
pub mod logging;
pub mod nvme_service;
pub mod pool;
pub mod serve;
pub mod sessions;
pub mod smb_service;
pub mod state;
pub mod system;
pub mod telemetry;
pub mod tls;
pub mod ui;
pub mod webhook;
