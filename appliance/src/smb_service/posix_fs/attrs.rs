//! DOS attributes and creation time, kept in `user.` extended attributes, and the
//! [`FileInfo`] built from `statx` plus those.
//!
//! On a file system without user xattrs the share still works: attributes read as the
//! defaults (ARCHIVE for files, DIRECTORY for directories), the creation time is the birth
//! time (or the earlier of mtime/ctime), and setting them is accepted but not kept.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};

use quarry_smb::vfs::{attr, filetime_from_unix, FileInfo, FileTime, FsError};

use super::sys::{self, Stat};

/// xattr holding the DOS attribute bits (u32, little endian).
const XATTR_DOS_ATTRIBUTES: &std::ffi::CStr = c"user.quarry.dosattrib";
/// xattr holding the creation time (FILETIME, u64 little endian).
const XATTR_CREATION_TIME: &std::ffi::CStr = c"user.quarry.btime";

/// Whether this share's file system takes user xattrs (cleared on the first ENOTSUP).
#[derive(Debug)]
pub struct XattrSupport(AtomicBool);

impl Default for XattrSupport {
    fn default() -> Self {
        XattrSupport(AtomicBool::new(true))
    }
}

impl XattrSupport {
    /// Behaves as on a file system without user xattrs (tests of the fallback).
    #[cfg(test)]
    pub(crate) fn disable(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn note(&self, e: &std::io::Error) {
        if sys::xattr_unsupported(e) && self.0.swap(false, Ordering::Relaxed) {
            tracing::warn!("share file system has no user xattrs: DOS attributes and creation times will not persist");
        }
    }
}

/// What the xattrs of one file say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stored {
    /// Stored DOS attributes.
    pub attributes: Option<u32>,
    /// Stored creation time.
    pub creation_time: Option<FileTime>,
}

/// Reads a stored u64 (or u32) value with `get` (an xattr read into a buffer: `Ok(None)`
/// when absent).
fn read_u64(
    get: &impl Fn(&std::ffi::CStr, &mut [u8]) -> std::io::Result<Option<usize>>,
    name: &std::ffi::CStr,
    xs: &XattrSupport,
) -> Option<u64> {
    let mut buf = [0u8; 8];
    match get(name, &mut buf) {
        Ok(Some(8)) => Some(u64::from_le_bytes(buf)),
        Ok(Some(4)) => {
            let mut b4 = [0u8; 4];
            b4.copy_from_slice(buf.get(..4)?);
            Some(u64::from(u32::from_le_bytes(b4)))
        }
        Ok(_) => None,
        Err(e) => {
            xs.note(&e);
            None
        }
    }
}

/// Reads the stored attributes and creation time of an open file.
///
/// Most files carry neither value (default attributes, creation time from statx), so one
/// listing of the file's xattr names comes first and only the values it names are read:
/// one call instead of two for most files, two instead of three for the rest (listings,
/// where this runs per entry, and every open). A listing too long for the stack buffer
/// (many streams) falls back to reading both values.
pub fn read_stored(fd: BorrowedFd<'_>, xs: &XattrSupport) -> Stored {
    if !xs.enabled() {
        return Stored::default();
    }
    let mut list = [0u8; LIST_BUFFER];
    let listed = sys::flistxattr_into(fd, &mut list);
    stored_from_list(listed, &list, xs, &|name, buf| {
        sys::fgetxattr(fd, name, buf)
    })
}

/// The stored values named by a file's xattr name listing (`listed` bytes of `list`, or
/// the listing's error), read with `get`.
fn stored_from_list(
    listed: std::io::Result<usize>,
    list: &[u8],
    xs: &XattrSupport,
    get: &impl Fn(&std::ffi::CStr, &mut [u8]) -> std::io::Result<Option<usize>>,
) -> Stored {
    let (has_attributes, has_creation_time) = match listed {
        Ok(n) => {
            let names = list.get(..n).unwrap_or_default();
            (
                lists(names, XATTR_DOS_ATTRIBUTES),
                lists(names, XATTR_CREATION_TIME),
            )
        }
        Err(e) if sys::xattr_unsupported(&e) => {
            xs.note(&e);
            return Stored::default();
        }
        Err(_) => (true, true),
    };
    Stored {
        attributes: has_attributes
            .then(|| read_u64(get, XATTR_DOS_ATTRIBUTES, xs))
            .flatten()
            .and_then(|v| u32::try_from(v).ok()),
        creation_time: has_creation_time
            .then(|| read_u64(get, XATTR_CREATION_TIME, xs))
            .flatten(),
    }
}

/// Stack buffer for a file's xattr name list in [`read_stored`]; a file whose names do not
/// fit is read the long way.
const LIST_BUFFER: usize = 512;

/// Whether a `listxattr` answer (NUL-terminated names) contains `name`.
fn lists(names: &[u8], name: &std::ffi::CStr) -> bool {
    names
        .split(|b| *b == 0)
        .any(|listed| listed == name.to_bytes())
}

