//! One open file or directory of a POSIX share ([`FsFile`]).
//!
//! Quota: growth is charged under the inode's size lock (write half) before a byte is
//! written, in-place writes take the read half so a concurrent truncate cannot turn them
//! into uncharged growth, and a failed extending write is cut back to the old size with its
//! charge released, so an unacknowledged write leaves nothing behind past the old end.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use quarry_smb::vfs::names::split_path;
use quarry_smb::vfs::{
    attr, filetime_to_unix, AllocatedRange, BasicInfoChange, DirCursor, FileInfo, FsError, FsFile,
    SharedData, StoredDescriptor, StreamInfo, FILETIME_FREEZE, FILETIME_THAW,
};

use super::attrs;
use super::descriptor;
use super::dir::PosixDirCursor;
use super::direct::{DirectIo, DIRECT_MIN};
use super::known_stored::KnownStored;
use super::resolve;
use super::shared_reads;
use super::sys::{self, unix_now};
use super::write_time::{unix_nanos, Fix, UnixTime, WriteTimeState};
use super::{InodeShared, ShareInner};

/// Largest end-of-file accepted (the `off_t` range).
const MAX_FILE_SIZE: u64 = i64::MAX as u64;
/// Chunk of zeros written when the file system cannot punch holes.
const ZERO_CHUNK: usize = 64 * 1024;

/// An open file or directory.
pub struct PosixFile {
    share: Arc<ShareInner>,
    file: File,
    dev: u64,
    ino: u64,
    is_dir: bool,
    writable: bool,
    write_through: bool,
    /// Stored path components from the share root (updated by rename).
    path: Mutex<Vec<String>>,
    shared: Arc<InodeShared>,
    write_time: Mutex<WriteTimeState>,
    /// Allocation this open reports at least (CREATE AllocationSize, SET_INFO Allocation).
    allocation_hint: AtomicU64,
    /// Large reads' and writes' `O_DIRECT` descriptors (posix_fs::direct).
    direct: DirectIo,
    /// The stored attributes as last read, while the file's ctime proves them current.
    stored: KnownStored,
}

/// Allocation unit that allocation sizes are rounded up to.
const CLUSTER: u64 = 4096;

fn round_to_cluster(size: u64) -> u64 {
    size.div_ceil(CLUSTER).saturating_mul(CLUSTER)
}

fn io_err(context: &str) -> impl FnOnce(std::io::Error) -> FsError + '_ {
    move |e| FsError::from_io(context, e)
}

/// Which event a write-time step follows (see [`PosixFile::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A write through this open (the kernel has just moved mtime).
    Write,
    /// Anything else: a query, a flush, a set-info, the close.
    Other,
}

/// Times closer than this are one time to a client: Windows' clock, which stamps its write
/// times, ticks every 15.6 ms.
const SAME_TIME_NS: i128 = 15_000_000;

/// Whether the kernel's mtime `mtime` is the time `now` to a client (at most
/// [`SAME_TIME_NS`] before it).
fn same_time(mtime: UnixTime, now: UnixTime) -> bool {
    (0..=SAME_TIME_NS).contains(&(unix_nanos(now) - unix_nanos(mtime)))
}

/// Sets mtime of `fd` to `target`; a failure only costs the timestamp.
fn set_write_time(fd: BorrowedFd<'_>, target: UnixTime) {
    if let Err(e) = sys::futimens(fd, None, Some(target)) {
        tracing::debug!(error = %e, "could not adjust the write time");
    }
}

impl PosixFile {
    /// The open descriptor (streams keep their bytes in its xattrs).
    pub(crate) fn raw_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Whether the share is read-only.
    pub(crate) fn share_read_only(&self) -> bool {
        self.share.config.read_only
    }

    /// The share this file belongs to (its root, quota and xattr support).
    pub(crate) fn share(&self) -> &ShareInner {
        &self.share
    }

    /// The share's record of xattr support.
    pub(crate) fn xattrs(&self) -> &super::attrs::XattrSupport {
        &self.share.xattrs
    }

    /// Holds the file's size lock (streams serialise their read-modify-writes on it).
    pub(crate) fn size_lock(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.shared.size.write().unwrap_or_else(|p| p.into_inner())
    }

    /// fsync: data and metadata (xattrs included).
    pub(crate) fn sync_all(&self) -> Result<(), FsError> {
        self.file.sync_all().map_err(io_err("fsync"))
    }
    /// Whether the file carries the SPARSE_FILE attribute (FSCTL_SET_SPARSE).
    fn is_sparse(&self) -> bool {
        attrs::read_stored(self.file.as_fd(), &self.share.xattrs)
            .attributes
            .is_some_and(|a| a & attr::SPARSE_FILE != 0)
    }

    /// Wraps an opened descriptor; `st` is its stat, which every open path has just read
    /// (so the identity costs no second call).
    pub(crate) fn new(
        share: Arc<ShareInner>,
        fd: OwnedFd,
        st: &sys::Stat,
        path: Vec<String>,
        writable: bool,
        write_through: bool,
    ) -> PosixFile {
        let shared = share.size_locks.get((st.dev, st.ino));
        shared.shown.opened();
        shared.size_hint.store(st.size, Ordering::Relaxed);
        PosixFile {
            share,
            file: File::from(fd),
            dev: st.dev,
            ino: st.ino,
            is_dir: st.is_dir(),
            writable,
            write_through,
            path: Mutex::new(path),
            shared,
            write_time: Mutex::new(WriteTimeState::default()),
            allocation_hint: AtomicU64::new(0),
            direct: DirectIo::default(),
            stored: KnownStored::default(),
        }
    }

