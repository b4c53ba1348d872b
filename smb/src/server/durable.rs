//! Durable handles (MS-SMB2 3.3.5.9.6, 3.3.5.9.7, 3.3.5.9.10, 3.3.5.9.12): an open granted
//! as durable outlives its connection. When the connection is lost (or the client names
//! its session as PreviousSessionId), the open, with its share-mode entry, byte-range locks
//! and oplock or lease, is kept here for its timeout; a CREATE with a reconnect context
//! from the same user (and, for v2, the same CreateGuid) takes it back on a new session.
//! An open another client needs (a conflicting CREATE) or one whose timeout passes is
//! closed. Persistent handles (continuously available shares) are also recorded through
//! the `Backend`, with the byte-range locks they hold, so that a restarted server restores
//! them, locks included, for their client to reclaim.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::shared::SharedState;
use super::state::Open;

/// How long a durable open is kept without a connection when the client asks for no
/// particular time (v1 always; v2 with Timeout 0).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a v2 client may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Most opens kept at once server-wide; beyond it a lost connection's opens are closed.
pub const MAX_PRESERVED: usize = 16384;

/// A persistent handle as the appliance keeps it across restarts: enough to open the file
/// again, take its share-mode entry back, and let the same user and client reclaim it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedOpen {
    /// Its FileId (persistent and volatile halves are equal).
    pub persistent_id: u64,
    /// The CreateGuid its DH2C must name.
    pub create_guid: [u8; 16],
    /// The client it belongs to.
    pub client_guid: [u8; 16],
    /// The user who opened it.
    pub user: String,
    /// The share.
    pub share: String,
    /// Path relative to the share.
    pub path: String,
    /// Granted access.
    pub access: u32,
    /// Share access (the share-mode entry it holds).
    pub share_access: u32,
    /// Durable timeout in milliseconds.
    pub timeout_ms: u32,
    /// The byte-range locks it holds.
    pub locks: Vec<PersistedLock>,
}

/// A byte-range lock a persistent handle holds, kept with it across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistedLock {
    /// First byte.
    pub offset: u64,
    /// Length.
    pub length: u64,
    /// Exclusive (write) rather than shared.
    pub exclusive: bool,
}

/// Most locks restored per persistent handle (a record with more is cut short).
pub const MAX_PERSISTED_LOCKS: usize = 4096;

/// Records the locks persistent open `id` of `file` holds now, through `share`'s backend.
/// Blocking (a database write): run it from the blocking pool. Serialized per share, and
/// each call writes the state current when it runs, so the last write is the newest.
pub fn save_locks(share: &super::shared::ShareState, file: u64, id: u64) {
    let Some(backend) = share.backend.get() else {
        return;
    };
    let _order = share.lock_persist_order();
    let held: Vec<PersistedLock> = share
        .locks()
        .held_by(file, id)
        .into_iter()
        .map(|l| PersistedLock {
            offset: l.range.offset,
            length: l.range.length,
            exclusive: l.exclusive,
        })
        .collect();
    backend.persist_open_locks(id, &held);
}

/// What made an open durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    /// Granted through DH2Q (reconnect needs DH2C with the same CreateGuid).
    pub v2: bool,
    /// The v2 CreateGuid (zeros for v1).
    pub create_guid: [u8; 16],
    /// How long it is kept without a connection.
    pub timeout: Duration,
    /// A persistent handle (continuously available share): kept by the appliance
    /// ([`super::Backend::persist_open`]) so that it also outlives a server restart.
    pub persistent: bool,
}

impl Durable {
    /// The timeout for a v2 request of `ms` milliseconds.
    pub fn v2_timeout(ms: u32) -> Duration {
        if ms == 0 {
            DEFAULT_TIMEOUT
        } else {
            Duration::from_millis(u64::from(ms)).min(MAX_TIMEOUT)
        }
    }
}

