//! `quarry-smb`: an SMB 2.0.2 – 3.1.1 server.
//!
//! Layers, bottom up: [`proto`] is the pure wire codec; [`auth`] and [`crypto`] are pure
//! functions over bytes; [`share_mode`] is the pure open/lock conflict logic, [`oplock`]
//! the pure oplock/lease grant and break logic, [`notify`] the CHANGE_NOTIFY watches; [`server`]
//! holds connection/session/tree/open state and the tokio transport; [`vfs`] is the trait
//! through which the server reaches storage (implemented by the appliance); [`rpc`] serves
//! the `srvsvc` pipe on `IPC$`.

// Nothing a client sends may panic the server: no index or slice that can fall outside its
// buffer (tests are exempt, clippy.toml).
#![deny(clippy::indexing_slicing)]

pub mod auth;
pub mod crypto;
pub mod notify;
pub mod oplock;
pub mod proto;
pub mod rpc;
pub mod security;
pub mod server;
pub mod share_mode;
pub mod vfs;
