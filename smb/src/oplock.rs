//! Which opens of a share may cache what: oplocks (level II, exclusive, batch) and leases
//! (R, RH, RW, RWH), the breaks that a conflicting open or a write causes, break
//! acknowledgments and their timeout (MS-SMB2 3.3.4.6, 3.3.4.7, 3.3.5.22; the object-store
//! rules of MS-FSA 2.1.5.17 reduced to what SMB2 clients observe).
//!
//! Pure state, like [`crate::share_mode`]: functions return the notices to send, each with
//! the owner's delivery handle `S` (the server uses a channel to the owning connection),
//! and the server sends them after releasing the table's lock. An oplock is modelled as a
//! lease state of its own open: batch = RWH, exclusive = RW, level II = R.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::proto::oplock::{
    LEASE_HANDLE as H, LEASE_READ as R, LEASE_WRITE as W, OPLOCK_LEVEL_BATCH,
    OPLOCK_LEVEL_EXCLUSIVE, OPLOCK_LEVEL_II, OPLOCK_LEVEL_LEASE, OPLOCK_LEVEL_NONE,
};
use crate::proto::{status, FileId};
use crate::share_mode::{FileKey, OpenId};

/// How long a break waits for its acknowledgment before the server lowers the state
/// itself (Windows' default lease/oplock break timeout).
pub const BREAK_TIMEOUT: Duration = Duration::from_secs(35);
/// Most caching entries (oplocks plus leases) per file; beyond it new opens get none.
pub const MAX_CACHING_PER_FILE: usize = 256;

/// One open holding (part of) a caching grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The open (volatile id, unique server-wide).
    pub open: OpenId,
    /// Its FileId (named in oplock break notifications).
    pub file_id: FileId,
    /// Its session (oplock breaks are sent for it; sealed when it encrypts).
    pub session_id: u64,
}

/// A break to deliver to the owner of an oplock or lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakNotice {
    /// The session of the open the grant was made to.
    pub session_id: u64,
    /// What to send.
    pub kind: NoticeKind,
}

/// The two notification forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// Oplock break notification: `level` is the most the client may keep.
    Oplock {
        /// The open.
        file_id: FileId,
        /// New oplock level.
        level: u8,
    },
    /// Lease break notification.
    Lease {
        /// The lease (scoped key).
        key: [u8; 16],
        /// The lease key as its client knows it.
        wire_key: [u8; 16],
        /// New epoch (v2).
        epoch: u16,
        /// Whether the client must acknowledge (it held write or handle caching).
        ack_required: bool,
        /// State before the break.
        current: u32,
        /// State after it.
        new: u32,
    },
}

/// What a CREATE asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// No caching.
    Nothing,
    /// An oplock of this level (`OPLOCK_LEVEL_*`).
    Oplock(u8),
    /// A lease.
    Lease {
        /// Lease key (scoped by the client, see [`scoped_lease_key`]).
        key: [u8; 16],
        /// The key as the client sent it (break notifications name it).
        wire_key: [u8; 16],
        /// Requested state.
        state: u32,
        /// 1 or 2.
        version: u8,
        /// The client's epoch (v2).
        epoch: u16,
    },
}

/// What a CREATE was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// OplockLevel of the CREATE response (`OPLOCK_LEVEL_LEASE` for leases).
    pub oplock_level: u8,
    /// For a lease request: the granted state and epoch.
    pub lease: Option<(u32, u16)>,
    /// The version of the lease held (1 or 2; 0 for none): a v1 request that joins a v2
    /// lease is answered in the v2 form, as Windows does.
    pub lease_version: u8,
    /// A break of the lease joined is still waiting for its acknowledgment (the state
    /// given is the one before the break; the response says so).
    pub break_in_progress: bool,
}

/// How a new open bears on existing grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenImpact {
    /// The open truncates (overwrite, supersede): cached data becomes stale.
    pub truncates: bool,
    /// The open would fail the share-mode check against the opens now present: handle
    /// caching is broken so that clients close handles they only keep cached.
    pub share_conflict: bool,
    /// The open asks for attributes or synchronisation only: it breaks no oplock
    /// (MS-FSA stat opens).
    pub attributes_only: bool,
    /// The open asks for attributes, synchronisation or reading the security descriptor
    /// only: it breaks no lease (Windows counts READ_CONTROL as a stat open for leases,
    /// not for oplocks).
    pub lease_stat_open: bool,
}

/// Why an acknowledgment was refused, as the NTSTATUS to answer.
pub type AckError = u32;

#[derive(Debug, Clone)]
struct Caching<S> {
    /// Lease key; `None` for an oplock (then `opens` has exactly one holder).
    key: Option<[u8; 16]>,
    /// The lease key as the client sent it (zeros for an oplock).
    wire_key: [u8; 16],
    opens: Vec<Holder>,
    state: u32,
    /// The state the break in progress asked the client for.
    breaking_to: Option<u32>,
    /// For a lease: what the server needs by the end of the break in progress, lowered
    /// further by conflicts that arrive while it waits (they send no second notice; the
    /// acknowledgment starts the next step).
    required: u32,
    deadline: Option<Instant>,
    epoch: u16,
    version: u8,
    sink: S,
}