fn write(
    fd: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    value: &[u8],
    xs: &XattrSupport,
) -> Result<(), FsError> {
    if !xs.enabled() {
        return Ok(());
    }
    match sys::fsetxattr(fd, name, value) {
        Ok(()) => Ok(()),
        Err(e) if sys::xattr_unsupported(&e) => {
            xs.note(&e);
            Ok(())
        }
        Err(e) => Err(FsError::from_io("store file attributes", e)),
    }
}

/// Stores DOS attributes (only the settable bits plus SPARSE_FILE; DIRECTORY is derived).
pub fn write_attributes(
    fd: BorrowedFd<'_>,
    attributes: u32,
    xs: &XattrSupport,
) -> Result<(), FsError> {
    let keep = attributes & (attr::SETTABLE | attr::SPARSE_FILE);
    write(fd, XATTR_DOS_ATTRIBUTES, &keep.to_le_bytes(), xs)
}

/// Stores the creation time.
pub fn write_creation_time(
    fd: BorrowedFd<'_>,
    time: FileTime,
    xs: &XattrSupport,
) -> Result<(), FsError> {
    write(fd, XATTR_CREATION_TIME, &time.to_le_bytes(), xs)
}

/// The attributes a file has when none are stored.
pub fn default_attributes(is_dir: bool) -> u32 {
    if is_dir {
        attr::DIRECTORY
    } else {
        attr::ARCHIVE
    }
}

/// Effective attributes: stored (or default) bits, DIRECTORY from the file type, NORMAL when
/// nothing else is set.
pub fn effective_attributes(is_dir: bool, stored: Option<u32>) -> u32 {
    let base = stored.map_or_else(
        || default_attributes(is_dir),
        |a| a & !(attr::DIRECTORY | attr::NORMAL),
    );
    let a = if is_dir { base | attr::DIRECTORY } else { base };
    if a == 0 {
        attr::NORMAL
    } else {
        a
    }
}

/// Builds the SMB view of a file from its `statx` and stored xattrs.
pub fn file_info(st: &Stat, stored: &Stored) -> FileInfo {
    let ft = |t: (i64, u32)| filetime_from_unix(t.0, t.1);
    let is_dir = st.is_dir();
    let fallback_birth = if st.mtime < st.ctime {
        st.mtime
    } else {
        st.ctime
    };
    FileInfo {
        creation_time: stored
            .creation_time
            .unwrap_or_else(|| ft(st.btime.unwrap_or(fallback_birth))),
        last_access_time: ft(st.atime),
        last_write_time: ft(st.mtime),
        // POSIX ctime cannot be set, and clients set ChangeTime with the other times and
        // expect it back: report the last write time, as Samba does.
        change_time: ft(st.mtime),
        end_of_file: if is_dir { 0 } else { st.size },
        allocation_size: if is_dir {
            0
        } else {
            st.blocks.saturating_mul(512)
        },
        attributes: effective_attributes(is_dir, stored.attributes),
        file_id: st.ino,
        nlink: st.nlink,
        is_dir,
        unix_mode: st.mode,
    }
}

/// Stat + xattrs of an open file.
pub fn info_of(fd: BorrowedFd<'_>, xs: &XattrSupport) -> Result<(Stat, FileInfo), FsError> {
    let st = sys::fstat(fd).map_err(|e| FsError::from_io("stat", e))?;
    let stored = read_stored(fd, xs);
    Ok((st, file_info(&st, &stored)))
}

/// The stat and stored values of an open file, with the time the values were read at
/// (taken before reading them: see [`super::known_stored::KnownStored::remember`]).
pub fn stat_and_stored(
    fd: BorrowedFd<'_>,
    xs: &XattrSupport,
) -> Result<(Stat, Stored, (i64, u32)), FsError> {
    let st = sys::fstat(fd).map_err(|e| FsError::from_io("stat", e))?;
    let read_at = sys::unix_now();
    Ok((st, read_stored(fd, xs), read_at))
}

/// Whether the kernel has `listxattrat`/`getxattrat` (cleared on the first ENOSYS).
static XATTR_AT_CALLS: AtomicBool = AtomicBool::new(true);

/// Whether the `*xattrat` calls are worth trying (not known to be missing).
pub(crate) fn xattr_at_calls() -> bool {
    XATTR_AT_CALLS.load(Ordering::Relaxed)
}

/// Records that the kernel lacks the `*xattrat` calls (an ENOSYS from one of them).
pub(crate) fn no_xattr_at_calls() {
    XATTR_AT_CALLS.store(false, Ordering::Relaxed);
}

/// Makes [`info_at`] behave as on a kernel without the `*xattrat` calls, or not (tests of
/// the fallback; both paths are correct, so other tests may run meanwhile).
#[cfg(test)]
pub(crate) fn use_xattr_at_calls(on: bool) {
    XATTR_AT_CALLS.store(on, Ordering::Relaxed);
}