/// An open kept for reconnection.
pub struct Preserved {
    /// The open (its tree id is stale until reclaimed).
    pub open: Open,
    /// Whose it is.
    pub user: String,
    /// The ClientGuid of the connection that held it (leases are the client's).
    pub client_guid: [u8; 16],
    generation: u64,
}

/// The disconnected durable opens of the server, by persistent file id.
#[derive(Default)]
pub struct DurableTable {
    opens: Mutex<HashMap<u64, Preserved>>,
    generation: AtomicU64,
    /// How many opens are kept, read without the lock by every CREATE.
    kept: AtomicUsize,
}

impl DurableTable {
    /// Runs `f` on the kept opens and keeps the lock-free count in step.
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<u64, Preserved>) -> T) -> T {
        let mut m = self.opens.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(&mut m);
        self.kept.store(m.len(), Ordering::Relaxed);
        out
    }

    /// Takes back the open `persistent_id` when `may` accepts it (it stays otherwise).
    pub fn reclaim(
        &self,
        persistent_id: u64,
        may: impl FnOnce(&Preserved) -> bool,
    ) -> Option<Preserved> {
        self.with(|m| {
            if m.get(&persistent_id).is_some_and(may) {
                m.remove(&persistent_id)
            } else {
                None
            }
        })
    }

    /// Removes the kept opens of file `inode` in `share` (a new open needs the file).
    pub fn take_file(&self, share: &Arc<super::shared::ShareState>, inode: u64) -> Vec<Open> {
        self.with(|m| {
            let ids: Vec<u64> = m
                .iter()
                .filter(|(_, p)| {
                    // A persistent handle does not give way: its client will be back.
                    !p.open.durable.is_some_and(|d| d.persistent)
                        && p.open.inode == inode
                        && p.open.share.as_ref().is_some_and(|s| Arc::ptr_eq(s, share))
                })
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| m.remove(&id).map(|p| p.open))
                .collect()
        })
    }

    /// Whether any open is kept, without taking the lock (every CREATE asks).
    pub fn is_empty(&self) -> bool {
        self.kept.load(Ordering::Relaxed) == 0
    }
}

/// Who may reclaim a kept open.
#[derive(Debug, Clone)]
pub struct Owner {
    /// The session's user.
    pub user: String,
    /// The connection's ClientGuid.
    pub client_guid: [u8; 16],
}

/// Keeps `open` (which must be durable) for reconnection by `owner`, and closes it when
/// its timeout passes unclaimed. Gives the open back when it cannot be kept.
pub fn preserve(shared: &Arc<SharedState>, open: Open, owner: Owner) -> Option<Open> {
    let Some(durable) = open.durable else {
        return Some(open);
    };
    let id = open.file_id.persistent;
    let table = shared.durable();
    let generation = table.generation.fetch_add(1, Ordering::Relaxed);
    let refused = table.with(|m| {
        if m.len() >= MAX_PRESERVED || m.contains_key(&id) {
            return Some(open);
        }
        m.insert(
            id,
            Preserved {
                open,
                user: owner.user,
                client_guid: owner.client_guid,
                generation,
            },
        );
        None
    });
    if refused.is_some() {
        return refused;
    }
    tracing::debug!(id, "durable handle kept");
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(durable.timeout).await;
        let expired = shared.durable().reclaim(id, |p| p.generation == generation);
        if let Some(p) = expired {
            tracing::debug!(file = %p.open.path, "durable handle expired");
            let _ = super::handlers::create::close_open(p.open).await;
        }
    });
    None
}

