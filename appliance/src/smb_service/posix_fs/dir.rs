//! Directory enumeration ([`DirCursor`]) for QUERY_DIRECTORY.
//!
//! The cursor streams the directory with its own `readdir` position, so a directory of any
//! size is listed over as many responses as the client's buffers need, with memory bounded
//! by the names it has read ahead (at most `NAMES_AHEAD` + `NAMES_PER_READ`, 768) plus what
//! the server pushed back. `.` and `..` come first. A pattern without wildcards is answered
//! by a direct (case-insensitive) lookup instead of a scan.
//!
//! Entries are described when answered, never from what was read ahead: of the names read
//! ahead, a cold directory's are looked up on the blocking pool meanwhile (`Warming`),
//! only to bring them into the kernel's caches.
//!
//! Entries the client could not use are skipped: names that are not UTF-8 or not valid
//! Windows names, fifos/sockets/devices, and symlinks that dangle or lead out of the share.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use quarry_smb::vfs::names::validate_component;
use quarry_smb::vfs::wildcard::Pattern;
use quarry_smb::vfs::{DirCursor, DirEntry, FileInfo, FsError, MacMetadata};

use super::attrs;
use super::resolve;
use super::stream;
use super::sys;
use super::ShareInner;

/// Where the cursor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Dot,
    DotDot,
    Entries,
    Done,
}

/// A resumable enumeration of one directory.
pub struct PosixDirCursor {
    share: Arc<ShareInner>,
    /// Shared with the background lookups ([`Warming`]).
    dir: Arc<OwnedFd>,
    /// Stored components of the directory (to resolve symlinks beneath the root).
    path: Vec<String>,
    pattern: Pattern,
    /// The pattern itself when it has no wildcard.
    literal: Option<String>,
    stream: Option<sys::DirStream>,
    /// Names read from `stream` and not yet answered (those that pass the pattern).
    queue: VecDeque<ReadName>,
    /// `stream` has given its last name.
    stream_done: bool,
    /// Background lookups of names ahead of the answers.
    warm: Warming,
    phase: Phase,
    pushed_back: Vec<DirEntry>,
    /// Read each entry's Apple stream metadata ([`DirCursor::want_mac_metadata`]).
    mac: bool,
}

impl PosixDirCursor {
    /// A cursor over `dir` (a descriptor of the directory at `path`) with `pattern`.
    pub(crate) fn new(
        share: Arc<ShareInner>,
        dir: OwnedFd,
        path: Vec<String>,
        pattern: &str,
    ) -> Result<Self, FsError> {
        let compiled =
            Pattern::new(pattern).map_err(|e| FsError::InvalidParameter(e.to_string()))?;
        let literal = compiled.literal().map(|_| pattern.to_string());
        Ok(PosixDirCursor {
            share,
            dir: Arc::new(dir),
            path,
            pattern: compiled,
            literal,
            stream: None,
            queue: VecDeque::new(),
            stream_done: false,
            warm: Warming::default(),
            phase: Phase::Dot,
            pushed_back: Vec::new(),
            mac: false,
        })
    }

    fn info_of_dir(&self, components: &[String]) -> Result<FileInfo, FsError> {
        let fd = resolve::open_beneath(
            self.share.root.as_fd(),
            components,
            libc::O_RDONLY | libc::O_DIRECTORY,
            false,
        )?;
        Ok(attrs::info_of(fd.as_fd(), &self.share.xattrs)?.1)
    }

