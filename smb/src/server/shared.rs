//! State shared by every connection: per-share open tables (share modes, delete-pending) and
//! byte-range locks, keyed by share name. Each share's state sits behind its own mutexes, held
//! only for the pure table operations (never across I/O or `.await`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::share_mode::{LockManager, ShareModeTable};

/// Open/lock state of one share.
#[derive(Default)]
pub struct ShareState {
    modes: Mutex<ShareModeTable>,
    locks: Mutex<LockManager>,
}

impl ShareState {
    /// The share-mode table.
    pub fn modes(&self) -> MutexGuard<'_, ShareModeTable> {
        self.modes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock manager.
    pub fn locks(&self) -> MutexGuard<'_, LockManager> {
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every share's [`ShareState`], created on first tree connect and kept for the life of the
/// server (a few hundred bytes per share).
#[derive(Default)]
pub struct SharedState {
    shares: Mutex<HashMap<String, Arc<ShareState>>>,
    bufs: super::bufpool::BufPool,
}

impl SharedState {
    /// The server's pool of READ response buffers.
    pub fn bufs(&self) -> &super::bufpool::BufPool {
        &self.bufs
    }

    /// The state of share `name` (case-insensitive).
    pub fn share(&self, name: &str) -> Arc<ShareState> {
        let mut m = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(name.to_lowercase()).or_default().clone()
    }
}
