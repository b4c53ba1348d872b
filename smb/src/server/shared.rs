//! State shared by every connection: per-share open tables (share modes, delete-pending) and
//! byte-range locks, keyed by share name. Each share's state sits behind its own mutexes, held
//! only for the pure table operations (never across I/O or `.await`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::oplock::{BreakNotice, OplockTable};
use crate::share_mode::{LockManager, ShareModeTable};

/// Where a connection receives the breaks of the oplocks and leases granted to it.
pub type BreakSender = tokio::sync::mpsc::UnboundedSender<BreakNotice>;

/// One client's connections, oldest first: (connection id, break queue).
type ClientConnections = Vec<(u64, BreakSender)>;

/// Where a grant's break notices go: a connection's break queue, and for a lease (sent on
/// the client's oldest connection) the granting connection's queue in case that one ends.
#[derive(Debug, Clone)]
pub struct BreakSink {
    to: BreakSender,
    or_else: Option<BreakSender>,
}

impl BreakSink {
    /// Notices go to `to` only.
    pub fn to(to: BreakSender) -> Self {
        BreakSink { to, or_else: None }
    }

    /// Notices go to `to`, or to `or_else` once `to`'s connection has ended.
    pub fn with_fallback(to: BreakSender, or_else: BreakSender) -> Self {
        BreakSink {
            to,
            or_else: Some(or_else),
        }
    }

    /// Queues `notice`; `false` when no connection is left to take it.
    pub fn send(&self, notice: BreakNotice) -> bool {
        match self.to.send(notice) {
            Ok(()) => true,
            Err(tokio::sync::mpsc::error::SendError(notice)) => self
                .or_else
                .as_ref()
                .is_some_and(|f| f.send(notice).is_ok()),
        }
    }
}

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
    /// The share's name, as the backend knows it (to watch it for outside changes).
    pub name: std::sync::OnceLock<String>,
    /// Changes made outside the server, queued by the backend's watcher thread until the
    /// next use of the watches records them.
    outside_inbox: Arc<Mutex<OutsideInbox>>,
    /// The backend's watcher over the watched directories.
    outside: Mutex<OutsideWatch>,
    /// Serializes writes of persistent handles' locks (see `durable::save_locks`).
    lock_persist: Mutex<()>,
}

/// Changes made outside the server, not yet recorded.
#[derive(Default)]
struct OutsideInbox {
    changes: Vec<(String, u32, u32)>,
    /// More arrived than [`crate::notify::MAX_PENDING_OUTSIDE_CHANGES`]: watches overflow.
    overflowed: bool,
}

/// The backend's watcher of one share and the watch set it was given.
#[derive(Default)]
struct OutsideWatch {
    watcher: Option<Box<dyn crate::notify::OutsideWatcher>>,
    /// The backend cannot watch this share (asked once).
    unavailable: bool,
    /// [`crate::notify::NotifyHub::version`] of the set the watcher was given.
    version: u64,
}

/// Sends break notices to the connections that own the grants (after the table's lock
/// is released); a connection that is gone has nothing left to break.
pub fn deliver(notices: Vec<(BreakSink, BreakNotice)>) {
    for (sink, notice) in notices {
        tracing::trace!(session_id = notice.session_id, kind = ?notice.kind, "break notice");
        if !sink.send(notice) {
            tracing::debug!("break notice for a connection that ended");
        }
    }
}

impl ShareState {
    /// Runs `f` on the CHANGE_NOTIFY watches (and keeps the lock-free `watched` flag).
    /// Changes made outside the server are recorded first, and the backend's watcher follows
    /// the set of watched directories.
    pub fn with_notify<T>(&self, f: impl FnOnce(&mut crate::notify::NotifyHub) -> T) -> T {
        let (out, version) = {
            let mut hub = self.notify.lock().unwrap_or_else(|p| p.into_inner());
            self.record_outside_changes(&mut hub);
            let out = f(&mut hub);
            self.watched
                .store(!hub.is_empty(), std::sync::atomic::Ordering::Relaxed);
            (out, hub.version())
        };
        self.follow_watches(version);
        out
    }

    /// Moves the changes the backend saw into the watches.
    fn record_outside_changes(&self, hub: &mut crate::notify::NotifyHub) {
        let mut inbox = self.outside_inbox.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::take(&mut inbox.overflowed) {
            hub.overflow_all();
        }
        for (path, action, filter) in inbox.changes.drain(..) {
            hub.record(&path, action, filter);
        }
    }

    /// Gives the backend's watcher the watched directories when they changed since it was
    /// last told (asking the backend for a watcher the first time anything is watched).
    /// Runs outside the watches' lock: the watcher's thread never waits for it.
    fn follow_watches(&self, version: u64) {
        let mut o = self.outside.lock().unwrap_or_else(|p| p.into_inner());
        if o.version == version {
            return;
        }
        o.version = version;
        let dirs = self
            .notify
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .watched_dirs();
        if o.watcher.is_none() {
            if dirs.is_empty() || o.unavailable {
                return;
            }
            let (Some(backend), Some(name)) = (self.backend.get(), self.name.get()) else {
                o.unavailable = true;
                return;
            };
            let inbox = self.outside_inbox.clone();
            let sink: crate::notify::OutsideChangeSink = Arc::new(move |path, action, filter| {
                let mut i = inbox.lock().unwrap_or_else(|p| p.into_inner());
                if i.changes.len() >= crate::notify::MAX_PENDING_OUTSIDE_CHANGES {
                    i.overflowed = true;
                    i.changes.clear();
                } else {
                    i.changes.push((path.to_string(), action, filter));
                }
            });
            match backend.watch_outside_changes(name, sink) {
                Some(w) => o.watcher = Some(w),
                None => {
                    o.unavailable = true;
                    return;
                }
            }
        }
        if let Some(w) = &o.watcher {
            w.watch(&dirs);
        }
    }