    /// The entry `name` of this directory, or `None` if it is to be hidden.
    fn entry(&self, name: &str, d_type: u8) -> Result<Option<DirEntry>, FsError> {
        let cname = sys::cstr(name).map_err(|_| FsError::InvalidName(name.into()))?;
        let plain = d_type == libc::DT_REG || d_type == libc::DT_DIR;
        if plain && !self.mac {
            match attrs::info_at(self.dir.as_fd(), &cname, &self.share.xattrs) {
                Ok(Some((st, mut info))) => {
                    // Replaced by a symlink or a special file since readdir: hidden, as an
                    // O_NOFOLLOW open below would hide it.
                    if !(st.is_dir() || st.is_file()) {
                        return Ok(None);
                    }
                    self.share.size_locks.show_in((st.dev, st.ino), &mut info);
                    return Ok(Some(DirEntry {
                        name: name.to_string(),
                        info,
                        mac: None,
                    }));
                }
                // A kernel without the *xattrat calls: the entry is opened below.
                Ok(None) => {}
                // Vanished since readdir: hidden.
                Err(_) => return Ok(None),
            }
        }
        let opened = if plain {
            sys::openat(
                self.dir.as_fd(),
                &cname,
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
                0,
            )
        } else {
            // Symlinks (followed, but only beneath the root) and unknown types.
            let mut comps = self.path.clone();
            comps.push(name.to_string());
            let path = resolve::rel_path(&comps)?;
            sys::openat_beneath(
                self.share.root.as_fd(),
                &path,
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                0,
            )
        };
        let fd = match opened {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                // Unreadable to us: report what stat says, with default attributes.
                return Ok(sys::lstat_at(self.dir.as_fd(), &cname)
                    .ok()
                    .filter(|st| st.is_dir() || st.is_file())
                    .map(|st| {
                        let mut info = attrs::file_info(&st, &attrs::Stored::default());
                        self.share.size_locks.show_in((st.dev, st.ino), &mut info);
                        DirEntry {
                            name: name.to_string(),
                            info,
                            mac: None,
                        }
                    }));
            }
            // Vanished since readdir, dangling or escaping symlink, fifo, ...: hide it.
            Err(_) => return Ok(None),
        };
        let (st, mut info) = attrs::info_of(fd.as_fd(), &self.share.xattrs)?;
        if !(st.is_dir() || st.is_file()) {
            return Ok(None);
        }
        self.share.size_locks.show_in((st.dev, st.ino), &mut info);
        Ok(Some(DirEntry {
            name: name.to_string(),
            info,
            mac: self.mac_of(fd.as_fd()),
        }))
    }

    /// The Apple metadata of an open entry, when asked for.
    fn mac_of(&self, fd: std::os::fd::BorrowedFd<'_>) -> Option<MacMetadata> {
        self.mac.then(|| stream::mac_metadata(fd, &self.share))
    }

    fn next_from_disk(&mut self) -> Result<Option<DirEntry>, FsError> {
        if let Some(name) = self.literal.clone() {
            self.phase = Phase::Done;
            if validate_component(&name).is_err() || super::stream_store::is_reserved(&name) {
                return Ok(None);
            }
            let Some(stored) = resolve::lookup(&self.share.names, self.dir.as_fd(), &name)? else {
                return Ok(None);
            };
            return self.entry(&stored, libc::DT_UNKNOWN);
        }
        loop {
            if self.queue.len() <= NAMES_AHEAD && !self.stream_done {
                self.read_ahead()?;
            }
            let Some(next) = self.queue.pop_front() else {
                self.phase = Phase::Done;
                return Ok(None);
            };
            if let Some(entry) = self.entry(&next.name, next.d_type)? {
                return Ok(Some(entry));
            }
        }
    }

    /// Reads up to [`NAMES_PER_READ`] more names that the pattern lets through into the queue,
    /// and has them looked up in the background when they are not the next to answer.
    fn read_ahead(&mut self) -> Result<(), FsError> {
        let stream = match self.stream.as_mut() {
            Some(stream) => stream,
            None => self.stream.insert(
                sys::DirStream::open(self.dir.as_fd())
                    .map_err(|e| FsError::from_io("open directory", e))?,
            ),
        };
        let ahead = !self.queue.is_empty();
        let mut chunk = Vec::new();
        while chunk.len() < NAMES_PER_READ {
            let Some(raw) = stream
                .next_entry()
                .map_err(|e| FsError::from_io("read directory", e))?
            else {
                self.stream_done = true;
                break;
            };
            let Ok(name) = raw.name.into_string() else {
                continue;
            };
            if validate_component(&name).is_err()
                || !self.pattern.matches(&name)
                || super::stream_store::is_reserved(&name)
            {
                continue;
            }
            chunk.push(ReadName {
                name,
                d_type: raw.d_type,
            });
        }
        if ahead && !self.mac {
            self.warm.start(&self.dir, &chunk);
        }
        self.queue.extend(chunk);
        Ok(())
    }
}

impl DirCursor for PosixDirCursor {
    fn next_entry(&mut self) -> Result<Option<DirEntry>, FsError> {
        if let Some(e) = self.pushed_back.pop() {
            return Ok(Some(e));
        }
        loop {
            match self.phase {
                Phase::Dot => {
                    self.phase = Phase::DotDot;
                    if self.pattern.matches(".") {
                        let info = attrs::info_of(self.dir.as_fd(), &self.share.xattrs)?.1;
                        return Ok(Some(DirEntry {
                            name: ".".into(),
                            info,
                            mac: self.mac_of(self.dir.as_fd()),
                        }));
                    }
                }
                Phase::DotDot => {
                    self.phase = Phase::Entries;
                    if self.pattern.matches("..") {
                        // The share root's parent is not visible: it reports the root itself.
                        let parent = self
                            .path
                            .split_last()
                            .map(|(_, p)| p.to_vec())
                            .unwrap_or_default();
                        let info = self.info_of_dir(&parent)?;
                        return Ok(Some(DirEntry {
                            name: "..".into(),
                            info,
                            mac: None,
                        }));
                    }
                }
                Phase::Entries => return self.next_from_disk(),
                Phase::Done => return Ok(None),
            }
        }
    }

