//! Route handlers, one module per resource.

pub mod events;
pub mod health;
pub mod login;
pub mod nvme;
pub mod nvme_listeners;
pub mod pool;
pub mod shares;
pub mod snapshots;
pub mod system;
pub mod tls;
pub mod tokens;
pub mod users;
pub mod volumes;