impl<S> Caching<S> {
    /// The state once the break in progress (if any) is done.
    fn target(&self) -> u32 {
        self.breaking_to.unwrap_or(self.state)
    }

    fn holds(&self, open: OpenId) -> bool {
        self.opens.iter().any(|h| h.open == open)
    }

    fn is_oplock(&self) -> bool {
        self.key.is_none()
    }
}

/// Valid lease states are none, R, RH, RW and RWH: W or H without R means none.
fn normalize(state: u32) -> u32 {
    let s = state & (R | W | H);
    if s & R == 0 {
        0
    } else {
        s
    }
}

/// The state a grant must fall to for a new open with `impact`, or `None` when the open
/// does not touch it.
fn open_target<S>(e: &Caching<S>, impact: OpenImpact) -> Option<u32> {
    let stat_open = if e.is_oplock() {
        impact.attributes_only
    } else {
        impact.lease_stat_open
    };
    if stat_open && !impact.truncates {
        return None;
    }
    let mut target = e.target();
    if impact.share_conflict {
        // The open fails its sharing check unless a client closes a handle it only keeps
        // cached: only handle caching is broken (a batch oplock to level II); other grants
        // stay and the open is refused.
        if target & H == 0 {
            return None;
        }
        target &= !H;
        if e.is_oplock() {
            target &= !W;
        }
    } else if target & W != 0 {
        // Another opener: no more write caching; an oplock loses handle caching with it
        // (batch and exclusive break to level II).
        target &= !W;
        if e.is_oplock() {
            target &= !H;
        }
    }
    if impact.truncates {
        target &= !(R | W);
    }
    Some(target)
}

/// The breaks a new open caused.
#[derive(Debug)]
pub struct OpenBreaks<S> {
    /// Notices to send.
    pub notices: Vec<(S, BreakNotice)>,
    /// Whether the open must wait for acknowledgments before it goes on.
    pub wait: bool,
}

/// The identity of a lease in the table: the client's lease key scoped by its ClientGuid
/// (MS-SMB2 keeps one lease table per client, so two clients may use the same key for
/// different files). A hash, so that no client can pick a key that lands on another
/// client's lease.
pub fn scoped_lease_key(client_guid: &[u8; 16], key: &[u8; 16]) -> [u8; 16] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(client_guid);
    h.update(key);
    let d: [u8; 32] = h.finalize().into();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// The oplock level of a caching state.
pub fn oplock_level(state: u32) -> u8 {
    match (state & W != 0, state & H != 0, state & R != 0) {
        (true, true, _) => OPLOCK_LEVEL_BATCH,
        (true, false, _) => OPLOCK_LEVEL_EXCLUSIVE,
        (false, _, true) => OPLOCK_LEVEL_II,
        _ => OPLOCK_LEVEL_NONE,
    }
}

/// The caching state of an oplock level.
fn state_of_level(level: u8) -> u32 {
    match level {
        OPLOCK_LEVEL_BATCH => R | W | H,
        OPLOCK_LEVEL_EXCLUSIVE => R | W,
        OPLOCK_LEVEL_II => R,
        _ => 0,
    }
}

/// The oplocks and leases of one share's files.
#[derive(Debug)]
pub struct OplockTable<S> {
    files: HashMap<FileKey, Vec<Caching<S>>>,
    /// Directories holding leases, by share-relative path folded to lower case: a change
    /// to a child names its parent by path (see [`Self::break_parent`]).
    dirs: HashMap<String, FileKey>,
    timeout: Duration,
}

impl<S> Default for OplockTable<S> {
    fn default() -> Self {
        OplockTable {
            files: HashMap::new(),
            dirs: HashMap::new(),
            timeout: BREAK_TIMEOUT,
        }
    }
}

/// The key under which a directory path is found in [`OplockTable`]'s directory index
/// (names are case-insensitive on SMB shares).
fn dir_index_key(path: &str) -> String {
    path.trim_matches('\\').to_lowercase()
}

/// The share-relative path of the directory holding `path` ("" for the root).
fn parent_path(path: &str) -> &str {
    let path = path.trim_matches('\\');
    path.rfind('\\').map_or("", |i| &path[..i])
}

impl<S: Clone> OplockTable<S> {
    /// A table whose breaks time out after `timeout` (tests).
    pub fn with_timeout(timeout: Duration) -> Self {
        OplockTable {
            files: HashMap::new(),
            dirs: HashMap::new(),
            timeout,
        }
    }

    /// Indexes directory `file` under `path` once it holds a lease (after [`Self::grant`],
    /// and again after the directory is renamed), so that changes to its children find it.
    pub fn index_dir(&mut self, file: FileKey, path: &str) {
        if !self
            .files
            .get(&file)
            .is_some_and(|l| l.iter().any(|e| !e.is_oplock()))
        {
            return;
        }
        self.dirs.retain(|_, f| *f != file);
        self.dirs.insert(dir_index_key(path), file);
    }

    /// Whether any directory holds a lease (changes skip [`Self::break_parent`] when not).
    pub fn has_dir_leases(&self) -> bool {
        !self.dirs.is_empty()
    }