    fn unread(&mut self, entry: DirEntry) {
        self.pushed_back.push(entry);
    }

    fn restart(&mut self) -> Result<(), FsError> {
        self.pushed_back.clear();
        self.queue.clear();
        self.stream_done = false;
        self.warm.stop();
        self.phase = Phase::Dot;
        if let Some(stream) = self.stream.as_mut() {
            stream.rewind();
        }
        Ok(())
    }

    fn want_mac_metadata(&mut self) {
        self.mac = true;
    }
}

/// A name read from the directory and not yet answered.
struct ReadName {
    name: String,
    /// Its `d_type` from `readdir`.
    d_type: u8,
}

/// How many names are read from the directory at a time.
const NAMES_PER_READ: usize = 256;
/// How many names past the one being answered are kept read, and looked up in the
/// background, before more are read.
const NAMES_AHEAD: usize = 512;
/// Background lookups one cursor may have running at once.
const LOOKUP_JOBS: usize = 2;

/// Lookups of names read ahead of the answers, on the blocking pool.
///
/// Describing an entry of a directory not in memory costs the kernel a lookup of its name
/// and a read of its inode: most of a cold listing's time, spent one entry after the other
/// on the one thread that answers while the client waits. Looking the next names up on
/// another thread meanwhile (results thrown away) brings them into the kernel's caches,
/// so the answers describe them from memory, still at the time of the answer. Names the
/// kernel has in memory already are left alone: looking them up twice only costs.
#[derive(Default)]
struct Warming {
    /// Set to have running lookups stop (the cursor restarts or is dropped).
    stop: Arc<AtomicBool>,
    /// Lookups running.
    running: Arc<AtomicUsize>,
}

impl Warming {
    /// Looks `names` (entries of `dir`) up in the background, if the kernel does not have
    /// them in memory, the runtime is there and fewer than [`LOOKUP_JOBS`] lookups run;
    /// otherwise the answers look them up.
    fn start(&self, dir: &Arc<OwnedFd>, names: &[ReadName]) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let looked_up = |e: &&ReadName| matches!(e.d_type, libc::DT_REG | libc::DT_DIR);
        // The last of them stands for all: read from the device together (a cold
        // directory) or kept in memory together. Asked first, so that a directory in
        // memory (the common case) copies no names.
        let Some(last) = names.iter().rev().find(looked_up) else {
            return;
        };
        if !sys::cstr(&last.name).is_ok_and(|last| needs_lookup(dir.as_fd(), &last)) {
            return;
        }
        if self.running.fetch_add(1, Ordering::AcqRel) >= LOOKUP_JOBS {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let names: Vec<_> = names
            .iter()
            .filter(looked_up)
            .filter_map(|e| sys::cstr(&e.name).ok())
            .collect();
        let dir = dir.clone();
        let (stop, running) = (self.stop.clone(), self.running.clone());
        #[cfg(test)]
        test_switches::LOOKUPS_STARTED.fetch_add(1, Ordering::Relaxed);
        drop(runtime.spawn_blocking(move || {
            for name in &names {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                // The stat reads the inode, and with it (ext4) or beside it (btrfs) the
                // xattrs the answer lists, on kernels with or without `listxattrat`.
                let _ = sys::lstat_at(dir.as_fd(), name);
            }
            running.fetch_sub(1, Ordering::AcqRel);
        }));
    }

    /// Has running lookups stop (dropping them does), and starts afresh.
    fn stop(&mut self) {
        *self = Warming::default();
    }
}

impl Drop for Warming {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whether looking `name` up in `dir` would take the kernel more than its dentry cache:
/// a cached open (`RESOLVE_CACHED`, `O_PATH`) says so with EAGAIN. Kernels without that
/// flag (before 5.12) cannot tell, and the name counts as in memory.
fn needs_lookup(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr) -> bool {
    #[cfg(test)]
    if test_switches::WARM_CACHED.load(Ordering::Relaxed) {
        return true;
    }
    match sys::openat_beneath_cached(dir, name, libc::O_PATH | libc::O_NOFOLLOW) {
        Ok(_) => false,
        Err(e) => e.raw_os_error() == Some(libc::EAGAIN),
    }
}

/// Switches for the tests of background lookups (`posix_fs::tests`), which list
/// directories the kernel has in memory. Both paths answer the same, so other tests may run
/// meanwhile.
#[cfg(test)]
pub(crate) mod test_switches {
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    /// Look names up in the background even when the kernel has them in memory.
    pub(crate) static WARM_CACHED: AtomicBool = AtomicBool::new(false);
    /// Background lookups started since the process began.
    pub(crate) static LOOKUPS_STARTED: AtomicUsize = AtomicUsize::new(0);
}
