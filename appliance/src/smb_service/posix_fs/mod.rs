//! The SMB server's storage, implemented over a share's directory on a POSIX file system
//! ([`quarry_smb::vfs::ShareFs`]).
//!
//! Map:
//! - [`sys`]: the Linux system calls (`openat2`, `statx`, xattrs, `renameat2`, ...).
//! - [`resolve`]: confinement beneath the share root and case-insensitive name lookup with a
//!   bounded per-directory cache.
//! - [`attrs`]: DOS attributes and creation time in `user.` xattrs; `FileInfo`.
//! - [`file`](mod@file): one open file or directory (`FsFile`): I/O with quota charging,
//!   set-info, rename, delete, sparse ranges.
//! - [`dir`]: directory enumeration cursors.
//! - [`write_time`]: delayed write-time updates per open (pure state machine).
//! - [`shown_time`]: the write time a file shows instead of mtime while an update is
//!   pending, kept in memory so that writes and most closes set no times.
//! - [`known_stored`]: an open's memo of its file's stored attributes, reused while the
//!   file's ctime proves them current, so that queries and closes read no xattrs.
//!
//! Invariants: every path the client names is validated by `quarry_smb::vfs::names` and then
//! opened with `RESOLVE_BENEATH` from the root descriptor, so nothing outside the share is
//! reachable, symlinks included; the share's quota is charged before a file grows and
//! released when it shrinks or is deleted.

pub mod attrs;
pub mod descriptor;
pub mod dir;
pub mod direct;
pub mod ea;
pub mod fanotify;
pub mod file;
pub mod known_stored;
pub mod outside;
pub mod resolve;
pub mod shared_reads;
pub mod shown_time;
pub mod stream;
pub mod stream_store;
pub mod sys;
#[cfg(test)]
mod tests;
pub mod write_time;

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock, Weak};

use quarry_smb::vfs::names::split_path;
use quarry_smb::vfs::{
    attr, create_options, fs_attr, CreateAction, CreateDisposition, CreateRequest, ExistingFile,
    FileInfo, FsError, FsInfo, Opened, ShareFs,
};

use crate::pool::ShareQuota;
use attrs::XattrSupport;
use file::PosixFile;
use resolve::{Located, NameCache};

/// Mode of files this share creates (before the process umask).
const NEW_FILE_MODE: u32 = 0o666;
/// Mode of directories this share creates (before the process umask).
const NEW_DIR_MODE: u32 = 0o777;
/// Logical sector size reported to clients.
const BYTES_PER_SECTOR: u32 = 512;
/// Longest component name, in characters, reported to clients.
const MAX_COMPONENT_NAME: u32 = 255;
/// File-system name reported to clients ("NTFS" unlocks their full feature set).
const FS_NAME: &str = "NTFS";
/// The size-lock table is swept of dead entries when it grows past this many.
const SIZE_LOCK_SWEEP_AT: usize = 4096;

/// Per-share settings of the POSIX implementation.
#[derive(Debug, Clone, Default)]
pub struct PosixShareConfig {
    /// Volume label reported by FileFsVolumeInformation (the share name).
    pub label: String,
    /// Refuse every change (defence in depth; the server refuses write access first).
    pub read_only: bool,
}

/// What every open of one file shares: the lock that orders size changes (extending writes,
/// truncates; write half) against in-place writes (read half), so the quota is charged
/// exactly once for each byte of growth, the epoch of explicit write-time sets
/// (see [`write_time`]), the write time shown instead of mtime (see [`shown_time`]), and the
/// reads its opens share (see [`shared_reads`]).
#[derive(Debug, Default)]
pub struct InodeShared {
    /// Size-change lock.
    pub(crate) size: RwLock<()>,
    /// The size an open last saw or set under the size lock. A write ending beyond it
    /// most likely extends the file, so it takes the lock's write half at once instead of
    /// first reading the size under the read half. Only a hint: both halves read the
    /// size again, so a stale one (a change by another process) costs time, not
    /// correctness.
    pub(crate) size_hint: AtomicU64,
    /// Bumped whenever a client sets the write time explicitly through any open.
    pub(crate) write_epoch: AtomicU64,
    /// The write time shown instead of mtime while a delayed update is pending.
    pub(crate) shown: shown_time::ShownWriteTime,
    /// Recent large reads that other opens may answer with, and the count of data changes
    /// that ends them.
    pub(crate) reads: shared_reads::SharedReads,
}

