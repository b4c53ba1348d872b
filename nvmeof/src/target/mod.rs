//! Transport-independent target: configuration, controllers, admin and I/O commands,
//! and the per-connection queue state machine.

pub mod admin;
pub mod config;
pub mod controller;
pub mod io;
pub mod iobuf;
pub mod limits;
pub mod mem;
pub mod queue;

pub use admin::ListenerInfo;
pub use config::{
    BlockDevice, ConfigSource, IoCounters, IoDone, IoExecutor, IoFinished, NamespaceConfig,
    PortConfig, QueueIo, SubsystemConfig, TargetConfig, TargetIdentity,
};
pub use controller::{Controller, IoKind, SessionHooks, SessionObserver, Target};
pub use io::{BlockOp, IoOutcome, IoRequest};
pub use iobuf::{IoBuf, IO_BUF_ALIGN};
pub use queue::{Output, Queue, Wire};

#[cfg(test)]
mod tests;