    /// Breaks the leases on the directory holding `child` after the child was added,
    /// removed, renamed or changed, but the lease of the open that made the change
    /// (`actor`: the ParentLeaseKey it gave, scoped like every lease key): its client
    /// knows what it did. A directory lease loses all caching (MS-SMB2 3.3.4.7; Windows
    /// breaks RH to none); the change does not wait for the acknowledgment.
    pub fn break_parent(
        &mut self,
        child: &str,
        actor: Option<&[u8; 16]>,
        now: Instant,
    ) -> Vec<(S, BreakNotice)> {
        let Some(&file) = self.dirs.get(&dir_index_key(parent_path(child))) else {
            return Vec::new();
        };
        let timeout = self.timeout;
        let mut out = Vec::new();
        if let Some(list) = self.files.get_mut(&file) {
            for e in list.iter_mut() {
                if e.is_oplock() || (actor.is_some() && e.key.as_ref() == actor) {
                    continue;
                }
                out.extend(Self::lower(e, 0, now, timeout));
            }
        }
        self.prune(file);
        out
    }

    /// Whether no file has any grant (the data path skips the table then).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Moves `e` towards `target`: at once when nothing cached needs flushing (R only),
    /// else as a break the owner must acknowledge. Returns the notice to send, if any.
    fn lower(
        e: &mut Caching<S>,
        target: u32,
        now: Instant,
        timeout: Duration,
    ) -> Option<(S, BreakNotice)> {
        Self::lower_with_epoch(e, target, now, timeout, true)
    }

    /// [`Self::lower`], with the lease epoch advanced (a new break) or not (the next step
    /// of a break the client just acknowledged keeps its epoch, as Windows does).
    fn lower_with_epoch(
        e: &mut Caching<S>,
        target: u32,
        now: Instant,
        timeout: Duration,
        bump_epoch: bool,
    ) -> Option<(S, BreakNotice)> {
        let target = normalize(target);
        if target == e.target() {
            return None;
        }
        if e.key.is_some() && e.breaking_to.is_some() {
            // A lease break is waiting for its acknowledgment: remember what else is
            // needed; the acknowledgment sends the next break (MS-SMB2 3.3.5.22.2).
            e.required &= target;
            return None;
        }
        e.required = target;
        let current = e.state;
        let ack_required = current & (W | H) != 0;
        if ack_required {
            e.breaking_to = Some(target);
            e.deadline.get_or_insert(now + timeout);
        } else {
            e.state = target;
        }
        if bump_epoch {
            e.epoch = e.epoch.wrapping_add(1);
        }
        let holder = e.opens.first().copied()?;
        let kind = match e.key {
            None => NoticeKind::Oplock {
                file_id: holder.file_id,
                level: oplock_level(target),
            },
            Some(key) => NoticeKind::Lease {
                key,
                wire_key: e.wire_key,
                epoch: if e.version >= 2 { e.epoch } else { 0 },
                ack_required,
                current,
                new: target,
            },
        };
        Some((
            e.sink.clone(),
            BreakNotice {
                session_id: holder.session_id,
                kind,
            },
        ))
    }

    fn prune(&mut self, file: FileKey) {
        if let Some(list) = self.files.get_mut(&file) {
            // A lease lives while its opens do, even at state none: later opens with its
            // key are not "other openers". An oplock at none is gone.
            list.retain(|e| {
                !e.opens.is_empty() && (e.key.is_some() || e.state != 0 || e.breaking_to.is_some())
            });
            if list.is_empty() {
                self.files.remove(&file);
                if !self.dirs.is_empty() {
                    self.dirs.retain(|_, f| *f != file);
                }
            }
        }
    }

    /// Breaks what a new open of `file` by the owner of lease `key` (or an oplock or plain
    /// open: `None`) conflicts with. When [`OpenBreaks::wait`] is set the caller waits
    /// (see [`Self::breaking`]) before going on with the open.
    pub fn break_for_open(
        &mut self,
        file: FileKey,
        key: Option<&[u8; 16]>,
        impact: OpenImpact,
        now: Instant,
    ) -> OpenBreaks<S> {
        let timeout = self.timeout;
        let mut out = OpenBreaks {
            notices: Vec::new(),
            wait: false,
        };
        // What an open waits for (MS-SMB2 3.3.5.9, as Windows does it): cached writes to
        // be flushed, or, when it fails its sharing check, cached handles to be closed.
        // Other breaks (read caching, handle caching without a conflict) go on while the
        // open completes.
        let delay = if impact.share_conflict { H } else { W };
        if let Some(list) = self.files.get_mut(&file) {
            for e in list.iter_mut() {
                if key.is_some() && e.key.as_ref() == key {
                    continue;
                }
                let Some(target) = open_target(e, impact) else {
                    continue;
                };
                out.notices.extend(Self::lower(e, target, now, timeout));
                if e.breaking_to.is_some() && e.state & !normalize(target) & delay != 0 {
                    out.wait = true;
                }
            }
        }
        self.prune(file);
        out
    }