    /// Records a change the server made at share-relative `path` for CHANGE_NOTIFY
    /// watchers (nothing happens, lock-free, when nobody watches).
    pub fn record_change(&self, path: &str, action: u32, filter: u32) {
        if !self.watched.load(std::sync::atomic::Ordering::Relaxed) || path.is_empty() {
            return;
        }
        self.with_notify(|h| h.record(path, action, filter));
    }

    /// Breaks the leases held on the directory of `path` after the server added, removed,
    /// renamed or changed it, but the lease `actor` (the changing open's ParentLeaseKey).
    pub fn break_parent_leases(&self, path: &str, actor: Option<&[u8; 16]>) {
        let notices = {
            let mut t = self.oplocks();
            if !t.has_dir_leases() {
                return;
            }
            t.break_parent(path, actor, std::time::Instant::now())
        };
        deliver(notices);
    }

    /// Held while a persistent handle's locks are read and written to the backend.
    pub fn lock_persist_order(&self) -> MutexGuard<'_, ()> {
        self.lock_persist.lock().unwrap_or_else(|p| p.into_inner())
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
    bufs: Arc<super::bufpool::BufPool>,
    /// Last FileId handed out. Server-wide, not per connection: share-mode entries and
    /// byte-range locks of every connection live in the same per-share tables, keyed by
    /// the open's volatile id, so two connections must never use the same id.
    last_file_id: std::sync::atomic::AtomicU64,
    /// Established sessions, for binding further channels to them.
    sessions: super::channel::SessionDirectory,
    /// Durable opens whose connection was lost.
    durable: super::durable::DurableTable,
    backend: std::sync::OnceLock<Arc<dyn super::Backend>>,
    /// Each client's connections (ClientGuid → connection id and break sink), oldest
    /// first: lease breaks are the client's, sent on its oldest connection.
    clients: Mutex<HashMap<[u8; 16], ClientConnections>>,
}

impl SharedState {
    /// The server's pool of READ response and large received-message buffers.
    pub fn bufs(&self) -> &Arc<super::bufpool::BufPool> {
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
                let _ = s.name.set(name.to_string());
                if let Some(b) = self.backend.get() {
                    let _ = s.backend.set(b.clone());
                }
                Arc::new(s)
            })
            .clone()
    }

    /// Records connection `conn_id` of client `client_guid` (at NEGOTIATE).
    pub fn register_client(&self, client_guid: [u8; 16], conn_id: u64, sink: BreakSender) {
        if client_guid == [0; 16] {
            return;
        }
        let mut m = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let conns = m.entry(client_guid).or_default();
        conns.retain(|(id, s)| *id != conn_id && !s.is_closed());
        conns.push((conn_id, sink));
    }

    /// Forgets connection `conn_id` of client `client_guid` (it ended).
    pub fn unregister_client(&self, client_guid: [u8; 16], conn_id: u64) {
        let mut m = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conns) = m.get_mut(&client_guid) {
            conns.retain(|(id, s)| *id != conn_id && !s.is_closed());
            if conns.is_empty() {
                m.remove(&client_guid);
            }
        }
    }

    /// Where a lease of client `client_guid` is broken: its oldest connection still
    /// serving, then `granting` (the connection that took the lease) if that one ends.
    pub fn lease_sink(&self, client_guid: [u8; 16], granting: &BreakSender) -> BreakSink {
        let m = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        match m
            .get(&client_guid)
            .and_then(|c| c.iter().find(|(_, s)| !s.is_closed()))
        {
            Some((_, oldest)) if !oldest.same_channel(granting) => {
                BreakSink::with_fallback(oldest.clone(), granting.clone())
            }
            _ => BreakSink::to(granting.clone()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oplock::NoticeKind;

    fn notice() -> BreakNotice {
        BreakNotice {
            session_id: 1,
            kind: NoticeKind::Oplock {
                file_id: crate::proto::FileId {
                    persistent: 1,
                    volatile: 1,
                },
                level: 0,
            },
        }
    }

    #[test]
    fn lease_breaks_go_to_the_oldest_connection_then_to_the_granting_one() {
        let shared = SharedState::default();
        let (old_tx, old_rx) = tokio::sync::mpsc::unbounded_channel();
        let (new_tx, mut new_rx) = tokio::sync::mpsc::unbounded_channel();
        let guid = [7; 16];
        shared.register_client(guid, 1, old_tx);
        shared.register_client(guid, 2, new_tx.clone());
        let sink = shared.lease_sink(guid, &new_tx);
        assert!(sink.send(notice()));
        assert!(new_rx.try_recv().is_err(), "the oldest connection gets it");
        drop(old_rx);
        assert!(sink.send(notice()), "the granting connection takes over");
        assert!(new_rx.try_recv().is_ok());
        shared.unregister_client(guid, 1);
        shared.unregister_client(guid, 2);
        assert!(shared.clients.lock().map(|m| m.is_empty()).unwrap_or(false));
    }
}
