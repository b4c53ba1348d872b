//! State shared by every connection: per-share open tables (share modes, delete-pending) and
//! byte-range locks, keyed by share name. Each share's state sits behind its own mutexes, held
//! only for the pure table operations (never across I/O or `.await`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::oplock::{BreakNotice, OplockTable};
use crate::share_mode::{LockManager, ShareModeTable};

/// Where a connection receives the breaks of the oplocks and leases granted to it.
pub type BreakSink = tokio::sync::mpsc::UnboundedSender<BreakNotice>;

/// Open/lock state of one share.
#[derive(Default)]
pub struct ShareState {
    modes: Mutex<ShareModeTable>,
    locks: Mutex<LockManager>,
    oplocks: Mutex<OplockTable<BreakSink>>,
    notify: Mutex<crate::notify::NotifyHub>,
    replay: Mutex<super::replay::ReplayCache>,
    /// The appliance's backend, for persistent handles.
    pub backend: std::sync::OnceLock<Arc<dyn super::Backend>>,
    /// Whether `notify` holds any watch, read without the lock on the data path.
    watched: std::sync::atomic::AtomicBool,
}

/// Sends break notices to the connections that own the grants (after the table's lock
/// is released); a connection that is gone has nothing left to break.
pub fn deliver(notices: Vec<(BreakSink, BreakNotice)>) {
    for (sink, notice) in notices {
        tracing::trace!(session_id = notice.session_id, kind = ?notice.kind, "break notice");
        let _ = sink.send(notice);
    }
}

impl ShareState {
    /// Runs `f` on the CHANGE_NOTIFY watches (and keeps the lock-free `watched` flag).
    pub fn with_notify<T>(&self, f: impl FnOnce(&mut crate::notify::NotifyHub) -> T) -> T {
        let mut hub = self.notify.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(&mut hub);
        self.watched
            .store(!hub.is_empty(), std::sync::atomic::Ordering::Relaxed);
        out
    }

    /// Records a change the server made at share-relative `path` for CHANGE_NOTIFY
    /// watchers (nothing happens, lock-free, when nobody watches).
    pub fn record_change(&self, path: &str, action: u32, filter: u32) {
        if !self.watched.load(std::sync::atomic::Ordering::Relaxed) || path.is_empty() {
            return;
        }
        self.with_notify(|h| h.record(path, action, filter));
    }

    /// The CreateGuids of durable v2 CREATEs (replay detection).
    pub fn replay(&self) -> MutexGuard<'_, super::replay::ReplayCache> {
        self.replay.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The oplock and lease table.
    pub fn oplocks(&self) -> MutexGuard<'_, OplockTable<BreakSink>> {
        self.oplocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Breaks the read caching others hold on `file` before `writer` changes its data
    /// (WRITE, end-of-file and allocation changes).
    pub fn break_for_write(&self, file: u64, writer: u64, key: Option<&[u8; 16]>) {
        let notices = {
            let mut t = self.oplocks();
            if t.is_empty() {
                return;
            }
            t.break_for_write(file, writer, key, std::time::Instant::now())
        };
        deliver(notices);
    }

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
    /// Last FileId handed out. Server-wide, not per connection: share-mode entries and
    /// byte-range locks of every connection live in the same per-share tables, keyed by
    /// the open's volatile id, so two connections must never use the same id.
    last_file_id: std::sync::atomic::AtomicU64,
    /// Established sessions, for binding further channels to them.
    sessions: super::channel::SessionDirectory,
    /// Durable opens whose connection was lost.
    durable: super::durable::DurableTable,
    backend: std::sync::OnceLock<Arc<dyn super::Backend>>,
}

impl SharedState {
    /// The server's pool of READ response buffers.
    pub fn bufs(&self) -> &super::bufpool::BufPool {
        &self.bufs
    }

    /// Durable opens waiting for their client to reconnect.
    pub fn durable(&self) -> &super::durable::DurableTable {
        &self.durable
    }

    /// Established sessions and the server-wide session id counter.
    pub fn sessions(&self) -> &super::channel::SessionDirectory {
        &self.sessions
    }

    /// A FileId no other open of this server has (both halves the same number).
    pub fn next_file_id(&self) -> u64 {
        self.last_file_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1)
    }

    /// The state of share `name` (case-insensitive).
    pub fn share(&self, name: &str) -> Arc<ShareState> {
        let mut m = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(name.to_lowercase())
            .or_insert_with(|| {
                let s = ShareState::default();
                if let Some(b) = self.backend.get() {
                    let _ = s.backend.set(b.clone());
                }
                Arc::new(s)
            })
            .clone()
    }

    /// Gives the shares the appliance's backend (persistent handles are recorded and
    /// forgotten through it); set once when the server starts.
    pub fn set_backend(&self, backend: Arc<dyn super::Backend>) {
        let _ = self.backend.set(backend);
    }

    /// Makes new FileIds start above `id` (persistent handles restored after a restart
    /// keep theirs).
    pub fn file_ids_above(&self, id: u64) {
        self.last_file_id
            .fetch_max(id, std::sync::atomic::Ordering::Relaxed);
    }
}
