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

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::hash::BuildHasher;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

use quarry_smb::vfs::names::fold;
use quarry_smb::vfs::FsError;

use super::sys;

/// Directories whose folded name maps are kept. A dataset spreads its files over many
/// directories, and every new file misses the exact lookup, so a miss in this cache costs
/// a scan of the whole directory: the bound is generous, and [`MAX_CACHED_NAMES`] is the
/// one that bounds memory.
const MAX_CACHED_DIRS: usize = 4096;
/// A directory with more entries than this keeps only hashes of its folded names
/// ([`Names::Hashed`]).
const MAX_FULL_DIR_ENTRIES: usize = 100_000;
/// A directory with more entries than this is not cached (it is scanned on every miss).
const MAX_CACHED_DIR_ENTRIES: usize = 1_500_000;
/// Names kept across all cached directories, a hashed name counting as
/// 1/[`HASHES_PER_NAME`]; the least recently used directories are dropped beyond it.
const MAX_CACHED_NAMES: usize = 200_000;
/// Hashed names that weigh as much as one full name (8 bytes against about 100).
const HASHES_PER_NAME: usize = 8;

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

/// The names of one cached directory.
enum Names {
    /// Folded name → stored name.
    Full(HashMap<String, String>),
    /// Hashes of the folded names of a directory too large to keep them all: a name whose
    /// hash is missing certainly does not exist (every new file's lookup), one whose hash
    /// is present needs a scan for its spelling. Removals leave their hash (a stale hash
    /// only costs a scan).
    Hashed(HashSet<u64>),
}

impl Names {
    /// The stored spelling of `folded` (`Some(None)`: certainly none), or `None` when
    /// only a scan can tell.
    fn lookup(&self, folded: &str, hasher: &RandomState) -> Option<Option<String>> {
        match self {
            Names::Full(m) => Some(m.get(folded).cloned()),
            Names::Hashed(h) => (!h.contains(&hasher.hash_one(folded))).then_some(None),
        }
    }

    /// Records `stored` (folded `folded`), switching to hashes beyond `max_full` names
    /// ([`MAX_FULL_DIR_ENTRIES`]).
    fn add(&mut self, folded: String, stored: &str, hasher: &RandomState, max_full: usize) {
        match self {
            Names::Full(m) => {
                m.entry(folded).or_insert_with(|| stored.to_string());
                if m.len() > max_full {
                    let hashes = m.keys().map(|k| hasher.hash_one(k)).collect();
                    *self = Names::Hashed(hashes);
                }
            }
            Names::Hashed(h) => {
                h.insert(hasher.hash_one(&folded));
            }
        }
    }

