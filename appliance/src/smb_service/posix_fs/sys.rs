//! Thin, safe wrappers over the Linux system calls the POSIX share needs and `std` lacks:
//! `openat2`, `statx`, xattrs, `renameat2`, `fallocate`, `lseek(SEEK_DATA/HOLE)`, `futimens`,
//! `fstatvfs` and a `readdir` stream over a directory descriptor.
//!
//! Every function takes borrowed descriptors and single path components or relative paths as
//! `CStr`; none follows a path the caller did not already confine.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// How many times an `openat2` that failed with EAGAIN (a concurrent rename raced the
/// RESOLVE_BENEATH walk) is retried before the error is returned.
const OPENAT2_EAGAIN_RETRIES: usize = 8;

/// `RESOLVE_NO_MAGICLINKS` (linux/openat2.h).
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
/// `RESOLVE_BENEATH` (linux/openat2.h).
const RESOLVE_BENEATH: u64 = 0x08;
/// `RESOLVE_CACHED` (linux/openat2.h, Linux 5.12): resolve from the dentry cache alone,
/// failing with EAGAIN instead of reading a directory from the device.
const RESOLVE_CACHED: u64 = 0x20;

/// `struct open_how` (linux/openat2.h); libc's is non-exhaustive, so it is declared here.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A path or name as a C string; an interior NUL is an invalid name.
pub fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `openat2(dirfd, path, flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: opens `path`
/// relative to `dir` without ever leaving it (`..` above `dir`, absolute symlinks and
/// symlinks pointing outside fail with EXDEV; `/proc` magic links with ELOOP).
pub fn openat_beneath(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    openat2_beneath(dir, path, flags, mode, false)
}

/// [`openat_beneath`] of an existing object resolved from the kernel's dentry cache alone
/// (`RESOLVE_CACHED`): EAGAIN, at once and without retries, when a directory would have to
/// be read from the device, and for `O_CREAT`/`O_TRUNC`, which the kernel never does
/// cached. Kernels before 5.12 refuse the flag with EINVAL.
pub fn openat_beneath_cached(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    openat2_beneath(dir, path, flags, 0, true)
}

fn openat2_beneath(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
    mode: u32,
    cached: bool,
) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | if cached { RESOLVE_CACHED } else { 0 },
    };
    // With RESOLVE_CACHED, EAGAIN means "not cached", not a racing rename.
    let retries = if cached { 0 } else { OPENAT2_EAGAIN_RETRIES };
    let mut attempts = 0;
    loop {
        // SAFETY: `how` is a valid open_how of the size passed; `path` is NUL-terminated.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if rc >= 0 {
            // SAFETY: the kernel returned a fresh descriptor that nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) });
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) if attempts < retries => attempts += 1,
            _ => return Err(err),
        }
    }
}

/// `preadv2(fd, buf, offset, RWF_NOWAIT)`: reads only what the page cache holds, failing
/// with EAGAIN where the device would have to be read (EOPNOTSUPP where the file system
/// does not offer non-blocking reads, such as tmpfs).
pub fn pread_nowait(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, which outlives the call and is writable for its length.
    let rc = unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    len_or_errno(rc)
}

/// The size of a page of the page cache (4 KiB on x86-64, up to 64 KiB elsewhere).
pub fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
    })
}

/// `cachestat(2)` (Linux 6.5): unified number, not named by libc yet.
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` (linux/mman.h).
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` (linux/mman.h): page counts of the range.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// How many pages of `len` bytes at `offset` of `fd` the page cache holds, without
/// reading anything (unlike an `RWF_NOWAIT` read, which starts readahead of what is
/// missing). ENOSYS before Linux 6.5.
pub fn cached_pages(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<u64> {
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: both structs match the kernel's layout and outlive the call; the kernel
    // only reads `range` and writes `stat`.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    len_or_errno(rc).map(|_| stat.nr_cache)
}

/// `openat(dir, name, flags, mode)` for a single already-validated component.
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated; the returned descriptor is owned below.
        let rc = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode,
            )
        };
        if rc >= 0 {
            // SAFETY: fresh descriptor.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc) });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// The current time as file times hold it (seconds, nanoseconds since the Unix epoch).
pub fn unix_now() -> (i64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        d.subsec_nanos(),
    )
}

/// Metadata from `statx` (the fields the share reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    /// File type and permission bits.
    pub mode: u32,
    /// Inode number.
    pub ino: u64,
    /// Device (major << 32 | minor).
    pub dev: u64,
    /// Hard links.
    pub nlink: u32,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Access time (seconds, nanoseconds).
    pub atime: (i64, u32),
    /// Modification time.
    pub mtime: (i64, u32),
    /// Status change time.
    pub ctime: (i64, u32),
    /// Birth time, when the file system reports it.
    pub btime: Option<(i64, u32)>,
}

impl Stat {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    /// Whether this is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
}

fn statx_raw(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<Stat> {
    // SAFETY: zeroed statx is a valid out-parameter; `name` is NUL-terminated.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    cvt(unsafe {
        libc::statx(
            dir,
            name.as_ptr(),
            flags,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut st,
        )
    })?;
    let ts = |t: libc::statx_timestamp| (t.tv_sec, t.tv_nsec);
    Ok(Stat {
        mode: u32::from(st.stx_mode),
        ino: st.stx_ino,
        dev: (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
        nlink: st.stx_nlink,
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: ts(st.stx_atime),
        mtime: ts(st.stx_mtime),
        ctime: ts(st.stx_ctime),
        btime: (st.stx_mask & libc::STATX_BTIME != 0).then(|| ts(st.stx_btime)),
    })
}

/// `statx` of an open descriptor (works on O_PATH descriptors too).
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    statx_raw(
        fd.as_raw_fd(),
        c"",
        libc::AT_EMPTY_PATH | libc::AT_STATX_SYNC_AS_STAT,
    )
}

/// `statx` of one name in a directory, not following a final symlink.
pub fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Stat> {
    statx_raw(
        dir.as_raw_fd(),
        name,
        libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_SYNC_AS_STAT,
    )
}

/// A byte count returned by a system call, or the call's errno.
fn len_or_errno<T: TryInto<usize>>(rc: T) -> io::Result<usize> {
    rc.try_into().map_err(|_| io::Error::last_os_error())
}

/// An xattr read's length; `Ok(None)` when the attribute is absent (ENODATA).
fn xattr_len<T: TryInto<usize>>(rc: T) -> io::Result<Option<usize>> {
    match len_or_errno(rc) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether an error says extended attributes are not available here.
pub fn xattr_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTSUP) | Some(libc::ENOSYS))
}

/// Reads an xattr of an open file into `buf`; `Ok(None)` when absent.
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for `buf.len()` bytes; `name` is NUL-terminated.
    let rc = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    xattr_len(rc)
}

/// Lists the xattr names of an open file (each NUL-terminated in the returned bytes).
pub fn flistxattr(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 1024];
    loop {
        match flistxattr_into(fd, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            // The list grew or is longer than the first guess: 64 KiB is the kernel's cap.
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) && buf.len() < 65_536 => {
                buf.resize(65_536, 0);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Lists the xattr names of an open file into `buf` (each NUL-terminated) and returns the
/// length used; ERANGE when they do not fit. No allocation, for per-entry hot paths.
pub fn flistxattr_into(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let rc = unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    len_or_errno(rc)
}

/// `getxattrat(2)` (Linux 6.13): the same number on every architecture, as for all system
/// calls added since the tables were unified; libc does not name it yet.
const SYS_GETXATTRAT: libc::c_long = 464;
/// `listxattrat(2)` (Linux 6.13).
const SYS_LISTXATTRAT: libc::c_long = 465;

/// `struct xattr_args` (linux/xattr.h), the value buffer of `getxattrat`.
#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

/// The xattr names of the entry `name` of `dir`, not following a final symlink, read into
/// `buf` without opening the entry (`listxattrat`); ENOSYS before Linux 6.13.
pub fn listxattr_at_into(dir: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `name` is NUL-terminated; `buf` is valid for `buf.len()` bytes.
    let rc = unsafe {
        libc::syscall(
            SYS_LISTXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    len_or_errno(rc)
}

/// Reads the xattr `attr` of the entry `name` of `dir` into `buf`, not following a final
/// symlink and without opening the entry (`getxattrat`); `Ok(None)` when absent.
pub fn getxattr_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    attr: &CStr,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    let args = XattrArgs {
        value: buf.as_mut_ptr() as u64,
        size: u32::try_from(buf.len()).unwrap_or(u32::MAX),
        flags: 0,
    };
    // SAFETY: `name` and `attr` are NUL-terminated; `args` points into `buf`, valid for the
    // size it gives, and both outlive the call.
    let rc = unsafe {
        libc::syscall(
            SYS_GETXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            attr.as_ptr(),
            &args as *const XattrArgs,
            std::mem::size_of::<XattrArgs>(),
        )
    };
    xattr_len(rc)
}

/// Removes an xattr of an open file; `Ok(false)` when it was absent.
pub fn fremovexattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<bool> {
    // SAFETY: `name` is NUL-terminated.
    let rc = unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENODATA) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Sets an xattr of an open file.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `value` is valid for its length; `name` is NUL-terminated.
    cvt(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })?;
    Ok(())
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })?;
    Ok(())
}

/// `unlinkat(dir, name, AT_REMOVEDIR if dir)`.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    Ok(())
}

/// `renameat2(old_dir, old, new_dir, new, RENAME_NOREPLACE unless replace)`.
pub fn renameat(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
    replace: bool,
) -> io::Result<()> {
    let flags = if replace { 0 } else { libc::RENAME_NOREPLACE };
    // SAFETY: both names are NUL-terminated.
    cvt(unsafe {
        libc::renameat2(
            old_dir.as_raw_fd(),
            old.as_ptr(),
            new_dir.as_raw_fd(),
            new.as_ptr(),
            flags,
        )
    })?;
    Ok(())
}

/// `fallocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, len)`.
pub fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on a valid descriptor.
    cvt(unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    })?;
    Ok(())
}

/// `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)`: zeroes a range and keeps it
/// allocated (what zeroing a non-sparse file means on NTFS).
pub fn zero_range(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on a valid descriptor.
    cvt(unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    })?;
    Ok(())
}

/// `lseek(fd, offset, SEEK_DATA or SEEK_HOLE)`; `Ok(None)` when ENXIO (no more data).
pub fn seek_data_or_hole(fd: BorrowedFd<'_>, offset: u64, data: bool) -> io::Result<Option<u64>> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let whence = if data {
        libc::SEEK_DATA
    } else {
        libc::SEEK_HOLE
    };
    // SAFETY: plain syscall on a valid descriptor (the offset is not used for I/O: pread/pwrite).
    let rc = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    if rc >= 0 {
        return Ok(Some(rc as u64));
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(err)
    }
}

/// `futimens(fd, [atime, mtime])`; `None` leaves a time unchanged (UTIME_OMIT).
pub fn futimens(
    fd: BorrowedFd<'_>,
    atime: Option<(i64, u32)>,
    mtime: Option<(i64, u32)>,
) -> io::Result<()> {
    let ts = |t: Option<(i64, u32)>| match t {
        Some((s, ns)) => libc::timespec {
            tv_sec: s,
            tv_nsec: i64::from(ns),
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    };
    let times = [ts(atime), ts(mtime)];
    // SAFETY: `times` is a valid array of two timespecs.
    cvt(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) })?;
    Ok(())
}

/// File-system figures from `fstatvfs`.
#[derive(Debug, Clone, Copy)]
pub struct FsStat {
    /// Fragment size (the unit of the block counts).
    pub frsize: u64,
    /// Total blocks.
    pub blocks: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// File system id.
    pub fsid: u64,
}

/// `fstatvfs(fd)`.
pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<FsStat> {
    // SAFETY: zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) })?;
    Ok(FsStat {
        frsize: st.f_frsize as u64,
        blocks: st.f_blocks as u64,
        bavail: st.f_bavail as u64,
        fsid: st.f_fsid as u64,
    })
}

/// One raw directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// Name bytes (never `.` or `..`).
    pub name: CString,
    /// `d_type` (DT_UNKNOWN on some file systems).
    pub d_type: u8,
}

/// A `readdir` stream over its own descriptor of a directory (so its position is private).
pub struct DirStream {
    dir: std::ptr::NonNull<libc::DIR>,
}

// SAFETY: the DIR stream is only touched through `&mut self`, from one thread at a time;
// glibc's DIR has no thread affinity.
unsafe impl Send for DirStream {}

impl DirStream {
    /// Opens a fresh stream on directory `dir` (any descriptor of it, O_PATH included).
    pub fn open(dir: BorrowedFd<'_>) -> io::Result<DirStream> {
        let fd = openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        let raw = fd.as_raw_fd();
        // SAFETY: `raw` is a valid directory descriptor; on success the DIR owns it.
        let ptr = unsafe { libc::fdopendir(raw) };
        match std::ptr::NonNull::new(ptr) {
            Some(dir) => {
                std::mem::forget(fd);
                Ok(DirStream { dir })
            }
            None => Err(io::Error::last_os_error()),
        }
    }

    /// The next entry other than `.`/`..`; `Ok(None)` at the end.
    pub fn next_entry(&mut self) -> io::Result<Option<RawEntry>> {
        loop {
            // SAFETY: errno is thread-local; reset to tell end-of-stream from an error.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `self.dir` is a live DIR stream.
            let ent = unsafe { libc::readdir64(self.dir.as_ptr()) };
            if ent.is_null() {
                let err = io::Error::last_os_error();
                return match err.raw_os_error() {
                    Some(0) | None => Ok(None),
                    _ => Err(err),
                };
            }
            // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated and lives
            // until the next readdir call; it is copied out immediately.
            let (name, d_type) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()), (*ent).d_type) };
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            return Ok(Some(RawEntry {
                name: name.to_owned(),
                d_type,
            }));
        }
    }

    /// Goes back to the first entry.
    pub fn rewind(&mut self) {
        // SAFETY: `self.dir` is a live DIR stream.
        unsafe { libc::rewinddir(self.dir.as_ptr()) }
    }

    /// The stream's directory descriptor (valid while the stream lives).
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: dirfd of a live DIR is open as long as the DIR is.
        unsafe { BorrowedFd::borrow_raw(libc::dirfd(self.dir.as_ptr())) }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: closing the DIR we own exactly once.
        unsafe { libc::closedir(self.dir.as_ptr()) };
    }
}
