//! Path resolution beneath the share root, case-insensitively.
//!
//! Every open goes through `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from the
//! share's root descriptor, so `..`, absolute symlinks and symlinks leading out of the share
//! fail in the kernel (EXDEV → ACCESS_DENIED) whatever the name validation let through.
//!
//! Names are looked up exactly first; on a miss, the directory is scanned and compared
//! case-folded. The folded scan is cached per directory ([`NameCache`]), keyed by the
//! directory's identity and validated by its mtime, and updated in place by this share's own
//! creates, renames and deletes.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

use quarry_smb::vfs::names::fold;
use quarry_smb::vfs::FsError;

use super::sys;

/// Directories whose folded name maps are kept.
const MAX_CACHED_DIRS: usize = 64;
/// A directory with more entries than this is not cached (it is scanned on every miss).
const MAX_CACHED_DIR_ENTRIES: usize = 100_000;
/// Names kept across all cached directories; the oldest directories are dropped beyond it.
const MAX_CACHED_NAMES: usize = 200_000;

/// Identity and version of a directory: (dev, ino) and its mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirVersion {
    key: (u64, u64),
    mtime: (i64, u32),
}

fn dir_version(dir: BorrowedFd<'_>) -> Result<DirVersion, FsError> {
    let st = sys::fstat(dir).map_err(|e| FsError::from_io("stat directory", e))?;
    Ok(DirVersion {
        key: (st.dev, st.ino),
        mtime: st.mtime,
    })
}

/// Folded name → stored name of one directory.
struct DirNames {
    mtime: (i64, u32),
    names: HashMap<String, String>,
}

#[derive(Default)]
struct CacheState {
    dirs: HashMap<(u64, u64), DirNames>,
    order: VecDeque<(u64, u64)>,
    total: usize,
}

impl CacheState {
    fn remove(&mut self, key: (u64, u64)) {
        if let Some(d) = self.dirs.remove(&key) {
            self.total = self.total.saturating_sub(d.names.len());
        }
        self.order.retain(|k| *k != key);
    }

    fn insert(&mut self, key: (u64, u64), d: DirNames) {
        self.remove(key);
        self.total += d.names.len();
        self.dirs.insert(key, d);
        self.order.push_back(key);
        while self.order.len() > MAX_CACHED_DIRS || self.total > MAX_CACHED_NAMES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(d) = self.dirs.remove(&old) {
                self.total = self.total.saturating_sub(d.names.len());
            }
        }
    }
}

/// The bounded per-directory case-folded name cache of one share.
///
/// Consistency: every change this share makes to a directory's names happens under the
/// namespace lock ([`NameCache::lock_namespace`]) together with the matching cache update,
/// and cache fills (directory scans) take the same lock, so this share's own creates,
/// renames and deletes are never missed whatever the timestamp granularity. Changes made
/// by others are noticed through the directory's mtime.
#[derive(Default)]
pub struct NameCache {
    state: Mutex<CacheState>,
    namespace: Mutex<()>,
}

/// Proof that the caller holds the share's namespace lock.
pub struct NamespaceGuard<'a>(#[allow(dead_code)] MutexGuard<'a, ()>);