    /// Breaks the handle caching other leases hold on `file` before an open holding lease
    /// `key` (if any) renames it: their cached handles would name the old path. The
    /// rename waits for those acknowledgments ([`OpenBreaks::wait`]), as on Windows.
    /// Oplocks are left alone.
    pub fn break_for_rename(
        &mut self,
        file: FileKey,
        key: Option<&[u8; 16]>,
        now: Instant,
    ) -> OpenBreaks<S> {
        let timeout = self.timeout;
        let mut out = OpenBreaks {
            notices: Vec::new(),
            wait: false,
        };
        if let Some(list) = self.files.get_mut(&file) {
            for e in list.iter_mut() {
                if e.is_oplock() || (key.is_some() && e.key.as_ref() == key) {
                    continue;
                }
                let target = e.target() & !H;
                out.notices.extend(Self::lower(e, target, now, timeout));
                if e.breaking_to.is_some() && e.state & H != 0 {
                    out.wait = true;
                }
            }
        }
        self.prune(file);
        out
    }

    /// Breaks read caching of every grant on `file` but the writer's own lease or
    /// exclusive/batch oplock (a WRITE or an end-of-file change by `writer`, holding lease
    /// `key` if any). A level II oplock breaks even on its own open's writes (Windows).
    /// Writes do not wait for acknowledgments.
    pub fn break_for_write(
        &mut self,
        file: FileKey,
        writer: OpenId,
        key: Option<&[u8; 16]>,
        now: Instant,
    ) -> Vec<(S, BreakNotice)> {
        let timeout = self.timeout;
        let mut out = Vec::new();
        if let Some(list) = self.files.get_mut(&file) {
            for e in list.iter_mut() {
                let own = match (&e.key, key) {
                    (Some(k), Some(w)) => k == w,
                    (None, _) => e.holds(writer) && e.target() & W != 0,
                    _ => false,
                };
                if own || e.target() & R == 0 {
                    continue;
                }
                out.extend(Self::lower(e, 0, now, timeout));
            }
        }
        self.prune(file);
        out
    }

    /// Whether a break on `file` of a grant other than lease `key` (the opener's own
    /// lease: its opens go on while it breaks) still waits for its acknowledgment. Breaks
    /// past their deadline are completed here (the state is lowered as if acknowledged).
    pub fn breaking(&mut self, file: FileKey, key: Option<&[u8; 16]>, now: Instant) -> bool {
        let mut waiting = false;
        if let Some(list) = self.files.get_mut(&file) {
            for e in list.iter_mut() {
                let own = key.is_some() && e.key.as_ref() == key;
                if let Some(to) = e.breaking_to {
                    if e.deadline.is_some_and(|d| now >= d) {
                        // A lease whose holder never acknowledged loses all caching
                        // (MS-SMB2 3.3.2.5); an oplock takes the level it was broken to.
                        e.state = if e.is_oplock() { to } else { 0 };
                        e.breaking_to = None;
                        e.deadline = None;
                    } else if !own {
                        waiting = true;
                    }
                }
            }
        }
        self.prune(file);
        waiting
    }

    /// Whether lease `key` is held on a file other than `file` (a lease key names one
    /// file: reusing it elsewhere is an invalid parameter).
    pub fn key_used_elsewhere(&self, key: &[u8; 16], file: FileKey) -> bool {
        self.files
            .iter()
            .any(|(f, l)| *f != file && l.iter().any(|e| e.key.as_ref() == Some(key)))
    }

    /// The file lease `key` is held on, if any.
    pub fn file_of_lease(&self, key: &[u8; 16]) -> Option<FileKey> {
        self.files
            .iter()
            .find(|(_, l)| l.iter().any(|e| e.key.as_ref() == Some(key)))
            .map(|(f, _)| *f)
    }

    /// Opens of `file` holding lease `key` (they do not count as other openers).
    pub fn opens_of_lease(&self, file: FileKey, key: &[u8; 16]) -> usize {
        self.files
            .get(&file)
            .and_then(|l| l.iter().find(|e| e.key.as_ref() == Some(key)))
            .map_or(0, |e| e.opens.len())
    }