/// Gives back the persistent handles recorded before a restart: each file is opened again
/// (reading and writing as its access allows), takes its share-mode entry back, and waits
/// in the durable table for its client's reconnect, for its timeout. A handle whose file
/// or share is gone is forgotten. Returns how many were restored.
pub async fn restore_persisted(
    shared: &Arc<SharedState>,
    backend: &Arc<dyn super::Backend>,
) -> usize {
    let b = backend.clone();
    let records = tokio::task::spawn_blocking(move || b.persisted_opens())
        .await
        .unwrap_or_default();
    let mut restored = 0;
    for r in records {
        shared.file_ids_above(r.persistent_id);
        match restore_one(shared, backend, &r).await {
            Ok(()) => restored += 1,
            Err(e) => {
                tracing::warn!(share = r.share, path = r.path, error = %e, "persistent handle not restored");
                let b = backend.clone();
                let id = r.persistent_id;
                let _ = tokio::task::spawn_blocking(move || b.forget_persisted_open(id)).await;
            }
        }
    }
    if restored > 0 {
        tracing::info!(restored, "persistent handles restored");
    }
    restored
}

/// Why a recorded persistent handle could not be restored.
#[derive(Debug, thiserror::Error)]
enum RestoreError {
    #[error("opening the file: {0}")]
    Open(#[from] crate::vfs::FsError),
    #[error("its share-mode entry conflicts with another open")]
    ShareMode,
    #[error("the durable table refused it")]
    Full,
    #[error("the blocking pool failed")]
    Join,
}

async fn restore_one(
    shared: &Arc<SharedState>,
    backend: &Arc<dyn super::Backend>,
    r: &PersistedOpen,
) -> Result<(), RestoreError> {
    use crate::server::handlers::create::{
        FILE_APPEND_DATA, FILE_EXECUTE, FILE_READ_DATA, FILE_WRITE_DATA,
    };
    let b = backend.clone();
    let rec = r.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let fs = b.share_fs(&rec.share)?;
        fs.create(&crate::vfs::CreateRequest {
            path: &rec.path,
            disposition: crate::vfs::CreateDisposition::Open,
            options: crate::proto::create::FILE_NON_DIRECTORY_FILE,
            attributes: 0,
            write: rec.access & (FILE_WRITE_DATA | FILE_APPEND_DATA) != 0,
            read: rec.access & (FILE_READ_DATA | FILE_EXECUTE) != 0,
            allocation_size: 0,
            stream: None,
            security: None,
        })
    })
    .await
    .map_err(|_| RestoreError::Join)??;
    let share = shared.share(&r.share);
    let inode = opened.info.file_id;
    let id = r.persistent_id;
    {
        let mut modes = share.modes();
        let mode = crate::share_mode::OpenMode {
            access: r.access,
            share: r.share_access,
        };
        modes
            .try_open(inode, id, mode, false)
            .map_err(|_| RestoreError::ShareMode)?;
        modes.set_path(inode, id, &r.path);
    }
    let locks: Vec<crate::share_mode::LockRequest> = r
        .locks
        .iter()
        .take(MAX_PERSISTED_LOCKS)
        .map(|l| crate::share_mode::LockRequest {
            range: crate::share_mode::LockRange {
                offset: l.offset,
                length: l.length,
            },
            exclusive: l.exclusive,
        })
        .collect();
    if !locks.is_empty() {
        if let Err(e) = share.locks().lock(inode, id, &locks) {
            tracing::warn!(path = %r.path, error = ?e, "a persistent handle's locks could not be restored");
        }
    }
    let file_id = crate::proto::FileId {
        persistent: id,
        volatile: id,
    };
    let open = Open {
        file: Some(Arc::from(opened.file)),
        share: Some(share),
        inode,
        durable: Some(Durable {
            v2: true,
            create_guid: r.create_guid,
            timeout: Duration::from_millis(u64::from(r.timeout_ms)),
            persistent: true,
        }),
        ..Open::new(file_id, 0, r.path.clone(), r.access)
    };
    let owner = Owner {
        user: r.user.clone(),
        client_guid: r.client_guid,
    };
    match preserve(shared, open, owner) {
        None => Ok(()),
        Some(refused) => {
            if let Some(s) = &refused.share {
                let _ = s.modes().close(refused.inode, id);
            }
            Err(RestoreError::Full)
        }
    }
}