    /// Forgets `stored` (folded `folded`) if that is the spelling kept.
    fn remove(&mut self, folded: &str, stored: &str) {
        if let Names::Full(m) = self {
            if m.get(folded).is_some_and(|s| s == stored) {
                m.remove(folded);
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Names::Full(m) => m.len(),
            Names::Hashed(h) => h.len(),
        }
    }

    /// What it counts against [`MAX_CACHED_NAMES`].
    fn weight(&self) -> usize {
        match self {
            Names::Full(m) => m.len(),
            Names::Hashed(h) => h.len().div_ceil(HASHES_PER_NAME),
        }
    }
}

/// The names of one directory, at the mtime they were read or last updated at.
struct DirNames {
    mtime: (i64, u32),
    names: Names,
    /// When it was last filled or answered a lookup ([`CacheState::tick`]).
    used: u64,
}

/// The cached directories, dropped least recently used first beyond the limits.
struct CacheState {
    dirs: HashMap<(u64, u64), DirNames>,
    /// Weight of the names across `dirs` ([`Names::weight`]).
    total: usize,
    /// Counts fills and hits, to order directories by last use.
    tick: u64,
    max_dirs: usize,
    max_names: usize,
    /// Names a directory keeps in full ([`MAX_FULL_DIR_ENTRIES`]).
    max_full: usize,
    /// Hashes folded names for [`Names::Hashed`] (keyed per cache, so a client cannot
    /// pick names that collide).
    hasher: RandomState,
}

impl CacheState {
    fn new(max_dirs: usize, max_names: usize, max_full: usize) -> CacheState {
        CacheState {
            dirs: HashMap::new(),
            total: 0,
            tick: 0,
            max_dirs,
            max_names,
            max_full,
            hasher: RandomState::new(),
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn remove(&mut self, key: (u64, u64)) {
        if let Some(d) = self.dirs.remove(&key) {
            self.total = self.total.saturating_sub(d.names.weight());
        }
    }

    fn insert(&mut self, key: (u64, u64), mut d: DirNames) {
        self.remove(key);
        d.used = self.next_tick();
        self.total += d.names.weight();
        self.dirs.insert(key, d);
        self.evict_beyond_limits(key);
    }

    /// Drops the least recently used directories other than `keep` while over a limit.
    /// Each drop scans the directories: it follows a fill, which read a whole directory,
    /// or a create that grew the cache past its bound.
    fn evict_beyond_limits(&mut self, keep: (u64, u64)) {
        while self.dirs.len() > self.max_dirs || self.total > self.max_names {
            let Some(oldest) = self
                .dirs
                .iter()
                .filter(|(k, _)| **k != keep)
                .min_by_key(|(_, d)| d.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.remove(oldest);
        }
    }
}

/// Namespace locks of one share: a directory's names are guarded by the lock its
/// identity hashes to, so that creates, deletes and scans in different directories do not
/// wait for each other (one lock for the share made every create wait for any other,
/// and for a scan of a large directory anywhere in the share).
const NAMESPACE_LOCKS: usize = 64;

/// The bounded per-directory case-folded name cache of one share.
///
/// Consistency: every change this share makes to a directory's names happens under that
/// directory's namespace lock ([`NameCache::lock_dir`], [`NameCache::lock_dirs`]) together
/// with the matching cache update, and a fill of that directory's entry (a scan) takes
/// the same lock, so this share's own creates, renames and deletes are never missed
/// whatever the timestamp granularity. Changes made by others are noticed through the
/// directory's mtime.
pub struct NameCache {
    state: Mutex<CacheState>,
    namespace: [Mutex<()>; NAMESPACE_LOCKS],
    /// Directory scans done to fill the cache (for tests and diagnostics).
    scans: std::sync::atomic::AtomicU64,
}

impl Default for NameCache {
    fn default() -> Self {
        NameCache::with_limits(MAX_CACHED_DIRS, MAX_CACHED_NAMES, MAX_FULL_DIR_ENTRIES)
    }
}

/// Proof that the caller holds the namespace locks of one or two directories.
pub struct NamespaceGuard<'a> {
    /// The directories covered, as stated just before their locks were taken: their
    /// identity (dev, ino) and the mtime they had then.
    dirs: [DirVersion; 2],
    /// The locks held, in the order they were taken.
    _held: [Option<MutexGuard<'a, ()>>; 2],
}

impl NamespaceGuard<'_> {
    /// Whether this guard holds the lock of the directory `key`.
    fn covers(&self, key: (u64, u64)) -> bool {
        self.dirs.iter().any(|d| d.key == key)
    }

    /// The one directory this guard covers (a create's or a delete's, a rename's within
    /// one directory), as stated before its lock was taken; `None` for two directories.
    fn only_dir(&self) -> Option<DirVersion> {
        let [a, b] = self.dirs;
        (a.key == b.key).then_some(a)
    }
}

impl NameCache {
    /// A cache of at most `max_dirs` directories and `max_names` names in all, keeping
    /// the names of directories of up to `max_full` entries in full.
    fn with_limits(max_dirs: usize, max_names: usize, max_full: usize) -> NameCache {
        NameCache {
            state: Mutex::new(CacheState::new(max_dirs, max_names, max_full)),
            namespace: std::array::from_fn(|_| Mutex::new(())),
            scans: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Directory scans done so far: each is a miss of this cache.
    pub fn scans(&self) -> u64 {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Serialises changes to the names in `dir` (create, delete) with fills of its cache
    /// entry. Hold it from the final existence check through the system call and the
    /// `note_*` update.
    pub fn lock_dir(&self, dir: BorrowedFd<'_>) -> Result<NamespaceGuard<'_>, FsError> {
        let version = dir_version(dir)?;
        Ok(self.lock_versions(version, version))
    }

    /// [`NameCache::lock_dir`] of two directories at once (a rename from one to the
    /// other): their locks are taken in a fixed order, so two renames in opposite
    /// directions cannot deadlock.
    pub fn lock_dirs(
        &self,
        a: BorrowedFd<'_>,
        b: BorrowedFd<'_>,
    ) -> Result<NamespaceGuard<'_>, FsError> {
        Ok(self.lock_versions(dir_version(a)?, dir_version(b)?))
    }

    fn lock_versions(&self, a: DirVersion, b: DirVersion) -> NamespaceGuard<'_> {
        let (first, second) = Self::lock_order(a.key, b.key);
        let take = |i: usize| {
            self.namespace
                .get(i)
                .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
        };
        let held_first = take(first);
        NamespaceGuard {
            dirs: [a, b],
            _held: [held_first, second.and_then(take)],
        }
    }

    /// The locks of two directories in the order they are taken: the lower index first,
    /// whichever directory is named first, and one lock when both share it. One order
    /// for every caller is what keeps two renames from waiting on each other for ever.
    fn lock_order(a: (u64, u64), b: (u64, u64)) -> (usize, Option<usize>) {
        let (x, y) = (Self::lock_index(a), Self::lock_index(b));
        (x.min(y), (x != y).then_some(x.max(y)))
    }

    /// The namespace lock a directory's names are guarded by: a multiplicative hash of
    /// its identity, whose top bits spread directories made one after the other (and so
    /// numbered one after the other) over all locks.
    fn lock_index(key: (u64, u64)) -> usize {
        let h = (key.0.rotate_left(32) ^ key.1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The top bits, reduced to the array (whatever its size).
        (h >> 32) as usize % NAMESPACE_LOCKS
    }

    /// The cached answer, if the cache knows this directory at its current version.
    fn cached(&self, version: DirVersion, folded: &str) -> Option<Option<String>> {
        let mut guard = self.state.lock().ok()?;
        let state = &mut *guard;
        let tick = state.next_tick();
        let d = state.dirs.get_mut(&version.key)?;
        if d.mtime != version.mtime {
            return None;
        }
        d.used = tick;
        d.names.lookup(folded, &state.hasher)
    }

    /// The stored spelling of `name` in `dir`, compared case-insensitively.
    fn lookup_folded(&self, dir: BorrowedFd<'_>, name: &str) -> Result<Option<String>, FsError> {
        let folded = fold(name);
        let version = dir_version(dir)?;
        if let Some(hit) = self.cached(version, &folded) {
            return Ok(hit);
        }
        let guard = self.lock_versions(version, version);
        self.lookup_folded_locked(&guard, dir, &folded, None)
    }

    /// [`NameCache::lookup_folded`] for a caller holding `dir`'s namespace lock; `folded`
    /// is already case-folded. Where the cache cannot answer, `spelled` (the name as the
    /// client spelled it), if given, is looked up as such before the directory is scanned:
    /// a stat finds an existing name spelled exactly, a scan would read the whole directory.
    fn lookup_folded_locked(
        &self,
        held: &NamespaceGuard<'_>,
        dir: BorrowedFd<'_>,
        folded: &str,
        spelled: Option<&str>,
    ) -> Result<Option<String>, FsError> {
        // A guard of one directory stated it as its lock was taken: a create asks the
        // cache without stating the directory again. Another open's change while this
        // caller waited for the lock was noted in the cache under that lock, and moved
        // the mtime the cache keeps past the one stated (a miss, stated again below);
        // where the clock left the mtime as it was, the cache holds the change all the
        // same. A change by another process in that moment shows as one just after the
        // lookup would: only through the mtime, once it moves.
        let seen = held.only_dir();
        if let Some(seen) = seen {
            debug_assert_eq!(
                dir_version(dir).ok().map(|v| v.key),
                Some(seen.key),
                "lookup in a directory other than the one locked"
            );
            if let Some(hit) = self.cached(seen, folded) {
                return Ok(hit);
            }
        }
        let version = dir_version(dir)?;
        debug_assert!(
            held.covers(version.key),
            "scan without the directory's lock"
        );
        if seen != Some(version) {
            if let Some(hit) = self.cached(version, folded) {
                return Ok(hit);
            }
        }
        if let Some(found) = spelled
            .map(|name| lookup_exact(dir, name))
            .transpose()?
            .flatten()
        {
            return Ok(Some(found));
        }
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut stream =
            sys::DirStream::open(dir).map_err(|e| FsError::from_io("open directory", e))?;
        let (hasher, max_full) = match self.state.lock() {
            Ok(state) => (state.hasher.clone(), state.max_full),
            Err(_) => (RandomState::new(), MAX_FULL_DIR_ENTRIES),
        };
        let mut names = Some(Names::Full(HashMap::new()));
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
            if let Some(n) = names.as_mut() {
                n.add(key, &stored, &hasher, max_full);
                if n.len() > MAX_CACHED_DIR_ENTRIES {
                    names = None;
                }
            }
        }
        if let (Some(names), Ok(mut state)) = (names, self.state.lock()) {
            state.insert(
                version.key,
                DirNames {
                    mtime: version.mtime,
                    names,
                    used: 0,
                },
            );
        }
        Ok(found)
    }

    /// Records that `name` now exists in `dir` (after this share created or renamed it
    /// there, under that directory's namespace lock).
    pub fn note_added(&self, held: &NamespaceGuard<'_>, dir: BorrowedFd<'_>, name: &str) {
        self.update(held, dir, |names, hasher, max_full| {
            names.add(fold(name), name, hasher, max_full)
        });
    }

    /// Records that `name` no longer exists in `dir` (under its namespace lock).
    pub fn note_removed(&self, held: &NamespaceGuard<'_>, dir: BorrowedFd<'_>, name: &str) {
        self.update(held, dir, |names, _, _| names.remove(&fold(name), name));
    }

    fn update(
        &self,
        held: &NamespaceGuard<'_>,
        dir: BorrowedFd<'_>,
        f: impl FnOnce(&mut Names, &RandomState, usize),
    ) {
        let Ok(version) = dir_version(dir) else {
            return;
        };
        debug_assert!(
            held.covers(version.key),
            "change without the directory's lock"
        );
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let state = &mut *guard;
        let Some(d) = state.dirs.get_mut(&version.key) else {
            return;
        };
        let before = d.names.weight();
        f(&mut d.names, &state.hasher, state.max_full);
        d.mtime = version.mtime;
        let (after, len) = (d.names.weight(), d.names.len());
        state.total = (state.total + after).saturating_sub(before);
        if len > MAX_CACHED_DIR_ENTRIES {
            state.remove(version.key);
        } else {
            state.evict_beyond_limits(version.key);
        }
    }

    /// Forgets a directory after it was removed, under its own namespace lock (so that no
    /// scan of it puts the entry back).
    pub fn forget(&self, held: &NamespaceGuard<'_>, dir: BorrowedFd<'_>) {
        if let (Ok(version), Ok(mut state)) = (dir_version(dir), self.state.lock()) {
            debug_assert!(
                held.covers(version.key),
                "forgotten without the directory's lock"
            );
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
    match lookup_exact(dir, name)? {
        Some(found) => Ok(Some(found)),
        None => cache.lookup_folded(dir, name),
    }
}

/// [`lookup`] for a caller holding `dir`'s namespace lock: the answer cannot change until
/// the lock is released, except by other processes.
pub fn lookup_locked(
    cache: &NameCache,
    held: &NamespaceGuard<'_>,
    dir: BorrowedFd<'_>,
    name: &str,
) -> Result<Option<String>, FsError> {
    match lookup_exact(dir, name)? {
        Some(found) => Ok(Some(found)),
        None => case_match_locked(cache, held, dir, name),
    }
}

/// `name` if `dir` has an entry spelled exactly so (a dangling symlink counts).
fn lookup_exact(dir: BorrowedFd<'_>, name: &str) -> Result<Option<String>, FsError> {
    let c = sys::cstr(name).map_err(|_| FsError::InvalidName(name.into()))?;
    match sys::lstat_at(dir, &c) {
        Ok(_) => Ok(Some(name.to_string())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(FsError::from_io(format!("lookup {name:?}"), e)),
    }
}

/// The stored spelling of an entry of `dir` whose name matches `name` case-insensitively
/// (the exact spelling included), for a caller holding `dir`'s namespace lock: from the
/// name cache, else from a stat of `name` as spelled, else from a scan. Where the answer
/// is most likely `None` (a name about to be created) and the cache knows the directory,
/// this makes no system call at all, where [`lookup_locked`] stats the exact name first.
/// Like every answer of the cache, it holds as of the directory's mtime.
pub fn case_match_locked(
    cache: &NameCache,
    held: &NamespaceGuard<'_>,
    dir: BorrowedFd<'_>,
    name: &str,
) -> Result<Option<String>, FsError> {
    cache.lookup_folded_locked(held, dir, &fold(name), Some(name))
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
    /// Whether the final component exists (a dangling symlink counts as existing); always
    /// `false` from [`locate_parent`], which does not look it up.
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
    locate_with(cache, root, comps, true)
}

/// [`locate`] that resolves only the parent and leaves the final component unlooked-up
/// (`exists` is `false`), for a caller that looks it up in every spelling itself under the
/// directory's namespace lock ([`case_match_locked`], before creating it).
pub fn locate_parent(
    cache: &NameCache,
    root: BorrowedFd<'_>,
    comps: &[&str],
) -> Result<Located, FsError> {
    locate_with(cache, root, comps, false)
}

/// [`locate`], looking the final component up (in any case) only when `look_up_final`.
fn locate_with(
    cache: &NameCache,
    root: BorrowedFd<'_>,
    comps: &[&str],
    look_up_final: bool,
) -> Result<Located, FsError> {
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
    let found = if look_up_final {
        lookup(cache, parent_fd.as_fd(), last)?
    } else {
        None
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A directory `name` under `root` holding `files` empty files, opened O_PATH.
    fn dir_with(root: &std::path::Path, name: &str, files: usize) -> OwnedFd {
        let p = root.join(name);
        std::fs::create_dir(&p).unwrap();
        for i in 0..files {
            std::fs::write(p.join(format!("File{i}")), b"").unwrap();
        }
        OwnedFd::from(std::fs::File::open(&p).unwrap())
    }

    /// The identity the namespace locks are chosen by.
    fn key_of(dir: &OwnedFd) -> (u64, u64) {
        dir_version(dir.as_fd()).unwrap().key
    }

    #[test]
    fn directories_under_different_locks_change_names_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let a = dir_with(tmp.path(), "a", 0);
        // A second directory whose names another lock guards (64 locks: one of the first
        // few directories made is certain to differ).
        let b = (0..16)
            .map(|i| dir_with(tmp.path(), &format!("b{i}"), 0))
            .find(|d| NameCache::lock_index(key_of(d)) != NameCache::lock_index(key_of(&a)))
            .expect("a directory under another lock");
        let cache = NameCache::default();
        let held = cache.lock_dir(a.as_fd()).unwrap();
        assert!(held.covers(key_of(&a)) && !held.covers(key_of(&b)));
        let (tx, rx) = std::sync::mpsc::channel();
        let got = std::thread::scope(|s| {
            let (cache, b) = (&cache, &b);
            s.spawn(move || {
                // A create in `b` (its lock, its scan) while `a`'s lock is held.
                let ns = cache.lock_dir(b.as_fd()).unwrap();
                let found = lookup_locked(cache, &ns, b.as_fd(), "NEW").unwrap();
                tx.send(found).unwrap();
            });
            let got = rx.recv_timeout(std::time::Duration::from_secs(10));
            // Released before any assertion, so that a waiting thread can end.
            drop(held);
            got
        });
        assert_eq!(got, Ok(None), "b's change waited for a's lock");
    }

    #[test]
    fn two_directories_are_locked_in_one_order_whichever_is_named_first() {
        let keys: Vec<(u64, u64)> = (0..200u64).map(|i| (2049, 1000 + i)).collect();
        let mut shared = 0;
        for &a in &keys {
            for &b in &keys {
                let (first, second) = NameCache::lock_order(a, b);
                assert_eq!(NameCache::lock_order(b, a), (first, second), "{a:?} {b:?}");
                match second {
                    Some(second) => assert!(first < second, "{a:?} {b:?}"),
                    None => {
                        assert_eq!(NameCache::lock_index(a), NameCache::lock_index(b));
                        shared += 1;
                    }
                }
            }
        }
        // Every directory with itself, and some pairs of distinct ones, share a lock.
        assert!(shared > keys.len(), "{shared}");
    }

    #[test]
    fn a_rename_within_one_directory_takes_its_lock_once() {
        let tmp = tempfile::tempdir().unwrap();
        let d = dir_with(tmp.path(), "d", 0);
        let cache = Arc::new(NameCache::default());
        let (tx, rx) = std::sync::mpsc::channel();
        // Detached: a lock taken twice would hang the thread, not the test.
        std::thread::spawn({
            let cache = cache.clone();
            move || {
                let ns = cache.lock_dirs(d.as_fd(), d.as_fd()).unwrap();
                tx.send(ns.covers(key_of(&d))).unwrap();
            }
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(got, Ok(true), "one directory named twice");
    }

    #[test]
    fn a_create_waiting_for_the_lock_sees_the_name_another_open_made_meanwhile() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Arc::new(dir_with(tmp.path(), "d", 1));
        let cache = Arc::new(NameCache::default());
        assert_eq!(lookup(&cache, d.as_fd(), "NEW").unwrap(), None);
        assert_eq!(cache.scans(), 1);
        let held = cache.lock_dir(d.as_fd()).unwrap();
        let (started, start) = std::sync::mpsc::channel();
        let (tx, rx) = std::sync::mpsc::channel();
        // Detached: a lock never released would hang the thread, not the test.
        std::thread::spawn({
            let (cache, d) = (cache.clone(), d.clone());
            move || {
                started.send(()).unwrap();
                // States the directory, then waits for the lock held above.
                let ns = cache.lock_dir(d.as_fd()).unwrap();
                tx.send(case_match_locked(&cache, &ns, d.as_fd(), "NEW").unwrap())
                    .unwrap();
            }
        });
        start.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        // Another open's create, under the lock, after the waiting caller stated the
        // directory: the mtime moves past the one it saw.
        std::fs::write(tmp.path().join("d/New"), b"").unwrap();
        cache.note_added(&held, d.as_fd(), "New");
        drop(held);
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(got, Ok(Some("New".to_string())));
        assert_eq!(cache.scans(), 1, "answered by the cache, not a scan");
        // The cache still knows the directory at its current mtime.
        assert_eq!(lookup(&cache, d.as_fd(), "OTHER").unwrap(), None);
        assert_eq!(cache.scans(), 1);
    }

    #[test]
    fn a_locked_case_match_finds_an_exact_name_without_a_scan_where_the_cache_cannot_tell() {
        let tmp = tempfile::tempdir().unwrap();
        let d = dir_with(tmp.path(), "d", 3);
        let cache = NameCache::default();
        let ns = cache.lock_dir(d.as_fd()).unwrap();
        let matched = |name: &str| case_match_locked(&cache, &ns, d.as_fd(), name).unwrap();
        // The cache does not know the directory: the exact name is found by a stat.
        assert_eq!(matched("File1").as_deref(), Some("File1"));
        assert_eq!(cache.scans(), 0);
        // Another spelling takes a scan, which fills the cache.
        assert_eq!(matched("FILE2").as_deref(), Some("File2"));
        assert_eq!(cache.scans(), 1);
        // From then on the cache answers every spelling, and every missing name.
        assert_eq!(matched("file0").as_deref(), Some("File0"));
        assert_eq!(matched("File1").as_deref(), Some("File1"));
        assert_eq!(matched("New"), None);
        assert_eq!(cache.scans(), 1);
    }

    #[test]
    fn least_recently_used_directories_are_dropped_first() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir_with(tmp.path(), "a", 1),
            dir_with(tmp.path(), "b", 1),
            dir_with(tmp.path(), "c", 1),
        );
        let cache = NameCache::with_limits(2, 1000, 1000);
        let miss = |d: &OwnedFd| lookup(&cache, d.as_fd(), "NOTHERE").unwrap();
        assert_eq!(miss(&a), None);
        assert_eq!(miss(&b), None);
        assert_eq!(cache.scans(), 2);
        // A hit makes "a" the more recent of the two: "c" pushes "b" out.
        assert_eq!(
            lookup(&cache, a.as_fd(), "FILE0").unwrap().as_deref(),
            Some("File0")
        );
        assert_eq!(cache.scans(), 2);
        miss(&c);
        assert_eq!(cache.scans(), 3);
        miss(&a);
        assert_eq!(cache.scans(), 3, "a stayed");
        miss(&b);
        assert_eq!(cache.scans(), 4, "b was dropped");
    }

    #[test]
    fn large_directories_keep_hashes_that_answer_new_names_without_a_scan() {
        let tmp = tempfile::tempdir().unwrap();
        let big = dir_with(tmp.path(), "big", 10);
        let cache = NameCache::with_limits(10, 1000, 4);
        assert_eq!(lookup(&cache, big.as_fd(), "NEW0").unwrap(), None);
        assert_eq!(cache.scans(), 1);
        // New names: certainly absent, from the hashes.
        for i in 1..50 {
            assert_eq!(
                lookup(&cache, big.as_fd(), &format!("NEW{i}")).unwrap(),
                None
            );
        }
        assert_eq!(cache.scans(), 1);
        // Another spelling of a name that exists: found by a scan.
        assert_eq!(
            lookup(&cache, big.as_fd(), "FILE7").unwrap().as_deref(),
            Some("File7")
        );
        assert_eq!(cache.scans(), 2);
        // This share's own creates and deletes keep the hashes current.
        let ns = cache.lock_dir(big.as_fd()).unwrap();
        std::fs::write(tmp.path().join("big/Added"), b"").unwrap();
        cache.note_added(&ns, big.as_fd(), "Added");
        std::fs::remove_file(tmp.path().join("big/File3")).unwrap();
        cache.note_removed(&ns, big.as_fd(), "File3");
        drop(ns);
        assert_eq!(lookup(&cache, big.as_fd(), "NEW99").unwrap(), None);
        assert_eq!(cache.scans(), 2);
        // A removed name's hash stays: its lookup scans (refilling the hashes) and finds
        // nothing; an added one is found by its scan.
        assert_eq!(lookup(&cache, big.as_fd(), "FILE3").unwrap(), None);
        assert_eq!(cache.scans(), 3);
        assert_eq!(
            lookup(&cache, big.as_fd(), "ADDED").unwrap().as_deref(),
            Some("Added")
        );
        let scans = cache.scans();
        assert_eq!(scans, 4);
        // A change by another process moves mtime: the next lookup scans again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(tmp.path().join("big/Outside"), b"").unwrap();
        assert_eq!(
            lookup(&cache, big.as_fd(), "OUTSIDE").unwrap().as_deref(),
            Some("Outside")
        );
        assert_eq!(cache.scans(), scans + 1);
    }

    #[test]
    fn the_name_bound_drops_whole_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (dir_with(tmp.path(), "a", 3), dir_with(tmp.path(), "b", 3));
        let cache = NameCache::with_limits(10, 5, 1000);
        lookup(&cache, a.as_fd(), "NOTHERE").unwrap();
        lookup(&cache, b.as_fd(), "NOTHERE").unwrap();
        assert_eq!(cache.scans(), 2);
        lookup(&cache, b.as_fd(), "FILE2").unwrap();
        assert_eq!(cache.scans(), 2, "b kept");
        lookup(&cache, a.as_fd(), "FILE2").unwrap();
        assert_eq!(cache.scans(), 3, "a dropped for b's names");
        // One directory beyond the bound on its own is kept, and pushes out all others.
        let big = dir_with(tmp.path(), "big", 6);
        lookup(&cache, big.as_fd(), "FILE5").unwrap();
        lookup(&cache, big.as_fd(), "FILE5").unwrap();
        assert_eq!(cache.scans(), 4);
        lookup(&cache, a.as_fd(), "FILE0").unwrap();
        lookup(&cache, b.as_fd(), "FILE0").unwrap();
        assert_eq!(cache.scans(), 6);
    }
}