/// The [`InodeShared`] of every open file of a share.
#[derive(Default)]
pub struct SizeLocks {
    map: Mutex<HashMap<InodeKey, Weak<InodeShared>>>,
    /// How many of them show a write time of their own.
    shown: shown_time::ShownCount,
}

/// (device, inode): the identity of a file across its names and opens.
type InodeKey = (u64, u64);

impl SizeLocks {
    fn get(&self, key: InodeKey) -> Arc<InodeShared> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(shared) = map.get(&key).and_then(Weak::upgrade) {
            return shared;
        }
        if map.len() >= SIZE_LOCK_SWEEP_AT {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let shared = Arc::new(InodeShared {
            shown: shown_time::ShownWriteTime::new(self.shown.clone()),
            ..InodeShared::default()
        });
        map.insert(key, Arc::downgrade(&shared));
        shared
    }

    /// Puts the write time the open file `key` shows instead of mtime, if it shows one,
    /// into `info` (a directory listing's entry). Costs nothing while no file of the share
    /// shows one.
    pub(crate) fn show_in(&self, key: InodeKey, info: &mut FileInfo) {
        if !self.shown.any() {
            return;
        }
        let shared = {
            let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.get(&key).and_then(Weak::upgrade)
        };
        if let Some(shared) = shared {
            shared.shown.apply(info);
        }
    }
}

/// State shared by a share and all its open files.
pub struct ShareInner {
    /// The share root, opened `O_RDONLY | O_DIRECTORY`: the anchor of every `openat2`.
    pub(crate) root: OwnedFd,
    pub(crate) quota: Arc<ShareQuota>,
    pub(crate) config: PosixShareConfig,
    pub(crate) names: NameCache,
    pub(crate) xattrs: XattrSupport,
    pub(crate) size_locks: SizeLocks,
}

/// One share's files, served from its directory.
#[derive(Clone)]
pub struct PosixShareFs {
    inner: Arc<ShareInner>,
}