    /// Grants `want` to a new open of `file` (after the breaks it caused are done).
    /// `others` is whether any other opener (not sharing the lease) has the file open.
    pub fn grant(
        &mut self,
        file: FileKey,
        holder: Holder,
        want: Want,
        others: bool,
        is_dir: bool,
        sink: S,
    ) -> Granted {
        let none = Granted {
            oplock_level: OPLOCK_LEVEL_NONE,
            lease: None,
            lease_version: 0,
            break_in_progress: false,
        };
        // Directories take no oplocks and only v2 leases, which cache at most reads and
        // handles (MS-SMB2 3.3.5.9.11: a request for RW or RWH is granted R or RH).
        let want = match (is_dir, want) {
            (false, w) => w,
            (
                true,
                Want::Lease {
                    key,
                    wire_key,
                    state,
                    version: 2,
                    epoch,
                },
            ) => Want::Lease {
                key,
                wire_key,
                state: state & (R | H),
                version: 2,
                epoch,
            },
            (true, _) => return none,
        };
        let list = self.files.entry(file).or_default();
        let granted = match want {
            Want::Nothing => none,
            Want::Oplock(level) => {
                let wanted = state_of_level(level);
                // A lease with handle caching on the file leaves no room for an oplock.
                let handle_lease = list.iter().any(|e| !e.is_oplock() && e.target() & H != 0);
                let state = if list.len() >= MAX_CACHING_PER_FILE || handle_lease {
                    0
                } else if !others {
                    wanted
                } else {
                    wanted & R
                };
                if state != 0 {
                    list.push(Caching {
                        key: None,
                        wire_key: [0; 16],
                        opens: vec![holder],
                        state,
                        breaking_to: None,
                        required: 0,
                        deadline: None,
                        epoch: 0,
                        version: 0,
                        sink,
                    });
                }
                Granted {
                    oplock_level: oplock_level(state),
                    lease: None,
                    lease_version: 0,
                    break_in_progress: false,
                }
            }
            Want::Lease {
                key,
                wire_key,
                state: requested,
                version,
                epoch,
            } => {
                let requested = normalize(requested);
                if let Some(e) = list.iter_mut().find(|e| e.key == Some(key)) {
                    e.opens.push(holder);
                    // An upgrade is granted whole or not at all; beside other openers it
                    // cannot add write caching.
                    let fits = !others || requested & W == 0;
                    let upgrade = fits
                        && e.breaking_to.is_none()
                        && requested & e.state == e.state
                        && requested != e.state;
                    if upgrade {
                        e.state = requested;
                        e.epoch = e.epoch.wrapping_add(1);
                    }
                    Granted {
                        oplock_level: OPLOCK_LEVEL_LEASE,
                        lease: Some((e.state, e.epoch)),
                        lease_version: e.version,
                        break_in_progress: e.breaking_to.is_some(),
                    }
                } else {
                    // Next to an oplock a lease caches reads only.
                    let oplocked = list.iter().any(|e| e.is_oplock());
                    let state = if list.len() >= MAX_CACHING_PER_FILE {
                        0
                    } else if oplocked {
                        requested & R
                    } else if others {
                        normalize(requested & !W)
                    } else {
                        requested
                    };
                    let epoch = epoch.wrapping_add(1);
                    {
                        list.push(Caching {
                            key: Some(key),
                            wire_key,
                            opens: vec![holder],
                            state,
                            breaking_to: None,
                            required: 0,
                            deadline: None,
                            epoch,
                            version,
                            sink,
                        });
                    }
                    Granted {
                        oplock_level: OPLOCK_LEVEL_LEASE,
                        lease: Some((state, epoch)),
                        lease_version: version,
                        break_in_progress: false,
                    }
                }
            }
        };
        self.prune(file);
        granted
    }

    /// An oplock break acknowledgment from `open` of `file` lowering to `level`; returns
    /// the level now held.
    pub fn ack_oplock(&mut self, file: FileKey, open: OpenId, level: u8) -> Result<u8, AckError> {
        let list = self
            .files
            .get_mut(&file)
            .ok_or(status::INVALID_OPLOCK_PROTOCOL)?;
        let e = list
            .iter_mut()
            .find(|e| e.is_oplock() && e.holds(open))
            .ok_or(status::INVALID_OPLOCK_PROTOCOL)?;
        let to = e.breaking_to.ok_or(status::INVALID_OPLOCK_PROTOCOL)?;
        if level > oplock_level(to) {
            return Err(status::INVALID_PARAMETER);
        }
        e.state = state_of_level(level);
        e.breaking_to = None;
        e.deadline = None;
        let held = oplock_level(e.state);
        self.prune(file);
        Ok(held)
    }

    /// A lease break acknowledgment lowering lease `key` to `state`; returns the state
    /// and, when conflicts that arrived during the break need more than the client gave
    /// up, the next break to send (in steps as Windows does: a lease that still caches
    /// writes or handles is first broken to at most R, with an acknowledgment; R alone
    /// is then dropped at once, without one).
    pub fn ack_lease(
        &mut self,
        key: &[u8; 16],
        state: u32,
        now: Instant,
    ) -> Result<(u32, Option<(S, BreakNotice)>), AckError> {
        let timeout = self.timeout;
        let (file, e) = self
            .files
            .iter_mut()
            .find_map(|(f, l)| {
                l.iter_mut()
                    .find(|e| e.key.as_ref() == Some(key))
                    .map(|e| (*f, e))
            })
            .ok_or(status::OBJECT_NAME_NOT_FOUND)?;
        let to = e.breaking_to.ok_or(status::UNSUCCESSFUL)?;
        if state & !to != 0 {
            return Err(status::REQUEST_NOT_ACCEPTED);
        }
        e.state = normalize(state);
        e.breaking_to = None;
        e.deadline = None;
        let held = e.state;
        let mut next = None;
        if e.state & !e.required != 0 {
            let step = if e.state & (W | H) != 0 {
                e.required | R
            } else {
                e.required
            };
            // The step is not what the server needs: keep that for the next ack.
            let required = e.required;
            next = Self::lower_with_epoch(e, step, now, timeout, false);
            e.required = required;
        }
        self.prune(file);
        Ok((held, next))
    }

