//! Asynchronous operations (MS-SMB2 3.3.4.2): a request that cannot finish at once gets an
//! interim STATUS_PENDING response with an AsyncId, and its final response is sent later from
//! the connection task, when it completes, is cancelled (CANCEL), or its open goes away.
//! Two kinds wait: blocking byte-range LOCKs, and CREATEs that broke another client's
//! oplock or lease and wait for its acknowledgment (they are then run again from the top).

use std::sync::Arc;

use crate::proto::Header;
use crate::share_mode::LockRequest;

use super::shared::ShareState;

/// Most asynchronous operations outstanding on one connection; beyond it a blocking LOCK is
/// answered LOCK_NOT_GRANTED at once.
pub const MAX_PENDING_PER_CONNECTION: usize = 256;
/// How often waiting operations re-check their condition while any are outstanding.
pub const PENDING_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// What a handler asks to wait for.
pub enum Wait {
    /// A blocking byte-range lock.
    Lock {
        /// The share whose lock manager holds the file.
        share: Arc<ShareState>,
        /// The file.
        inode: u64,
        /// The open (volatile id).
        open: u64,
        /// The locks, all or nothing.
        locks: Vec<LockRequest>,
        /// The open is a persistent handle: its locks are recorded once granted.
        persistent: bool,
    },
    /// A CHANGE_NOTIFY waiting for changes under its directory.
    Notify {
        /// The share whose watches hold it.
        share: Arc<ShareState>,
        /// The directory open (volatile id).
        open: u64,
        /// The client's OutputBufferLength.
        max_output: u32,
    },
    /// A CREATE waiting until the breaks it caused on a file are acknowledged (or time
    /// out); then it is dispatched again.
    Breaks {
        /// The share whose oplock table holds the file.
        share: Arc<ShareState>,
        /// The file.
        inode: u64,
        /// The (scoped) lease key of the CREATE: breaks of its own lease do not hold it.
        key: Option<[u8; 16]>,
    },
}

/// One outstanding asynchronous operation.
pub struct PendingOp {
    /// AsyncId sent in the interim response.
    pub async_id: u64,
    /// The request's header (for the final response).
    pub hdr: Header,
    /// Effective session id.
    pub session_id: u64,
    /// The request was signed.
    pub signed: bool,
    /// The request arrived encrypted.
    pub encrypted: bool,
    /// What it waits for.
    pub wait: Wait,
    /// The effective tree id (for a CREATE run again).
    pub tree_id: u32,
    /// The request element, kept for a CREATE run again (empty otherwise).
    pub element: Vec<u8>,
    /// The channel the request came over, when not this connection (its answer goes there).
    pub via: Option<Arc<super::channel::Via>>,
    /// The connection it came over is gone (its session was adopted by a channel): it
    /// still completes (a CREATE still opens, for a replay to find), unanswered.
    pub silent: bool,
}

impl PendingOp {
    /// The open this operation belongs to, if any.
    pub fn open_id(&self) -> Option<u64> {
        match &self.wait {
            Wait::Lock { open, .. } | Wait::Notify { open, .. } => Some(*open),
            Wait::Breaks { .. } => None,
        }
    }

    /// The status an operation ends with when its open or session goes away.
    pub fn orphan_status(&self) -> u32 {
        match self.wait {
            Wait::Lock { .. } => crate::proto::status::RANGE_NOT_LOCKED,
            Wait::Notify { .. } => crate::proto::status::NOTIFY_CLEANUP,
            Wait::Breaks { .. } => crate::proto::status::USER_SESSION_DELETED,
        }
    }

    /// The response body a final `status` carries when it is not an error: a CHANGE_NOTIFY
    /// answers even cleanup and enumerate-directory with an (empty) notify response.
    pub fn final_body(&self, status: u32) -> Option<Vec<u8>> {
        match self.wait {
            Wait::Notify { .. } if !crate::proto::status::is_error(status) => {
                Some(crate::notify::encode_notify_response(&[]))
            }
            _ => None,
        }
    }

    /// Tries to complete: `Some((status, body))` when done (`body` for a CHANGE_NOTIFY's
    /// changes).
    pub fn poll_body(&self) -> Option<(u32, Option<Vec<u8>>)> {
        if let Wait::Notify {
            share,
            open,
            max_output,
        } = &self.wait
        {
            return share
                .with_notify(|h| h.take(*open, *max_output))
                .map(|c| match c {
                    crate::notify::Collected::Changes(list) => (
                        crate::proto::status::SUCCESS,
                        Some(crate::notify::encode_notify_response(
                            &crate::notify::encode_changes(&list),
                        )),
                    ),
                    crate::notify::Collected::Overflow => (
                        crate::proto::status::NOTIFY_ENUM_DIR,
                        Some(crate::notify::encode_notify_response(&[])),
                    ),
                    crate::notify::Collected::DeletePending => {
                        (crate::proto::status::DELETE_PENDING, None)
                    }
                });
        }
        self.poll().map(|st| (st, None))
    }

    /// Tries to complete: `Some(status)` when done.
    pub fn poll(&self) -> Option<u32> {
        match &self.wait {
            Wait::Notify { .. } => None,
            Wait::Lock {
                share,
                inode,
                open,
                locks,
                persistent,
            } => match share.locks().lock(*inode, *open, locks) {
                Ok(()) => {
                    if *persistent {
                        // Recorded in the background: a poll cannot wait for the database.
                        let (share, inode, open) = (share.clone(), *inode, *open);
                        tokio::task::spawn_blocking(move || {
                            crate::server::durable::save_locks(&share, inode, open)
                        });
                    }
                    Some(crate::proto::status::SUCCESS)
                }
                Err(crate::share_mode::LockError::NotGranted) => None,
                Err(e) => Some(e.nt_status()),
            },
            Wait::Breaks { share, inode, key } => {
                (!share
                    .oplocks()
                    .breaking(*inode, key.as_ref(), std::time::Instant::now()))
                .then_some(crate::proto::status::SUCCESS)
            }
        }
    }

    /// Whether this is a CHANGE_NOTIFY.
    pub fn is_notify(&self) -> bool {
        matches!(self.wait, Wait::Notify { .. })
    }

    /// Whether completing means running the request again (a CREATE after breaks).
    pub fn retries(&self) -> bool {
        matches!(self.wait, Wait::Breaks { .. })
    }
}