    /// Remembers the stored attributes the open read at `read_at`, after `st` (see
    /// [`KnownStored::remember`]), so that later queries need not read them again.
    pub(crate) fn remember_stored(&self, st: &sys::Stat, stored: attrs::Stored, read_at: UnixTime) {
        self.stored.remember(st, stored, read_at);
    }

    /// Current metadata.
    pub(crate) fn current_info(&self) -> Result<FileInfo, FsError> {
        // A due delayed write-time update shows first, so the answer below has it.
        self.write_time_step(|w| w.on_query(Instant::now()));
        self.stat_info()
    }

    /// The stat and stored attributes as reported, with no write-time step first.
    fn stat_info(&self) -> Result<FileInfo, FsError> {
        let st = self.stat()?;
        Ok(self.info_from(&st))
    }

    /// The file as reported, from `st` (a fresh stat) and its stored attributes: those
    /// remembered while `st`'s ctime proves them current, else read (and remembered).
    fn info_from(&self, st: &sys::Stat) -> FileInfo {
        let stored = self.stored.get(st).unwrap_or_else(|| {
            let read_at = unix_now();
            let stored = attrs::read_stored(self.file.as_fd(), &self.share.xattrs);
            self.stored.remember(st, stored, read_at);
            stored
        });
        self.opened_info(attrs::file_info(st, &stored))
    }

    /// `read` (this file's [`attrs::info_of`], read while opening it) as
    /// [`PosixFile::current_info`] would report it: with the allocation hint and the write
    /// time shown instead of mtime (another open's pending update) applied. A new open has
    /// written nothing, so it has no delayed write time of its own to settle first.
    pub(crate) fn opened_info(&self, read: FileInfo) -> FileInfo {
        let mut info = read;
        if !self.is_dir {
            self.shared.shown.apply(&mut info);
            info.allocation_size = info
                .allocation_size
                .max(self.allocation_hint.load(Ordering::Relaxed));
        }
        info
    }

    /// Makes this open report at least `size` bytes allocated (rounded up to a cluster).
    pub(crate) fn set_allocation_hint(&self, size: u64) {
        self.allocation_hint
            .store(round_to_cluster(size), Ordering::Relaxed);
    }

    /// The open's current path components. The kernel's view (`/proc/self/fd`) wins, so a
    /// rename of a parent directory, by this share or anyone else, is followed; the path
    /// recorded at open/rename is the fallback (no procfs, or the file was deleted).
    fn components(&self) -> Vec<String> {
        let mut stored = self.path.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = live_components(self.share.root.as_fd(), self.file.as_fd()) {
            if *stored != live {
                *stored = live;
            }
        }
        stored.clone()
    }

    fn stat(&self) -> Result<sys::Stat, FsError> {
        sys::fstat(self.file.as_fd()).map_err(io_err("stat"))
    }

    fn epoch(&self) -> u64 {
        self.shared.write_epoch.load(Ordering::Relaxed)
    }

    /// Runs one step of the write-time state machine and shows its verdict (see
    /// [`PosixFile::plan`]).
    fn write_time_step(&self, step: impl FnOnce(&mut WriteTimeState) -> Fix) {
        self.write_time_step_as(Step::Other, step);
    }

    /// [`PosixFile::write_time_step`] for the step that follows a write through this open.
    fn write_time_step_after_write(&self, step: impl FnOnce(&mut WriteTimeState) -> Fix) {
        self.write_time_step_as(Step::Write, step);
    }

    fn write_time_step_as(&self, kind: Step, step: impl FnOnce(&mut WriteTimeState) -> Fix) {
        self.write_time_step_with(kind, None, step);
    }

    /// [`PosixFile::write_time_step_as`] with `st`, when the caller has just read the
    /// file's stat (so [`PosixFile::plan`] need not read it again).
    fn write_time_step_with(
        &self,
        kind: Step,
        st: Option<&sys::Stat>,
        step: impl FnOnce(&mut WriteTimeState) -> Fix,
    ) {
        if self.is_dir {
            return;
        }
        let fix = step(&mut self.write_time.lock().unwrap_or_else(|p| p.into_inner()));
        self.show(kind, fix, st);
    }

    /// Shows what [`PosixFile::plan`] makes of a step's verdict.
    fn show(&self, kind: Step, fix: Fix, st: Option<&sys::Stat>) {
        self.shared.shown.set(self.plan(kind, fix, st));
    }