impl PosixShareFs {
    /// Opens the share rooted at `root` (which must exist), charging growth to `quota`.
    /// Fails if the kernel lacks `openat2` (Linux < 5.6): without it paths cannot be confined.
    pub fn open(
        root: &Path,
        quota: Arc<ShareQuota>,
        config: PosixShareConfig,
    ) -> Result<PosixShareFs, FsError> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(root)
            .map_err(|e| FsError::from_io(format!("open share root {}", root.display()), e))?;
        let root_fd = OwnedFd::from(dir);
        sys::openat_beneath(root_fd.as_fd(), c".", libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| FsError::from_io("openat2 probe (kernel 5.6 or later is required)", e))?;
        Ok(PosixShareFs {
            inner: Arc::new(ShareInner {
                root: root_fd,
                quota,
                config,
                names: NameCache::default(),
                xattrs: XattrSupport::default(),
                size_locks: SizeLocks::default(),
            }),
        })
    }

    /// Starts reporting changes made to this share outside the SMB server to `sink`
    /// (see [`outside`]); fails where fanotify cannot watch it.
    pub fn watch_outside_changes(
        &self,
        sink: quarry_smb::notify::OutsideChangeSink,
    ) -> std::io::Result<outside::FanotifyWatcher> {
        outside::FanotifyWatcher::start(self.inner.clone(), sink)
    }

    fn open_root(&self, req: &CreateRequest<'_>) -> Result<Made, FsError> {
        use CreateDisposition::*;
        if req.options & create_options::NON_DIRECTORY_FILE != 0 {
            return Err(FsError::IsDirectory);
        }
        match req.disposition {
            Open | OpenIf => {}
            Create => return Err(FsError::Exists("share root".into())),
            Supersede | Overwrite | OverwriteIf => {
                return Err(FsError::InvalidParameter(
                    "cannot overwrite a directory".into(),
                ))
            }
        }
        let fd = resolve::open_beneath(
            self.inner.root.as_fd(),
            &[],
            libc::O_RDONLY | libc::O_DIRECTORY,
            true,
        )?;
        if let Some(gate) = req.security {
            let stored = descriptor::read(fd.as_fd(), &self.inner.xattrs)?;
            gate.check_existing(&ExistingFile {
                descriptor: stored.as_deref(),
                is_dir: true,
                parent: None,
            })?;
        }
        let (st, info) = attrs::info_of(fd.as_fd(), &self.inner.xattrs)?;
        let file = PosixFile::new(self.inner.clone(), fd, &st, Vec::new(), false, false);
        let info = file.opened_info(info);
        Ok((file, CreateAction::Opened, info))
    }

    /// Opens the existing object at `comps` (stored components from the share root);
    /// `cached` resolves it from the kernel's caches alone ([`ShareFs::open_cached`]).
    /// `parent_fd` is its parent directory when the caller has it open; else the parent
    /// is opened only if the security check asks for its descriptor (rare), which saves
    /// a cached open two system calls.
    fn open_existing(
        &self,
        comps: Vec<String>,
        parent_fd: Option<BorrowedFd<'_>>,
        req: &CreateRequest<'_>,
        cached: bool,
    ) -> Result<Made, FsError> {
        use CreateDisposition::*;
        let truncate = matches!(req.disposition, Supersede | Overwrite | OverwriteIf);
        let want_write = req.write || truncate;
        if want_write && self.inner.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let root = self.inner.root.as_fd();
        let rw = if want_write {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        let open = |flags| {
            if cached {
                resolve::open_beneath_cached(root, &comps, flags)
            } else {
                resolve::open_beneath(root, &comps, flags, false)
            }
        };
        let fd = match open(rw | libc::O_NONBLOCK) {
            Err(FsError::IsDirectory) => open(libc::O_RDONLY | libc::O_DIRECTORY)?,
            other => other?,
        };
        let (st, stored, read_at) = attrs::stat_and_stored(fd.as_fd(), &self.inner.xattrs)?;
        let info = attrs::file_info(&st, &stored);
        if !st.is_dir() && !st.is_file() {
            return Err(FsError::UnsupportedType);
        }
        if st.is_dir() {
            if req.options & create_options::NON_DIRECTORY_FILE != 0 {
                return Err(FsError::IsDirectory);
            }
            if truncate {
                return Err(FsError::InvalidParameter(
                    "cannot overwrite a directory".into(),
                ));
            }
        } else if req.options & create_options::DIRECTORY_FILE != 0 {
            return Err(FsError::NotDirectory);
        }
        if want_write && !st.is_dir() && info.attributes & attr::READONLY != 0 {
            return Err(FsError::AccessDenied(
                "file has the read-only attribute".into(),
            ));
        }
        if req.options & create_options::DELETE_ON_CLOSE != 0
            && info.attributes & attr::READONLY != 0
        {
            return Err(FsError::CannotDelete(
                "delete-on-close of a read-only file".into(),
            ));
        }
        if let Some(gate) = req.security {
            let stored = descriptor::read(fd.as_fd(), &self.inner.xattrs)?;
            let xattrs = &self.inner.xattrs;
            let parent = || match parent_fd {
                Some(dir) => descriptor::read_dir(dir, xattrs),
                None => {
                    let dirs = comps.split_last().map(|(_, d)| d).unwrap_or_default();
                    let dir = if cached {
                        resolve::open_beneath_cached(root, dirs, resolve::PARENT_FLAGS)?
                    } else {
                        resolve::open_beneath(root, dirs, resolve::PARENT_FLAGS, true)?
                    };
                    descriptor::read_dir(dir.as_fd(), xattrs)
                }
            };
            gate.check_existing(&ExistingFile {
                descriptor: stored.as_deref(),
                is_dir: st.is_dir(),
                parent: Some(&parent),
            })?;
        }
        // MS-FSA 2.1.5.1.2.1: replacing a hidden or system file must say so.
        let kept = info.attributes & (attr::HIDDEN | attr::SYSTEM);
        if truncate && kept & !req.attributes != 0 {
            return Err(FsError::AccessDenied(
                "overwrite must keep HIDDEN/SYSTEM".into(),
            ));
        }
        let write_through = req.options & create_options::WRITE_THROUGH != 0;
        let file = PosixFile::new(
            self.inner.clone(),
            fd,
            &st,
            comps,
            want_write && !st.is_dir(),
            write_through,
        );
        file.remember_stored(&st, stored, read_at);
        let action = match req.disposition {
            Supersede => CreateAction::Superseded,
            Overwrite | OverwriteIf => CreateAction::Overwritten,
            Open | OpenIf | Create => CreateAction::Opened,
        };
        let info = if truncate {
            file.truncate_for_overwrite(req.attributes)?;
            file.set_allocation_hint(req.allocation_size);
            file.current_info()?
        } else {
            file.opened_info(info)
        };
        Ok((file, action, info))
    }

    /// Creates `loc`'s name, which `locate` did not find (or, from
    /// [`resolve::locate_parent`], did not look up). An existing name, in any spelling,
    /// wins over every refusal (OBJECT_NAME_COLLISION), as when `locate` finds it.
    fn create_new(&self, loc: &Located, req: &CreateRequest<'_>) -> Result<Made, FsError> {
        let parent = loc.parent_fd.as_fd();
        let cname = sys::cstr(&loc.name).map_err(|_| FsError::InvalidName(loc.name.clone()))?;
        let is_dir = req.options & create_options::DIRECTORY_FILE != 0;
        let ns = self.inner.names.lock_dir(parent)?;
        // The name may exist in any spelling (another open of this share may have made it
        // since `locate`): the name cache knows every spelling, the exact one included
        // (where it does not know the directory, a stat of the exact name, then a scan).
        // One made by another process meanwhile is refused by O_EXCL / mkdirat (EEXIST).
        if let Some(stored) = resolve::case_match_locked(&self.inner.names, &ns, parent, &loc.name)?
        {
            return Err(FsError::Exists(stored));
        }
        if self.inner.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        // MS-FSA 2.1.5.1.1: refused before anything is created.
        if req.options & create_options::DELETE_ON_CLOSE != 0
            && req.attributes & attr::READONLY != 0
        {
            return Err(FsError::CannotDelete(
                "delete-on-close of a read-only file".into(),
            ));
        }
        let new_descriptor = match req.security {
            Some(gate) => {
                let parent_sd = descriptor::read_dir(parent, &self.inner.xattrs)?;
                Some(gate.descriptor_for_new(parent_sd.as_deref(), is_dir)?)
            }
            None => None,
        };
        let fd = if is_dir {
            sys::mkdirat(parent, &cname, NEW_DIR_MODE)
                .map_err(|e| FsError::from_io(format!("mkdir {:?}", loc.name), e))?;
            sys::openat(
                parent,
                &cname,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(|e| FsError::from_io(format!("open new directory {:?}", loc.name), e))?
        } else {
            let flags = libc::O_CREAT
                | libc::O_EXCL
                | libc::O_RDWR
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_NOCTTY;
            sys::openat(parent, &cname, flags, NEW_FILE_MODE)
                .map_err(|e| FsError::from_io(format!("create {:?}", loc.name), e))?
        };
        self.inner.names.note_added(&ns, parent, &loc.name);
        drop(ns);
        let requested = req.attributes & attr::SETTABLE;
        let stored = if is_dir {
            requested
        } else {
            requested | attr::ARCHIVE
        };
        let store_attributes = stored != attrs::default_attributes(is_dir) & attr::SETTABLE;
        if store_attributes {
            attrs::write_attributes(fd.as_fd(), stored, &self.inner.xattrs)?;
        }
        if let Some(sd) = &new_descriptor {
            descriptor::write(fd.as_fd(), sd, &self.inner.xattrs, true)?;
        }
        let write_through = req.options & create_options::WRITE_THROUGH != 0;
        // The new file carries only the xattrs written just above, so its attributes are
        // known without listing them back.
        let st = sys::fstat(fd.as_fd()).map_err(|e| FsError::from_io("stat", e))?;
        let known = attrs::Stored {
            attributes: (store_attributes && self.inner.xattrs.enabled()).then_some(stored),
            creation_time: None,
        };
        let info = attrs::file_info(&st, &known);
        let file = PosixFile::new(
            self.inner.clone(),
            fd,
            &st,
            loc.components(),
            !is_dir,
            write_through,
        );
        if !is_dir {
            file.set_allocation_hint(req.allocation_size);
        }
        let info = file.opened_info(info);
        Ok((file, CreateAction::Created, info))
    }
}

/// A file or directory opened or created by [`PosixShareFs::create_file`], what was done,
/// and its metadata as of the open (read once while opening, not again for the answer).
type Made = (PosixFile, CreateAction, FileInfo);

impl PosixShareFs {
    /// Opens or creates a named stream: its file first (created empty when the
    /// disposition may create and it is missing), then the stream per the disposition.
    fn open_stream(&self, req: &CreateRequest<'_>, stream: &str) -> Result<Opened, FsError> {
        use CreateDisposition::*;
        if req.options & create_options::DIRECTORY_FILE != 0 {
            return Err(FsError::NotDirectory);
        }
        let file_req = CreateRequest {
            disposition: if req.disposition.may_create() {
                OpenIf
            } else {
                Open
            },
            options: req.options
                & !(create_options::DELETE_ON_CLOSE
                    | create_options::NON_DIRECTORY_FILE
                    | create_options::DIRECTORY_FILE),
            write: false,
            stream: None,
            ..req.clone()
        };
        let (file, file_action, _) = self.create_file(&file_req)?;
        let fd = file.raw_fd();
        let existing = stream::find_stream(fd, &self.inner.xattrs, stream)?;
        let truncate = matches!(req.disposition, Supersede | Overwrite | OverwriteIf);
        let changes = truncate || existing.is_none();
        if changes && self.inner.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let (name, action) = match (existing, req.disposition) {
            (Some(_), Create) => return Err(FsError::Exists(format!("stream {stream:?}"))),
            (None, Open | Overwrite) => {
                return Err(FsError::NotFound(format!("stream {stream:?}")))
            }
            (Some(n), Open | OpenIf) => (n, CreateAction::Opened),
            (Some(n), Overwrite | OverwriteIf) => (n, CreateAction::Overwritten),
            (Some(n), Supersede) => (n, CreateAction::Superseded),
            (None, _) => (stream.to_string(), CreateAction::Created),
        };
        if changes {
            stream::reset(fd, &self.inner, &name)?;
        }
        let _ = file_action;
        let opened = stream::StreamFile::new(file, name, req.write || truncate);
        let info = quarry_smb::vfs::FsFile::info(&opened)?;
        Ok(Opened {
            file: Box::new(opened),
            action,
            info,
        })
    }

    /// Opens or creates the file or directory itself (no stream).
    fn create_file(&self, req: &CreateRequest<'_>) -> Result<Made, FsError> {
        use CreateDisposition::*;
        check_create_options(req)?;
        let comps = split_path(req.path)?;
        if comps.is_empty() {
            return self.open_root(req);
        }
        let root = self.inner.root.as_fd();
        let loc = if req.disposition == Create {
            // The name is looked up, in every spelling, by `create_new` under its
            // directory's namespace lock: not once here and again there.
            resolve::locate_parent(&self.inner.names, root, &comps)?
        } else {
            resolve::locate(&self.inner.names, root, &comps)?
        };
        if loc.exists {
            return match req.disposition {
                Create => Err(FsError::Exists(req.path.to_string())),
                _ => self.open_existing(loc.components(), Some(loc.parent_fd.as_fd()), req, false),
            };
        }
        match req.disposition {
            Open | Overwrite => Err(FsError::NotFound(req.path.to_string())),
            Create => self.create_new(&loc, req),
            Supersede | OpenIf | OverwriteIf => match self.create_new(&loc, req) {
                // Lost a race with another creator: open what they made.
                Err(FsError::Exists(_)) => {
                    let again =
                        resolve::locate(&self.inner.names, self.inner.root.as_fd(), &comps)?;
                    self.open_existing(
                        again.components(),
                        Some(again.parent_fd.as_fd()),
                        req,
                        false,
                    )
                }
                other => other,
            },
        }
    }
}

impl ShareFs for PosixShareFs {
    fn create(&self, req: &CreateRequest<'_>) -> Result<Opened, FsError> {
        // The side store of large streams is no client's to see.
        if stream_store::path_is_reserved(req.path) {
            return Err(FsError::NotFound(req.path.to_string()));
        }
        if let Some(stream) = req.stream {
            return self.open_stream(req, stream);
        }
        let (file, action, info) = self.create_file(req)?;
        Ok(Opened {
            file: Box::new(file),
            action,
            info,
        })
    }

    fn open_cached(&self, req: &CreateRequest<'_>) -> Result<Opened, FsError> {
        use CreateDisposition::*;
        // Only a plain open of an existing file or directory by its stored spelling:
        // creating, truncating and streams write; a name spelled in another case needs the
        // resolver's directory scan; the share root and reserved names are rare.
        if req.stream.is_some()
            || !matches!(req.disposition, Open | OpenIf)
            || stream_store::path_is_reserved(req.path)
        {
            return Err(FsError::WouldBlock);
        }
        check_create_options(req)?;
        let comps = split_path(req.path)?;
        let Some((last, dirs)) = comps.split_last() else {
            return Err(FsError::WouldBlock);
        };
        let comps: Vec<String> = dirs.iter().chain([last]).map(|c| c.to_string()).collect();
        let (file, action, info) = self.open_existing(comps, None, req, true)?;
        Ok(Opened {
            file: Box::new(file),
            action,
            info,
        })
    }

    fn fs_info(&self) -> Result<FsInfo, FsError> {
        let root = self.inner.root.as_fd();
        let vfs = sys::fstatvfs(root).map_err(|e| FsError::from_io("statvfs share root", e))?;
        let (st, info) = attrs::info_of(root, &self.inner.xattrs)?;
        let disk_total = vfs.blocks.saturating_mul(vfs.frsize);
        let disk_free = vfs.bavail.saturating_mul(vfs.frsize);
        let (total_bytes, free_bytes) = match self.inner.quota.limit() {
            Some(limit) => (
                limit,
                limit.saturating_sub(self.inner.quota.used()).min(disk_free),
            ),
            None => (disk_total, disk_free),
        };
        let unit = u32::try_from(vfs.frsize)
            .unwrap_or(4096)
            .max(BYTES_PER_SECTOR);
        Ok(FsInfo {
            total_bytes,
            free_bytes,
            bytes_per_sector: BYTES_PER_SECTOR,
            sectors_per_unit: unit / BYTES_PER_SECTOR,
            label: self.inner.config.label.clone(),
            serial: volume_serial(vfs.fsid, st.dev, st.ino),
            created: info.creation_time,
            // Names are matched case-insensitively but a client may ask for an exact
            // match, as on NTFS and Samba; descriptors and streams need user xattrs.
            fs_attributes: fs_attr::CASE_SENSITIVE_SEARCH
                | fs_attr::CASE_PRESERVED_NAMES
                | fs_attr::UNICODE_ON_DISK
                | fs_attr::SUPPORTS_SPARSE_FILES
                | if self.inner.xattrs.enabled() {
                    fs_attr::PERSISTENT_ACLS | fs_attr::NAMED_STREAMS
                } else {
                    0
                },
            max_name_len: MAX_COMPONENT_NAME,
            fs_name: FS_NAME.to_string(),
        })
    }
}

/// The create options and disposition combinations no file system object accepts.
fn check_create_options(req: &CreateRequest<'_>) -> Result<(), FsError> {
    use CreateDisposition::*;
    let dir_only = req.options & create_options::DIRECTORY_FILE != 0;
    if dir_only && req.options & create_options::NON_DIRECTORY_FILE != 0 {
        return Err(FsError::InvalidParameter(
            "DIRECTORY_FILE with NON_DIRECTORY_FILE".into(),
        ));
    }
    if dir_only && !matches!(req.disposition, Create | Open | OpenIf) {
        return Err(FsError::InvalidParameter(
            "directories can only be opened or created".into(),
        ));
    }
    if dir_only && req.attributes & attr::TEMPORARY != 0 {
        return Err(FsError::InvalidParameter(
            "a directory cannot be temporary".into(),
        ));
    }
    Ok(())
}

/// A stable 32-bit volume serial from the file system id and the share root's identity
/// (FNV-1a over their bytes).
fn volume_serial(fsid: u64, dev: u64, ino: u64) -> u32 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    for b in fsid
        .to_le_bytes()
        .iter()
        .chain(&dev.to_le_bytes())
        .chain(&ino.to_le_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    (h ^ (h >> 32)) as u32
}