/// Stat + xattrs of the entry `name` of `dir` (a final symlink not followed), read without
/// opening it: a directory listing's per-entry cost is then two or three system calls
/// instead of an open, a stat, an xattr listing and a close. `Ok(None)` on kernels without
/// `listxattrat`/`getxattrat` (before Linux 6.13), where the caller opens the entry.
pub fn info_at(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    xs: &XattrSupport,
) -> std::io::Result<Option<(Stat, FileInfo)>> {
    if xs.enabled() && !xattr_at_calls() {
        return Ok(None);
    }
    let st = sys::lstat_at(dir, name)?;
    let stored = if xs.enabled() {
        let mut list = [0u8; LIST_BUFFER];
        let listed = sys::listxattr_at_into(dir, name, &mut list);
        match &listed {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                no_xattr_at_calls();
                return Ok(None);
            }
            // Anything but a listing, a list too long for the buffer or no xattrs here
            // (a seccomp filter's EPERM, say): the entry is opened, as before these calls.
            Err(e) if !sys::xattr_unsupported(e) && e.raw_os_error() != Some(libc::ERANGE) => {
                return Ok(None);
            }
            _ => {}
        }
        stored_from_list(listed, &list, xs, &|attr, buf| {
            sys::getxattr_at(dir, name, attr, buf)
        })
    } else {
        Stored::default()
    };
    Ok(Some((st, file_info(&st, &stored))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn entries_read_without_opening_them_match_their_open_reading() {
        let dir = tempfile::tempdir().unwrap();
        let xs = XattrSupport::default();
        let root = std::fs::File::open(dir.path()).unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        write_attributes(file.as_fd(), attr::HIDDEN | attr::ARCHIVE, &xs).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("link")).unwrap();
        if info_at(root.as_fd(), c"f", &xs).unwrap().is_none() {
            eprintln!("kernel without listxattrat: listings open each entry, nothing to compare");
            return;
        }
        for (name, open) in [
            (c"f", &file),
            (c"d", &std::fs::File::open(dir.path().join("d")).unwrap()),
        ] {
            let (st, info) = info_at(root.as_fd(), name, &xs).unwrap().unwrap();
            let (open_st, open_info) = info_of(open.as_fd(), &xs).unwrap();
            assert_eq!((st.ino, info), (open_st.ino, open_info), "{name:?}");
        }
        if xs.enabled() {
            let (_, info) = info_at(root.as_fd(), c"f", &xs).unwrap().unwrap();
            assert_eq!(info.attributes, attr::HIDDEN | attr::ARCHIVE);
        }
        // A symlink is reported as itself, not followed; a missing name is an error.
        let (st, _) = info_at(root.as_fd(), c"link", &xs).unwrap().unwrap();
        assert!(!st.is_file() && !st.is_dir());
        assert!(info_at(root.as_fd(), c"missing", &xs).is_err());
    }

    #[test]
    fn listed_names_match_whole_names_only() {
        let names = b"security.selinux\0user.quarry.dosattrib\0user.quarry.sd\0";
        assert!(lists(names, XATTR_DOS_ATTRIBUTES));
        assert!(!lists(names, XATTR_CREATION_TIME));
        assert!(!lists(b"user.quarry.dosattrib2\0", XATTR_DOS_ATTRIBUTES));
        assert!(!lists(b"", XATTR_DOS_ATTRIBUTES));
    }

    #[test]
    fn stored_values_are_read_whether_or_not_the_name_list_fits() {
        let dir = tempfile::tempdir().unwrap();
        let xs = XattrSupport::default();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        let fd = file.as_fd();
        assert_eq!(read_stored(fd, &xs), Stored::default());
        if sys::fsetxattr(fd, XATTR_CREATION_TIME, &7u64.to_le_bytes()).is_err() {
            return; // no user xattrs on this file system: nothing more to check
        }
        let only_time = read_stored(fd, &xs);
        assert_eq!(
            (only_time.attributes, only_time.creation_time),
            (None, Some(7))
        );
        sys::fsetxattr(fd, XATTR_DOS_ATTRIBUTES, &0x20u32.to_le_bytes()).unwrap();
        let both = Stored {
            attributes: Some(0x20),
            creation_time: Some(7),
        };
        assert_eq!(read_stored(fd, &xs), both);
        // Names past the stack buffer (a file with many streams): the long way still reads.
        for i in 0..40 {
            let name = std::ffi::CString::new(format!("user.quarry.filler.{i:02}")).unwrap();
            sys::fsetxattr(fd, &name, b"x").unwrap();
        }
        assert!(sys::flistxattr(fd).unwrap().len() > LIST_BUFFER);
        assert_eq!(read_stored(fd, &xs), both);
    }

    #[test]
    fn effective_attributes_follow_windows_rules() {
        assert_eq!(effective_attributes(false, None), attr::ARCHIVE);
        assert_eq!(effective_attributes(true, None), attr::DIRECTORY);
        assert_eq!(effective_attributes(false, Some(0)), attr::NORMAL);
        assert_eq!(
            effective_attributes(false, Some(attr::DIRECTORY | attr::HIDDEN)),
            attr::HIDDEN
        );
        assert_eq!(
            effective_attributes(true, Some(attr::READONLY)),
            attr::READONLY | attr::DIRECTORY
        );
    }
}