impl NameCache {
    /// Serialises changes to names (create, rename, delete) with cache fills. Hold it from
    /// the final existence check through the system call and the `note_*` update.
    pub fn lock_namespace(&self) -> NamespaceGuard<'_> {
        NamespaceGuard(self.namespace.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The cached answer, if the cache knows this directory at its current version.
    fn cached(&self, version: DirVersion, folded: &str) -> Option<Option<String>> {
        let state = self.state.lock().ok()?;
        let d = state.dirs.get(&version.key)?;
        (d.mtime == version.mtime).then(|| d.names.get(folded).cloned())
    }

    /// The stored spelling of `name` in `dir`, compared case-insensitively.
    fn lookup_folded(&self, dir: BorrowedFd<'_>, name: &str) -> Result<Option<String>, FsError> {
        let folded = fold(name);
        if let Some(hit) = self.cached(dir_version(dir)?, &folded) {
            return Ok(hit);
        }
        let guard = self.lock_namespace();
        self.lookup_folded_locked(&guard, dir, &folded)
    }

    /// [`NameCache::lookup_folded`] for a caller holding the namespace lock; `folded` is
    /// already case-folded.
    fn lookup_folded_locked(
        &self,
        _held: &NamespaceGuard<'_>,
        dir: BorrowedFd<'_>,
        folded: &str,
    ) -> Result<Option<String>, FsError> {
        let version = dir_version(dir)?;
        if let Some(hit) = self.cached(version, folded) {
            return Ok(hit);
        }
        let mut stream =
            sys::DirStream::open(dir).map_err(|e| FsError::from_io("open directory", e))?;
        let mut names = HashMap::new();
        let mut cacheable = true;
        let mut found = None;
        while let Some(entry) = stream
            .next_entry()
            .map_err(|e| FsError::from_io("read directory", e))?
        {
            let Ok(stored) = entry.name.into_string() else {
                continue;
            };
            let key = fold(&stored);
            if found.is_none() && key == folded {
                found = Some(stored.clone());
            }
            if cacheable {
                names.entry(key).or_insert(stored);
                if names.len() > MAX_CACHED_DIR_ENTRIES {
                    cacheable = false;
                    names = HashMap::new();
                }
            }
        }
        if cacheable {
            if let Ok(mut state) = self.state.lock() {
                state.insert(
                    version.key,
                    DirNames {
                        mtime: version.mtime,
                        names,
                    },
                );
            }
        }
        Ok(found)
    }

    /// Records that `name` now exists in `dir` (after this share created or renamed it
    /// there, under the namespace lock).
    pub fn note_added(&self, _held: &NamespaceGuard<'_>, dir: BorrowedFd<'_>, name: &str) {
        self.update(dir, |names| {
            names.entry(fold(name)).or_insert_with(|| name.to_string());
        });
    }

    /// Records that `name` no longer exists in `dir` (under the namespace lock).
    pub fn note_removed(&self, _held: &NamespaceGuard<'_>, dir: BorrowedFd<'_>, name: &str) {
        self.update(dir, |names| {
            let key = fold(name);
            if names.get(&key).is_some_and(|stored| stored == name) {
                names.remove(&key);
            }
        });
    }

    fn update(&self, dir: BorrowedFd<'_>, f: impl FnOnce(&mut HashMap<String, String>)) {
        let Ok(version) = dir_version(dir) else {
            return;
        };
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let mut drop_entry = false;
        if let Some(d) = state.dirs.get_mut(&version.key) {
            f(&mut d.names);
            d.mtime = version.mtime;
            drop_entry = d.names.len() > MAX_CACHED_DIR_ENTRIES;
        }
        if drop_entry {
            state.remove(version.key);
        } else {
            state.total = state.dirs.values().map(|d| d.names.len()).sum();
        }
    }

    /// Forgets a directory (e.g. after it was removed).
    pub fn forget(&self, dir: BorrowedFd<'_>) {
        if let (Ok(version), Ok(mut state)) = (dir_version(dir), self.state.lock()) {
            state.remove(version.key);
        }
    }
}

/// The stored name of `name` in `dir`: the exact spelling if it exists, else a
/// case-insensitive match, else `None`.
pub fn lookup(
    cache: &NameCache,
    dir: BorrowedFd<'_>,
    name: &str,
) -> Result<Option<String>, FsError> {
    let c = sys::cstr(name).map_err(|_| FsError::InvalidName(name.into()))?;
    match sys::lstat_at(dir, &c) {
        Ok(_) => Ok(Some(name.to_string())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => cache.lookup_folded(dir, name),
        Err(e) => Err(FsError::from_io(format!("lookup {name:?}"), e)),
    }
}

/// [`lookup`] for a caller holding the namespace lock: the answer cannot change until the
/// lock is released, except by other processes.
pub fn lookup_locked(
    cache: &NameCache,
    held: &NamespaceGuard<'_>,
    dir: BorrowedFd<'_>,
    name: &str,
) -> Result<Option<String>, FsError> {
    let c = sys::cstr(name).map_err(|_| FsError::InvalidName(name.into()))?;
    match sys::lstat_at(dir, &c) {
        Ok(_) => Ok(Some(name.to_string())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            cache.lookup_folded_locked(held, dir, &fold(name))
        }
        Err(e) => Err(FsError::from_io(format!("lookup {name:?}"), e)),
    }
}

/// A relative path (stored components) as the C string `openat2` takes; `.` for the root.
pub fn rel_path(components: &[String]) -> Result<CString, FsError> {
    let joined = if components.is_empty() {
        ".".to_string()
    } else {
        components.join("/")
    };
    sys::cstr(&joined).map_err(|_| FsError::InvalidName(joined))
}

/// Opens `components` beneath `root` with `flags`, mapping errors for a path whose every
/// component must exist (`missing_is_path` turns ENOENT/ENOTDIR into OBJECT_PATH_NOT_FOUND).
pub fn open_beneath(
    root: BorrowedFd<'_>,
    components: &[String],
    flags: libc::c_int,
    missing_is_path: bool,
) -> Result<OwnedFd, FsError> {
    let path = rel_path(components)?;
    sys::openat_beneath(root, &path, no_ctty(flags), 0)
        .map_err(|e| open_error(components, e, missing_is_path))
}

/// [`open_beneath`] of an existing object whose whole path the kernel resolves from its
/// caches ([`sys::openat_beneath_cached`]): [`FsError::WouldBlock`] where it cannot (a
/// directory not in memory, a kernel without `RESOLVE_CACHED`).
pub fn open_beneath_cached(
    root: BorrowedFd<'_>,
    components: &[String],
    flags: libc::c_int,
) -> Result<OwnedFd, FsError> {
    let path = rel_path(components)?;
    sys::openat_beneath_cached(root, &path, no_ctty(flags)).map_err(|e| match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINVAL) => FsError::WouldBlock,
        _ => open_error(components, e, false),
    })
}