    /// The shown write time ([`super::shown_time::ShownWriteTime`]) after a step's
    /// verdict, `None` for mtime:
    ///
    /// - after a write, the kernel has moved mtime: `Keep` shows it, and `Restore(t)` shows
    ///   `t` in its place;
    /// - otherwise `Restore(t)` shows `t`, `Keep` changes nothing, and `Now` shows the
    ///   current time. When the kernel's mtime, the time of the last write, is that time to
    ///   a client ([`same_time`]: a close right after a write) and later than the time
    ///   shown (a kernel with coarse timestamps may have given the write the time of the
    ///   change before it), mtime itself shows it; otherwise the current time is shown.
    ///
    /// Nothing here writes mtime: a time still shown when the file's last open ends is
    /// written then (`Drop for PosixFile`). `st` is a stat of the file the caller has just
    /// read, if any; the kernel's mtime is read only when needed and not given.
    fn plan(&self, kind: Step, fix: Fix, st: Option<&sys::Stat>) -> Option<UnixTime> {
        let shown = self.shared.shown.get();
        match (kind, fix) {
            (Step::Write, Fix::Keep) => None,
            (_, Fix::Restore(t)) => Some(t),
            (Step::Other, Fix::Keep) => shown,
            (_, Fix::Now) => {
                let now = unix_now();
                let mtime = match st {
                    Some(st) => Some(st.mtime),
                    None => self.stat().ok().map(|st| st.mtime),
                };
                match mtime {
                    Some(m) if shown.is_none_or(|s| m > s) && same_time(m, now) => None,
                    _ => Some(now),
                }
            }
        }
    }

    fn size(&self) -> Result<u64, FsError> {
        Ok(sys::fstat(self.file.as_fd()).map_err(io_err("stat"))?.size)
    }

    fn check_writable(&self) -> Result<(), FsError> {
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        if self.is_dir {
            return Err(FsError::IsDirectory);
        }
        if !self.writable {
            return Err(FsError::AccessDenied("not opened for writing".into()));
        }
        Ok(())
    }

    fn sync_data(&self) -> Result<(), FsError> {
        self.file.sync_data().map_err(io_err("fdatasync"))
    }

    /// Writes `data` at `offset`, ending at `end`, under the size lock's write half: a
    /// write that (most likely) extends the file. The growth is charged to the quota
    /// first, and cut back off the file if the write fails. Returns the write time shown
    /// before it, for the write-time step.
    fn write_extending(&self, offset: u64, end: u64, data: &[u8]) -> Result<UnixTime, FsError> {
        let _g = self.shared.size.write().unwrap_or_else(|p| p.into_inner());
        let _c = self.shared.reads.changing();
        let st = self.stat()?;
        let old = st.size;
        let before = self.shared.shown.or(st.mtime);
        let grow = end.saturating_sub(old);
        if grow > 0 {
            self.share
                .quota
                .try_charge(grow)
                .map_err(|e| FsError::DiskFull(e.to_string()))?;
        }
        if let Err(e) = self.direct.write_all_at(&self.file, data, offset) {
            self.shared.size_hint.store(old, Ordering::Relaxed);
            if grow > 0 {
                // Bytes past the old end belong to this failed write only: drop them.
                if let Err(cut) = self.file.set_len(old) {
                    tracing::warn!(error = %cut, "could not cut back a failed extending write");
                }
                self.share.quota.release(grow);
            }
            return Err(FsError::from_io("write", e));
        }
        self.shared.size_hint.store(old.max(end), Ordering::Relaxed);
        Ok(before)
    }

    /// Sets the size to `new` under the size lock, charging growth first and releasing
    /// shrinkage after.
    fn resize(&self, new: u64) -> Result<(), FsError> {
        if new > MAX_FILE_SIZE {
            return Err(FsError::InvalidParameter("end of file beyond 2^63".into()));
        }
        let _g = self.shared.size.write().unwrap_or_else(|p| p.into_inner());
        let _c = self.shared.reads.changing();
        let old = self.size()?;
        if new > old {
            let grow = new - old;
            self.share
                .quota
                .try_charge(grow)
                .map_err(|e| FsError::DiskFull(e.to_string()))?;
            if let Err(e) = self.file.set_len(new) {
                self.share.quota.release(grow);
                return Err(FsError::from_io("extend", e));
            }
        } else if new < old {
            self.file.set_len(new).map_err(io_err("truncate"))?;
            self.share.quota.release(old - new);
        }
        self.shared.size_hint.store(new, Ordering::Relaxed);
        Ok(())
    }

    /// CREATE with SUPERSEDE/OVERWRITE(_IF): empties the file and resets its attributes to
    /// the requested ones plus ARCHIVE.
    pub(crate) fn truncate_for_overwrite(&self, attributes: u32) -> Result<(), FsError> {
        self.resize(0)?;
        let stored = (attributes & attr::SETTABLE) | attr::ARCHIVE;
        attrs::write_attributes(self.file.as_fd(), stored, &self.share.xattrs)
    }

    /// Opens the parent directory of this open's current path and checks that the name
    /// there still is this file (not replaced behind our back).
    fn parent_and_name(&self) -> Result<(OwnedFd, Vec<String>, String), FsError> {
        let comps = self.components();
        let Some((name, parent)) = comps.split_last() else {
            return Err(FsError::CannotDelete("the share root".into()));
        };
        let parent_fd =
            resolve::open_beneath(self.share.root.as_fd(), parent, resolve::PARENT_FLAGS, true)?;
        let cname = sys::cstr(name).map_err(|_| FsError::InvalidName(name.clone()))?;
        let st = sys::lstat_at(parent_fd.as_fd(), &cname)
            .map_err(|e| FsError::from_io(format!("stat {name:?}"), e))?;
        if (st.dev, st.ino) != (self.dev, self.ino) {
            return Err(FsError::NotFound(format!("{name:?} was replaced")));
        }
        Ok((parent_fd, parent.to_vec(), name.clone()))
    }