    /// Points the grant `open` of `file` takes part in at a new session and connection (a
    /// durable handle reclaimed after its connection was lost); returns what it holds, as
    /// a CREATE response states it, or `None` when it holds nothing.
    pub fn reattach(
        &mut self,
        file: FileKey,
        open: OpenId,
        session_id: u64,
        sink: S,
    ) -> Option<Granted> {
        let e = self
            .files
            .get_mut(&file)?
            .iter_mut()
            .find(|e| e.holds(open))?;
        for h in e.opens.iter_mut().filter(|h| h.open == open) {
            h.session_id = session_id;
        }
        e.sink = sink;
        Some(if e.is_oplock() {
            Granted {
                oplock_level: oplock_level(e.state),
                lease: None,
                lease_version: 0,
                break_in_progress: false,
            }
        } else {
            Granted {
                oplock_level: OPLOCK_LEVEL_LEASE,
                lease: Some((e.state, e.epoch)),
                lease_version: e.version,
                break_in_progress: false,
            }
        })
    }

    /// What the grant `open` of `file` takes part in holds, as a CREATE response states
    /// it (a replayed CREATE answers with it); `None` when it holds nothing.
    pub fn held(&self, file: FileKey, open: OpenId) -> Option<Granted> {
        let e = self.files.get(&file)?.iter().find(|e| e.holds(open))?;
        Some(if e.is_oplock() {
            Granted {
                oplock_level: oplock_level(e.state),
                lease: None,
                lease_version: 0,
                break_in_progress: false,
            }
        } else {
            Granted {
                oplock_level: OPLOCK_LEVEL_LEASE,
                lease: Some((e.state, e.epoch)),
                lease_version: e.version,
                break_in_progress: e.breaking_to.is_some(),
            }
        })
    }

    /// Whether `open` of `file` holds handle caching (a batch oplock, or a lease with H):
    /// what a durable handle requires.
    pub fn holds_handle_caching(&self, file: FileKey, open: OpenId) -> bool {
        self.files
            .get(&file)
            .is_some_and(|l| l.iter().any(|e| e.holds(open) && e.state & H != 0))
    }

    /// Forgets `open` of `file` (CLOSE, logoff, disconnect).
    pub fn close(&mut self, file: FileKey, open: OpenId) {
        if let Some(list) = self.files.get_mut(&file) {
            for e in list.iter_mut() {
                e.opens.retain(|h| h.open != open);
            }
        }
        self.prune(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(open: OpenId) -> Holder {
        Holder {
            open,
            file_id: FileId {
                persistent: open,
                volatile: open,
            },
            session_id: 1,
        }
    }

    fn lease(key: u8, state: u32) -> Want {
        Want::Lease {
            key: [key; 16],
            wire_key: [key; 16],
            state,
            version: 2,
            epoch: 0,
        }
    }

    #[test]
    fn directories_take_v2_leases_of_read_and_handle_caching_only() {
        let mut t = OplockTable::<u32>::default();
        let g = t.grant(5, holder(10), lease(2, R | W | H), false, true, 7);
        assert_eq!(g.lease, Some((R | H, 1)));
        let g = t.grant(6, holder(11), lease(3, R | W), false, true, 7);
        assert_eq!(g.lease, Some((R, 1)));
        let v1 = Want::Lease {
            key: [4; 16],
            wire_key: [4; 16],
            state: R | H,
            version: 1,
            epoch: 0,
        };
        assert_eq!(t.grant(7, holder(12), v1, false, true, 7).lease, None);
        let g = t.grant(
            8,
            holder(13),
            Want::Oplock(OPLOCK_LEVEL_BATCH),
            false,
            true,
            7,
        );
        assert_eq!(g.oplock_level, OPLOCK_LEVEL_NONE);
    }

    #[test]
    fn a_change_in_a_leased_directory_breaks_it_but_not_for_its_own_parent_key() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        t.grant(5, holder(10), lease(2, R | H), false, true, 7);
        t.index_dir(5, "Data\\Sub");
        assert!(t.has_dir_leases());
        // The lease holder's own change (its ParentLeaseKey) and changes elsewhere: none.
        assert!(t
            .break_parent("data\\sub\\f.txt", Some(&[2; 16]), now)
            .is_empty());
        assert!(t.break_parent("data\\f.txt", None, now).is_empty());
        assert!(t
            .break_parent("data\\sub\\deeper\\f.txt", None, now)
            .is_empty());
        // Anyone else's: RH to none, acknowledged (H was held), epoch advanced.
        let n = t.break_parent("DATA\\SUB\\f.txt", Some(&[9; 16]), now);
        assert_eq!(n.len(), 1);
        assert!(matches!(
            n[0].1.kind,
            NoticeKind::Lease {
                current,
                new: 0,
                ack_required: true,
                epoch: 2,
                ..
            } if current == R | H
        ));
        assert_eq!(t.ack_lease(&[2; 16], 0, now).map(|(s, _)| s), Ok(0));
        // A renamed directory is found under its new name; a closed one is forgotten.
        t.index_dir(5, "moved");
        assert!(t.break_parent("data\\sub\\f", None, now).is_empty());
        t.close(5, 10);
        assert!(!t.has_dir_leases());
    }

    #[test]
    fn an_unleased_directory_is_not_indexed() {
        let mut t = OplockTable::<u32>::default();
        t.grant(5, holder(10), Want::Nothing, false, true, 7);
        t.index_dir(5, "plain");
        assert!(!t.has_dir_leases());
    }

    #[test]
    fn a_write_breaks_every_level_two_oplock_the_writers_own_too() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        let batch = Want::Oplock(OPLOCK_LEVEL_BATCH);
        t.grant(1, holder(10), batch, false, false, 7);
        t.break_for_open(1, None, OpenImpact::default(), now);
        assert_eq!(t.ack_oplock(1, 10, OPLOCK_LEVEL_II), Ok(OPLOCK_LEVEL_II));
        let g = t.grant(1, holder(11), batch, true, false, 8);
        assert_eq!(g.oplock_level, OPLOCK_LEVEL_II);
        t.close(1, 11);
        let g = t.grant(1, holder(12), batch, true, false, 8);
        assert_eq!(g.oplock_level, OPLOCK_LEVEL_II);
        let n = t.break_for_write(1, 12, None, now);
        let mut sinks: Vec<u32> = n.iter().map(|(s, _)| *s).collect();
        sinks.sort();
        assert_eq!(sinks, vec![7, 8]);
    }