/// `flags` with O_NOCTTY, except for O_PATH opens: openat2 refuses O_PATH combined with
/// anything but O_DIRECTORY/O_NOFOLLOW/O_CLOEXEC.
fn no_ctty(flags: libc::c_int) -> libc::c_int {
    if flags & libc::O_PATH != 0 {
        flags
    } else {
        flags | libc::O_NOCTTY
    }
}

fn open_error(components: &[String], e: std::io::Error, missing_is_path: bool) -> FsError {
    let what = components.join("\\");
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) if missing_is_path => FsError::PathNotFound(what),
        Some(libc::EXDEV) | Some(libc::ELOOP) => FsError::Escape(what),
        _ => FsError::from_io(format!("open {what:?}"), e),
    }
}

/// How the resolver opens a parent directory: by path only, for lookups and `*at` calls.
pub(crate) const PARENT_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;

/// Where a client path lands: its parent directory (opened, O_PATH) and final name.
pub struct Located {
    /// The parent directory.
    pub parent_fd: OwnedFd,
    /// Stored components of the parent, from the share root.
    pub parent: Vec<String>,
    /// The stored name if it exists, else the name as the client spelled it.
    pub name: String,
    /// Whether the final component exists (a dangling symlink counts as existing).
    pub exists: bool,
}

impl Located {
    /// Stored components of the whole path.
    pub fn components(&self) -> Vec<String> {
        let mut v = self.parent.clone();
        v.push(self.name.clone());
        v
    }
}

/// Resolves validated client components (at least one) beneath `root`: each intermediate
/// directory must exist (OBJECT_PATH_NOT_FOUND otherwise), the final one may not.
pub fn locate(cache: &NameCache, root: BorrowedFd<'_>, comps: &[&str]) -> Result<Located, FsError> {
    let Some((last, dirs)) = comps.split_last() else {
        return Err(FsError::InvalidParameter(
            "the share root has no parent".into(),
        ));
    };
    // Clients almost always spell directories as stored: one openat2 of the whole parent
    // path answers that, where the walk below costs a stat and an open per component.
    // Only a miss (some component spelled in another case) takes the walk.
    let spelled: Vec<String> = dirs.iter().map(|c| c.to_string()).collect();
    let (parent, parent_fd) = match open_beneath(root, &spelled, PARENT_FLAGS, true) {
        Ok(fd) => (spelled, fd),
        Err(FsError::PathNotFound(_)) => walk_parent(cache, root, dirs)?,
        Err(e) => return Err(e),
    };
    let found = lookup(cache, parent_fd.as_fd(), last)?;
    let exists = found.is_some();
    Ok(Located {
        parent_fd,
        parent,
        name: found.unwrap_or_else(|| last.to_string()),
        exists,
    })
}

/// Opens the directory `dirs` names beneath `root` one component at a time, matching each
/// case-insensitively; returns its stored components and descriptor.
fn walk_parent(
    cache: &NameCache,
    root: BorrowedFd<'_>,
    dirs: &[&str],
) -> Result<(Vec<String>, OwnedFd), FsError> {
    let mut parent: Vec<String> = Vec::with_capacity(dirs.len());
    let mut parent_fd = open_beneath(root, &parent, PARENT_FLAGS, true)?;
    for comp in dirs {
        let stored = lookup(cache, parent_fd.as_fd(), comp)?
            .ok_or_else(|| FsError::PathNotFound(comp.to_string()))?;
        parent.push(stored);
        parent_fd = open_beneath(root, &parent, PARENT_FLAGS, true)?;
    }
    Ok((parent, parent_fd))
}