    fn is_empty_dir(&self) -> Result<bool, FsError> {
        let mut stream =
            sys::DirStream::open(self.file.as_fd()).map_err(io_err("open directory"))?;
        Ok(stream
            .next_entry()
            .map_err(io_err("read directory"))?
            .is_none())
    }
}

/// The path of `fd` relative to the share root according to procfs, if it lies beneath it
/// and is still linked.
fn live_components(root: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Option<Vec<String>> {
    let link =
        |fd: BorrowedFd<'_>| std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok();
    let (root_path, path) = (link(root)?, link(fd)?);
    // A deleted file's link reads "name (deleted)": not a usable path.
    if path.to_str().is_none_or(|p| p.ends_with(" (deleted)")) {
        return None;
    }
    let rel = path.strip_prefix(&root_path).ok()?;
    rel.components()
        .map(|c| match c {
            std::path::Component::Normal(s) => s.to_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

impl PosixFile {
    /// Reads at `offset` with `read` until `buf` is full or end of file.
    fn read_fully(
        &self,
        offset: u64,
        buf: &mut [u8],
        read: impl Fn(&mut [u8], u64) -> std::io::Result<usize>,
    ) -> Result<usize, FsError> {
        self.read_until_end(offset, buf, false, read)
    }

    /// [`PosixFile::read_fully`]; with `cache_only`, `read` reads only what the page cache
    /// holds (`RWF_NOWAIT`). The cache holds whole pages, so such a read stops short inside
    /// a page only at the end of the file: the call that would return 0 to say so is not
    /// made (for a small file read whole, one of its two reads).
    fn read_until_end(
        &self,
        offset: u64,
        buf: &mut [u8],
        cache_only: bool,
        read: impl Fn(&mut [u8], u64) -> std::io::Result<usize>,
    ) -> Result<usize, FsError> {
        if self.is_dir {
            return Err(FsError::IsDirectory);
        }
        if offset > MAX_FILE_SIZE {
            return Ok(0);
        }
        let mut done = 0;
        while done < buf.len() {
            let Some(rest) = buf.get_mut(done..) else {
                break;
            };
            match read(rest, offset + done as u64) {
                Ok(0) => break,
                Ok(n) => {
                    done += n;
                    let end = offset + done as u64;
                    if cache_only && done < buf.len() && !end.is_multiple_of(sys::page_size()) {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FsError::from_io("read", e)),
            }
        }
        Ok(done)
    }
}

impl PosixFile {
    /// Whether a read of `len` bytes may bypass the page cache: a large read (the copy
    /// out of the page cache is what it saves) of a file no other handle of this share
    /// has open. Several readers of one file (a model's weights fanned out to many nodes)
    /// share its pages, so theirs stay buffered.
    fn may_read_direct(&self, len: usize) -> bool {
        !self.is_dir && len >= DIRECT_MIN && Arc::strong_count(&self.shared) == 1
    }

    /// Whether the page cache holds every page of `len` bytes at `offset` (up to the end
    /// of the file), asked without starting any I/O. `None` when the kernel cannot tell
    /// (before Linux 6.5).
    fn fully_cached(&self, offset: u64, len: usize) -> Option<bool> {
        if NO_CACHESTAT.load(Ordering::Relaxed) {
            return None;
        }
        let fd = self.file.as_fd();
        let cached = match sys::cached_pages(fd, offset, len as u64) {
            Ok(n) => n,
            Err(e) => {
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    NO_CACHESTAT.store(true, Ordering::Relaxed);
                }
                return None;
            }
        };
        let pages = |end: u64| pages_between(offset, end);
        let end = offset.saturating_add(len as u64);
        if cached >= pages(end) {
            return Some(true);
        }
        // Pages past the end of the file are never cached: count only the file's own.
        let size = self.stat().ok()?.size;
        Some(cached >= pages(end.min(size)))
    }
}

/// Set once `cachestat` answered ENOSYS: large reads then go direct without asking.
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

/// Pages that bytes `offset..end` touch.
fn pages_between(offset: u64, end: u64) -> u64 {
    let page = sys::page_size();
    if end <= offset {
        return 0;
    }
    end.div_ceil(page) - offset / page
}

impl FsFile for PosixFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        if self.may_read_direct(buf.len()) {
            return self.read_fully(offset, buf, |rest, at| {
                self.direct.read_some(&self.file, rest, at)
            });
        }
        self.read_fully(offset, buf, |rest, at| self.file.read_at(rest, at))
    }

    fn read_cached(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        // A large read that will go direct must not probe with RWF_NOWAIT: the probe
        // starts readahead of the missing pages, device reads the direct read repeats.
        if self.may_read_direct(buf.len()) && self.fully_cached(offset, buf.len()) != Some(true) {
            return Err(FsError::WouldBlock);
        }
        let fd = self.file.as_fd();
        self.read_until_end(offset, buf, true, |rest, at| {
            sys::pread_nowait(fd, rest, at)
        })
        .map_err(|e| match e {
            // Not all in the page cache (EAGAIN), or no non-blocking reads on this file
            // system (EOPNOTSUPP, tmpfs).
            FsError::NotSupported(_) => FsError::WouldBlock,
            FsError::Io { source, .. } if source.raw_os_error() == Some(libc::EAGAIN) => {
                FsError::WouldBlock
            }
            other => other,
        })
    }

    fn read_shared(
        &self,
        offset: u64,
        len: usize,
        cached_only: bool,
    ) -> Result<Option<SharedData>, FsError> {
        // Only a file that other opens have open too has anyone to share with.
        if self.is_dir || len == 0 || Arc::strong_count(&self.shared) < 2 {
            return Ok(None);
        }
        let reads = &self.shared.reads;
        let now = Instant::now();
        // This open's address is unique among the file's live opens.
        if !reads.others_reading(std::ptr::from_ref(self) as usize, now) {
            return Ok(None);
        }
        let before = reads.changes();
        let looks = shared_reads::Looks::from(&self.stat()?);
        // A file changed too recently keeps no reads (`SharedReads::keep`): its read takes
        // the pooled response buffer, not a buffer of its own that would only be freed.
        if !looks.settled(SystemTime::now()) {
            return Ok(None);
        }
        if let Some(data) = reads.find(offset, len, &looks, now) {
            return Ok(Some(data));
        }
        let mut buf = shared_reads::buffer(len);
        let read = if cached_only {
            self.read_cached(offset, &mut buf)
        } else {
            self.read_fully(offset, &mut buf, |rest, at| self.file.read_at(rest, at))
        };
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                shared_reads::give_back(buf);
                return Err(e);
            }
        };
        buf.truncate(n);
        let data = shared_reads::shared(buf);
        reads.keep(offset, len, data.clone(), before, looks, now);
        Ok(Some(data))
    }

    fn write_at(&self, offset: u64, data: &[u8], write_through: bool) -> Result<usize, FsError> {
        self.check_writable()?;
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= MAX_FILE_SIZE)
            .ok_or_else(|| FsError::InvalidParameter("write beyond 2^63".into()))?;
        let hint = &self.shared.size_hint;
        let written_in_place = if end > hint.load(Ordering::Relaxed) {
            None
        } else {
            let _g = self.shared.size.read().unwrap_or_else(|p| p.into_inner());
            let st = self.stat()?;
            hint.store(st.size, Ordering::Relaxed);
            if end <= st.size {
                let _c = self.shared.reads.changing();
                self.direct
                    .write_all_at(&self.file, data, offset)
                    .map_err(io_err("write"))?;
                Some(self.shared.shown.or(st.mtime))
            } else {
                None
            }
        };
        let before = match written_in_place {
            Some(before) => before,
            None => self.write_extending(offset, end, data)?,
        };
        let epoch = self.epoch();
        self.write_time_step_after_write(|w| w.after_write(before, Instant::now(), epoch));
        if write_through || self.write_through {
            self.sync_data()?;
        }
        Ok(data.len())
    }

    fn flush(&self) -> Result<(), FsError> {
        self.write_time_step(WriteTimeState::flush);
        if self.is_dir {
            return self.file.sync_all().map_err(io_err("fsync directory"));
        }
        self.sync_data()
    }

    fn info(&self) -> Result<FileInfo, FsError> {
        self.current_info()
    }

    fn info_cached(&self) -> Result<FileInfo, FsError> {
        // A step changes only memory (the shown write time): it never waits.
        self.write_time_step(|w| w.on_query(Instant::now()));
        self.stat_info()
    }

    fn path(&self) -> String {
        self.components().join("\\")
    }

    fn parent_file_id(&self) -> Result<Option<u64>, FsError> {
        if self.components().is_empty() {
            return Ok(None);
        }
        let (parent_fd, _, _) = self.parent_and_name()?;
        let st = sys::fstat(parent_fd.as_fd()).map_err(io_err("stat the parent directory"))?;
        Ok(Some(st.ino))
    }

    fn set_basic_info(&self, change: &BasicInfoChange) -> Result<(), FsError> {
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let fd = self.file.as_fd();
        // The stored values change below: the next query reads them.
        self.stored.forget();
        if let Some(a) = change.attributes {
            // MS-FSA 2.1.5.14.2.
            if self.is_dir && a & attr::TEMPORARY != 0 {
                return Err(FsError::InvalidParameter(
                    "a directory cannot be temporary".into(),
                ));
            }
            if !self.is_dir && a & attr::DIRECTORY != 0 {
                return Err(FsError::InvalidParameter(
                    "a file cannot become a directory".into(),
                ));
            }
            let current = attrs::read_stored(fd, &self.share.xattrs)
                .attributes
                .unwrap_or(0);
            let keep_sparse = current & attr::SPARSE_FILE;
            attrs::write_attributes(fd, (a & attr::SETTABLE) | keep_sparse, &self.share.xattrs)?;
        }
        // FREEZE/THAW (-1/-2) and other values above i64::MAX are never timestamps.
        let real = |t: Option<u64>| t.filter(|t| i64::try_from(*t).is_ok());
        if let Some(t) = real(change.creation_time) {
            attrs::write_creation_time(fd, t, &self.share.xattrs)?;
        }
        let atime = real(change.last_access_time).map(filetime_to_unix);
        let mtime = real(change.last_write_time).map(filetime_to_unix);
        if !self.is_dir {
            match change.last_write_time {
                Some(FILETIME_FREEZE) => {
                    let now = self.shared.shown.or(self.stat()?.mtime);
                    self.write_time
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .freeze(now);
                }
                Some(FILETIME_THAW) => self
                    .write_time
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .thaw(),
                _ => {}
            }
        }
        if atime.is_some() || mtime.is_some() {
            sys::futimens(fd, atime, mtime).map_err(io_err("set times"))?;
        }
        match mtime {
            Some(t) if !self.is_dir => {
                // mtime is the time set now: nothing shown in its place any more.
                self.shared.shown.set(None);
                self.shared.write_epoch.fetch_add(1, Ordering::Relaxed);
                self.write_time
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .explicit_set(t);
            }
            // Any basic-information set, even all zero, shows a pending update (Windows).
            _ if !matches!(
                change.last_write_time,
                Some(FILETIME_FREEZE | FILETIME_THAW)
            ) =>
            {
                self.write_time_step(WriteTimeState::flush)
            }
            _ => {}
        }
        Ok(())
    }

    fn set_end_of_file(&self, size: u64) -> Result<(), FsError> {
        self.check_writable()?;
        self.resize(size)?;
        self.write_time_step(WriteTimeState::flush);
        Ok(())
    }

    fn set_allocation_size(&self, size: u64) -> Result<(), FsError> {
        self.check_writable()?;
        if size < self.size()? {
            self.resize(size)?;
        }
        self.set_allocation_hint(size);
        self.write_time_step(WriteTimeState::flush);
        Ok(())
    }

    fn rename(&self, new_path: &str, replace_if_exists: bool) -> Result<(), FsError> {
        if new_path.starts_with(':') {
            return Err(FsError::InvalidParameter(
                "the unnamed stream cannot be renamed".into(),
            ));
        }
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let comps = split_path(new_path)?;
        if comps.is_empty() {
            return Err(FsError::AccessDenied(
                "cannot rename onto the share root".into(),
            ));
        }
        if super::stream_store::path_is_reserved(new_path) {
            return Err(FsError::AccessDenied(format!(
                "{} is reserved",
                super::stream_store::SIDE_DIR
            )));
        }
        let (old_parent_fd, _old_parent, old_name) = self.parent_and_name()?;
        let root = self.share.root.as_fd();
        let mut target = resolve::locate(&self.share.names, root, &comps)?;
        let requested = comps.last().copied().unwrap_or_default();
        let names = &self.share.names;
        let ns = names.lock_dirs(old_parent_fd.as_fd(), target.parent_fd.as_fd())?;
        // The target's existence as of now, with changes by this share held off.
        match resolve::lookup_locked(names, &ns, target.parent_fd.as_fd(), requested)? {
            Some(stored) => {
                target.exists = true;
                target.name = stored;
            }
            None => {
                target.exists = false;
                target.name = requested.to_string();
            }
        }
        let old_c = sys::cstr(&old_name).map_err(|_| FsError::InvalidName(old_name.clone()))?;
        let req_c = sys::cstr(requested).map_err(|_| FsError::InvalidName(requested.into()))?;
        let mut released = 0;
        if target.exists {
            let stored_c =
                sys::cstr(&target.name).map_err(|_| FsError::InvalidName(target.name.clone()))?;
            let tst = sys::lstat_at(target.parent_fd.as_fd(), &stored_c)
                .map_err(|e| FsError::from_io("stat rename target", e))?;
            let same_file = (tst.dev, tst.ino) == (self.dev, self.ino);
            if same_file {
                // A case change (or a no-op): rename the stored name to the requested spelling.
                if target.name != requested {
                    sys::renameat(
                        old_parent_fd.as_fd(),
                        &old_c,
                        target.parent_fd.as_fd(),
                        &req_c,
                        false,
                    )
                    .map_err(|e| FsError::from_io("rename", e))?;
                    names.note_removed(&ns, old_parent_fd.as_fd(), &old_name);
                    names.note_added(&ns, target.parent_fd.as_fd(), requested);
                }
                *self.path.lock().unwrap_or_else(|p| p.into_inner()) = {
                    let mut v = target.parent.clone();
                    v.push(requested.to_string());
                    v
                };
                return Ok(());
            }
            if !replace_if_exists {
                return Err(FsError::Exists(new_path.to_string()));
            }
            if tst.is_dir() {
                return Err(FsError::AccessDenied("cannot replace a directory".into()));
            }
            // The replaced file's large streams go with it, once it is replaced.
            let mut victim = None;
            if tst.is_file() && tst.nlink <= 1 {
                released = tst.size;
                victim = sys::openat(
                    target.parent_fd.as_fd(),
                    &stored_c,
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
                    0,
                )
                .ok();
            }
            // Replace atomically under the stored name, then adopt the requested spelling.
            sys::renameat(
                old_parent_fd.as_fd(),
                &old_c,
                target.parent_fd.as_fd(),
                &stored_c,
                true,
            )
            .map_err(|e| FsError::from_io("rename", e))?;
            if let Some(victim) = victim {
                super::stream::drop_side_files(victim.as_fd(), &self.share);
            }
            if target.name != requested {
                sys::renameat(
                    target.parent_fd.as_fd(),
                    &stored_c,
                    target.parent_fd.as_fd(),
                    &req_c,
                    false,
                )
                .map_err(|e| FsError::from_io("rename (case)", e))?;
                names.note_removed(&ns, target.parent_fd.as_fd(), &target.name);
            }
        } else {
            sys::renameat(
                old_parent_fd.as_fd(),
                &old_c,
                target.parent_fd.as_fd(),
                &req_c,
                false,
            )
            .map_err(|e| FsError::from_io("rename", e))?;
        }
        self.share.quota.release(released);
        names.note_removed(&ns, old_parent_fd.as_fd(), &old_name);
        names.note_added(&ns, target.parent_fd.as_fd(), requested);
        drop(ns);
        let mut new_comps = target.parent;
        new_comps.push(requested.to_string());
        *self.path.lock().unwrap_or_else(|p| p.into_inner()) = new_comps;
        Ok(())
    }

    fn check_deletable(&self) -> Result<(), FsError> {
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        if self.components().is_empty() {
            return Err(FsError::CannotDelete("the share root".into()));
        }
        let info = self.current_info()?;
        if info.attributes & attr::READONLY != 0 {
            return Err(FsError::CannotDelete("read-only attribute".into()));
        }
        if self.is_dir && !self.is_empty_dir()? {
            return Err(FsError::NotEmpty);
        }
        Ok(())
    }

    fn unlink(&self) -> Result<(), FsError> {
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let (parent_fd, _parent, name) = self.parent_and_name()?;
        let cname = sys::cstr(&name).map_err(|_| FsError::InvalidName(name.clone()))?;
        // A directory's own lock too: its cache entry is forgotten below, and a scan of
        // it must not put the entry back after that.
        let names = &self.share.names;
        let ns = if self.is_dir {
            names.lock_dirs(parent_fd.as_fd(), self.file.as_fd())?
        } else {
            names.lock_dir(parent_fd.as_fd())?
        };
        let _g = self.shared.size.write().unwrap_or_else(|p| p.into_inner());
        let st = sys::fstat(self.file.as_fd()).map_err(io_err("stat"))?;
        sys::unlinkat(parent_fd.as_fd(), &cname, self.is_dir)
            .map_err(|e| FsError::from_io(format!("delete {name:?}"), e))?;
        if st.nlink <= 1 || self.is_dir {
            // Gone for good: so are its large streams' side files.
            super::stream::drop_side_files(self.file.as_fd(), &self.share);
        }
        if st.is_file() && st.nlink <= 1 {
            self.share.quota.release(st.size);
        }
        if self.is_dir {
            names.forget(&ns, self.file.as_fd());
        }
        names.note_removed(&ns, parent_fd.as_fd(), &name);
        Ok(())
    }

    fn list_dir(&self, pattern: &str) -> Result<Box<dyn DirCursor>, FsError> {
        if !self.is_dir {
            return Err(FsError::NotDirectory);
        }
        let fd = self
            .file
            .as_fd()
            .try_clone_to_owned()
            .map_err(io_err("dup directory"))?;
        Ok(Box::new(PosixDirCursor::new(
            self.share.clone(),
            fd,
            self.components(),
            pattern,
        )?))
    }

    fn set_sparse(&self, sparse: bool) -> Result<(), FsError> {
        if self.is_dir {
            return Err(FsError::InvalidParameter(
                "directories cannot be sparse".into(),
            ));
        }
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let fd = self.file.as_fd();
        self.stored.forget();
        let stored = attrs::read_stored(fd, &self.share.xattrs);
        let current = stored
            .attributes
            .unwrap_or_else(|| attrs::default_attributes(false));
        let new = if sparse {
            current | attr::SPARSE_FILE
        } else {
            current & !attr::SPARSE_FILE
        };
        attrs::write_attributes(fd, new, &self.share.xattrs)
    }

    fn zero_data(&self, offset: u64, length: u64) -> Result<(), FsError> {
        self.check_writable()?;
        let _g = self.shared.size.read().unwrap_or_else(|p| p.into_inner());
        let _c = self.shared.reads.changing();
        let st = self.stat()?;
        let size = st.size;
        let end = offset.saturating_add(length).min(size);
        if offset >= end {
            return Ok(());
        }
        let epoch = self.epoch();
        // A sparse file gives the range back to the file system; any other stays fully
        // allocated, as on NTFS.
        let zeroed = if self.is_sparse() {
            sys::punch_hole(self.file.as_fd(), offset, end - offset)
        } else {
            sys::zero_range(self.file.as_fd(), offset, end - offset)
        };
        let result = match zeroed {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                let zeros = vec![0u8; ZERO_CHUNK];
                let mut pos = offset;
                while pos < end {
                    let n = usize::try_from(end - pos)
                        .unwrap_or(ZERO_CHUNK)
                        .min(ZERO_CHUNK);
                    let chunk = zeros.get(..n).unwrap_or(&zeros);
                    self.file
                        .write_all_at(chunk, pos)
                        .map_err(io_err("zero data"))?;
                    pos += n as u64;
                }
                Ok(())
            }
            Err(e) => Err(FsError::from_io("punch hole", e)),
        };
        if result.is_ok() {
            let before = self.shared.shown.or(st.mtime);
            self.write_time_step_after_write(|w| w.after_write(before, Instant::now(), epoch));
        }
        result
    }

    fn close(&self) -> Result<(), FsError> {
        let epoch = self.epoch();
        self.write_time_step(|w| w.on_close(epoch));
        Ok(())
    }

    fn close_cached(&self) -> Result<(), FsError> {
        // A close changes only memory (the shown write time; see `shown_time`).
        self.close()
    }

    fn close_and_info(&self) -> Result<FileInfo, FsError> {
        // One stat serves the close's write-time step, the query's and the answer: the
        // close writes nothing to the file, so the file it answers about is the one read.
        let st = self.stat()?;
        let epoch = self.epoch();
        self.write_time_step_with(Step::Other, Some(&st), |w| w.on_close(epoch));
        self.write_time_step_with(Step::Other, Some(&st), |w| w.on_query(Instant::now()));
        Ok(self.info_from(&st))
    }

    fn close_and_info_cached(&self) -> Result<FileInfo, FsError> {
        // As `close_cached`, plus the query: a stat of the open inode and, for a file
        // changed within `known_stored::SETTLED`, a listing of its xattrs. Neither reads
        // the device for an inode in memory, but btrfs's listing can wait for a tree lock
        // that a concurrent create holds (tests/bench/RESULTS.md, 2026-11-30, thirtieth
        // session): a sleep of up to about half a millisecond on this task.
        self.close_and_info()
    }

    fn allocated_ranges(
        &self,
        offset: u64,
        length: u64,
        max_ranges: usize,
    ) -> Result<(Vec<AllocatedRange>, bool), FsError> {
        if self.is_dir {
            return Err(FsError::InvalidParameter("directories have no data".into()));
        }
        let fd = self.file.as_fd();
        let end = offset.saturating_add(length).min(self.size()?);
        if !self.is_sparse() {
            // A file that is not sparse is allocated throughout (NTFS semantics; its
            // zeroed ranges were kept allocated), whatever holes it was created with.
            let ranges = (offset < end && max_ranges > 0)
                .then_some(AllocatedRange {
                    offset,
                    length: end - offset,
                })
                .into_iter()
                .collect();
            return Ok((ranges, offset < end && max_ranges == 0));
        }
        let mut ranges = Vec::new();
        let mut pos = offset;
        while pos < end {
            let Some(data) = sys::seek_data_or_hole(fd, pos, true).map_err(io_err("SEEK_DATA"))?
            else {
                break;
            };
            if data >= end {
                break;
            }
            let hole = sys::seek_data_or_hole(fd, data, false)
                .map_err(io_err("SEEK_HOLE"))?
                .unwrap_or(end)
                .min(end);
            if ranges.len() == max_ranges {
                return Ok((ranges, true));
            }
            ranges.push(AllocatedRange {
                offset: data,
                length: hole - data,
            });
            pos = hole;
        }
        Ok((ranges, false))
    }

    fn streams(&self) -> Result<Vec<StreamInfo>, FsError> {
        let info = (!self.is_dir).then(|| self.current_info()).transpose()?;
        super::stream::list(self.file.as_fd(), &self.share, info.as_ref())
    }

    fn unlink_file(&self) -> Result<(), FsError> {
        self.unlink()
    }

    fn eas(&self) -> Result<Vec<(String, Vec<u8>)>, FsError> {
        super::ea::read_all(self.file.as_fd(), &self.share.xattrs)
    }

    fn set_eas(&self, eas: &[(String, Vec<u8>)]) -> Result<(), FsError> {
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        super::ea::write(self.file.as_fd(), &self.share.xattrs, eas)
    }

    fn security_descriptor(&self) -> Result<StoredDescriptor, FsError> {
        descriptor::read(self.file.as_fd(), &self.share.xattrs)
    }

    fn set_security_descriptor(&self, sd: &[u8]) -> Result<(), FsError> {
        if self.share.config.read_only {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        descriptor::write(self.file.as_fd(), sd, &self.share.xattrs, false)
    }
}

impl Drop for PosixFile {
    /// A close the server did not announce (an open dropped on a path that has no close
    /// of its own) still ends a deferred write-time update, as a close does. When this was
    /// the file's last open and a write time is still shown in place of mtime, it is written
    /// to mtime (see [`super::shown_time`]). That is a metadata write that may wait for the
    /// file system's journal, so inside the runtime it goes to the blocking pool on a
    /// duplicate of the descriptor, never onto the thread dropping the file, which may be a
    /// reactor thread; the time stays shown from memory until it is written.
    fn drop(&mut self) {
        if !self.is_dir {
            let epoch = self.epoch();
            let fix = self
                .write_time
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .on_close(epoch);
            self.show(Step::Other, fix, None);
        }
        let Some(target) = self.shared.shown.closed() else {
            return;
        };
        let shared = self.shared.clone();
        match (tokio::runtime::Handle::try_current(), self.file.try_clone()) {
            (Ok(runtime), Ok(dup)) => {
                runtime.spawn_blocking(move || {
                    set_write_time(dup.as_fd(), target);
                    shared.shown.clear_if(target);
                });
            }
            _ => {
                set_write_time(self.file.as_fd(), target);
                shared.shown.clear_if(target);
            }
        }
    }
}