    #[test]
    fn a_sole_opener_gets_what_it_asks_and_a_second_breaks_it_to_level_two() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        let g = t.grant(
            1,
            holder(10),
            Want::Oplock(OPLOCK_LEVEL_BATCH),
            false,
            false,
            7,
        );
        assert_eq!(g.oplock_level, OPLOCK_LEVEL_BATCH);
        let n = t
            .break_for_open(1, None, OpenImpact::default(), now)
            .notices;
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, 7);
        assert!(matches!(
            n[0].1.kind,
            NoticeKind::Oplock {
                level: OPLOCK_LEVEL_II,
                ..
            }
        ));
        assert!(t.breaking(1, None, now));
        assert_eq!(t.ack_oplock(1, 10, OPLOCK_LEVEL_II), Ok(OPLOCK_LEVEL_II));
        assert!(!t.breaking(1, None, now));
        let g = t.grant(
            1,
            holder(11),
            Want::Oplock(OPLOCK_LEVEL_BATCH),
            true,
            false,
            8,
        );
        assert_eq!(g.oplock_level, OPLOCK_LEVEL_II);
        // A write by the second open breaks both level II oplocks (its own too) to none,
        // no ack needed.
        let n = t.break_for_write(1, 11, None, now);
        assert_eq!(n.len(), 2);
        assert!(matches!(
            n[0].1.kind,
            NoticeKind::Oplock {
                level: OPLOCK_LEVEL_NONE,
                ..
            }
        ));
        assert!(!t.breaking(1, None, now));
        assert_eq!(
            t.ack_oplock(1, 10, OPLOCK_LEVEL_NONE),
            Err(status::INVALID_OPLOCK_PROTOCOL)
        );
    }

    #[test]
    fn lease_keys_are_scoped_by_client() {
        let a = scoped_lease_key(&[1; 16], &[7; 16]);
        assert_eq!(a, scoped_lease_key(&[1; 16], &[7; 16]));
        assert_ne!(a, scoped_lease_key(&[2; 16], &[7; 16]));
        assert_ne!(a, scoped_lease_key(&[1; 16], &[8; 16]));
    }

    #[test]
    fn leases_of_the_same_key_do_not_conflict_and_other_keys_lose_write_caching() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        let g = t.grant(1, holder(1), lease(1, R | W | H), false, false, 1);
        assert_eq!(g.lease, Some((R | W | H, 1)));
        assert!(t
            .break_for_open(1, Some(&[1; 16]), OpenImpact::default(), now)
            .notices
            .is_empty());
        let g = t.grant(1, holder(2), lease(1, R | W | H), false, false, 1);
        assert_eq!(g.lease.map(|l| l.0), Some(R | W | H));
        assert_eq!(t.opens_of_lease(1, &[1; 16]), 2);

        let n = t
            .break_for_open(1, Some(&[2; 16]), OpenImpact::default(), now)
            .notices;
        assert_eq!(n.len(), 1);
        match n[0].1.kind {
            NoticeKind::Lease {
                ack_required,
                current,
                new,
                ..
            } => {
                assert!(ack_required);
                assert_eq!((current, new), (R | W | H, R | H));
            }
            other => panic!("{other:?}"),
        }
        assert!(t.breaking(1, None, now));
        assert_eq!(
            t.ack_lease(&[1; 16], R | W, now).map(|a| a.0),
            Err(status::REQUEST_NOT_ACCEPTED)
        );
        assert_eq!(t.ack_lease(&[1; 16], R | H, now).map(|a| a.0), Ok(R | H));
        assert_eq!(
            t.ack_lease(&[1; 16], R, now).map(|a| a.0),
            Err(status::UNSUCCESSFUL)
        );
        let g = t.grant(1, holder(3), lease(2, R | W | H), true, false, 2);
        assert_eq!(g.lease.map(|l| l.0), Some(R | H));
    }

    #[test]
    fn sharing_conflicts_break_handle_caching_and_truncation_breaks_reading() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        t.grant(1, holder(1), lease(1, R | H), false, false, 1);
        let conflict = OpenImpact {
            share_conflict: true,
            ..OpenImpact::default()
        };
        let n = t.break_for_open(1, None, conflict, now).notices;
        assert!(matches!(n[0].1.kind, NoticeKind::Lease { new: R, .. }));
        assert_eq!(t.ack_lease(&[1; 16], R, now).map(|a| a.0), Ok(R));
        let truncate = OpenImpact {
            truncates: true,
            ..OpenImpact::default()
        };
        let n = t.break_for_open(1, None, truncate, now).notices;
        assert!(matches!(
            n[0].1.kind,
            NoticeKind::Lease {
                new: 0,
                ack_required: false,
                ..
            }
        ));
        assert!(!t.is_empty(), "a lease at none lives while its open does");
        t.close(1, 1);
        assert!(t.is_empty());
    }

    #[test]
    fn conflicts_during_a_lease_break_wait_for_its_ack_and_then_break_in_steps() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        t.grant(1, holder(1), lease(1, R | W | H), false, false, 1);
        // A plain open breaks RWH to RH and must wait: cached writes need flushing.
        let b = t.break_for_open(1, None, OpenImpact::default(), now);
        assert!(b.wait);
        assert!(
            matches!(b.notices[0].1.kind, NoticeKind::Lease { new, current, .. } if new == R | H && current == R | W | H)
        );
        // The owner's own key joins the lease at once and learns a break is running.
        assert!(!t.breaking(1, Some(&[1; 16]), now));
        assert!(t.breaking(1, None, now));
        let g = t.grant(1, holder(2), lease(1, R | W | H), true, false, 1);
        assert_eq!(g.lease.map(|l| l.0), Some(R | W | H));
        assert!(g.break_in_progress);
        // An overwrite meanwhile sends nothing more, but waits.
        let truncate = OpenImpact {
            truncates: true,
            ..OpenImpact::default()
        };
        let b = t.break_for_open(1, None, truncate, now);
        assert!(b.notices.is_empty() && b.wait);
        // The ack to RH starts the next step: to R, acknowledged, keeping the epoch.
        let (held, next) = t.ack_lease(&[1; 16], R | H, now).unwrap_or((0, None));
        assert_eq!(held, R | H);
        assert!(matches!(
            next.map(|n| n.1.kind),
            Some(NoticeKind::Lease {
                new: R,
                ack_required: true,
                epoch: 2,
                ..
            })
        ));
        // The ack to R drops R at once, without an acknowledgment.
        let (held, next) = t.ack_lease(&[1; 16], R, now).unwrap_or((0, None));
        assert_eq!(held, R);
        assert!(matches!(
            next.map(|n| n.1.kind),
            Some(NoticeKind::Lease {
                new: 0,
                ack_required: false,
                ..
            })
        ));
        assert!(!t.breaking(1, None, now));
    }

    #[test]
    fn a_rename_breaks_other_leases_handles_and_waits_but_not_its_own() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        t.grant(1, holder(1), lease(1, R | H), false, false, 1);
        t.grant(1, holder(2), lease(2, R | H), true, false, 1);
        t.grant(1, holder(3), Want::Oplock(OPLOCK_LEVEL_II), true, false, 1);
        let b = t.break_for_rename(1, Some(&[1; 16]), now);
        assert!(b.wait);
        assert_eq!(b.notices.len(), 1, "only the other lease: {:?}", b.notices);
        assert!(
            matches!(b.notices[0].1.kind, NoticeKind::Lease { key, new: R, .. } if key == [2; 16])
        );
        let b = t.break_for_rename(1, Some(&[1; 16]), now);
        assert!(
            b.notices.is_empty() && b.wait,
            "still waiting, no second notice"
        );
        let _ = t.ack_lease(&[2; 16], R, now);
        assert!(!t.break_for_rename(1, Some(&[1; 16]), now).wait);
    }

    #[test]
    fn opens_wait_only_for_write_caching_or_handles_they_conflict_with() {
        let mut t = OplockTable::<u32>::default();
        let now = Instant::now();
        t.grant(1, holder(1), lease(1, R | H), false, false, 1);
        let truncate = OpenImpact {
            truncates: true,
            ..OpenImpact::default()
        };
        // An overwrite of an RH lease breaks it to none (acknowledged) but goes on.
        let b = t.break_for_open(1, None, truncate, now);
        assert!(!b.wait);
        assert!(matches!(
            b.notices[0].1.kind,
            NoticeKind::Lease {
                new: 0,
                ack_required: true,
                ..
            }
        ));
        let mut t = OplockTable::<u32>::default();
        t.grant(1, holder(1), lease(1, R | H), false, false, 1);
        let conflict = OpenImpact {
            share_conflict: true,
            ..OpenImpact::default()
        };
        assert!(t.break_for_open(1, None, conflict, now).wait);
    }

    #[test]
    fn attribute_only_opens_break_nothing_and_timeouts_lower_the_state() {
        let mut t = OplockTable::<u32>::with_timeout(Duration::from_millis(0));
        let now = Instant::now();
        t.grant(
            5,
            holder(1),
            Want::Oplock(OPLOCK_LEVEL_EXCLUSIVE),
            false,
            false,
            1,
        );
        let stat = OpenImpact {
            attributes_only: true,
            lease_stat_open: true,
            ..OpenImpact::default()
        };
        assert!(t.break_for_open(5, None, stat, now).notices.is_empty());
        assert_eq!(
            t.break_for_open(5, None, OpenImpact::default(), now)
                .notices
                .len(),
            1
        );
        assert!(!t.breaking(5, None, now + Duration::from_millis(1)));
        t.close(5, 1);
        assert!(t.is_empty());
    }
}
