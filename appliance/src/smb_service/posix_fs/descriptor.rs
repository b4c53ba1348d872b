//! Security descriptors of files, kept as the client's self-relative bytes in the
//! `user.quarry.sd` extended attribute. The server decides with them; this module only
//! reads and writes them.

use std::os::fd::{AsFd, BorrowedFd};

use quarry_smb::security::descriptor::MAX_DESCRIPTOR_LEN;
use quarry_smb::vfs::{FsError, StoredDescriptor};

use super::attrs::XattrSupport;
use super::sys;

/// xattr holding the security descriptor.
const XATTR_DESCRIPTOR: &std::ffi::CStr = c"user.quarry.sd";
/// Most descriptors (a handful of ACEs) fit in one read of this size.
const FIRST_READ: usize = 1024;

/// The stored descriptor of an open file; `None` when none is stored or the file system
/// keeps no user xattrs.
pub fn read(fd: BorrowedFd<'_>, xs: &XattrSupport) -> Result<StoredDescriptor, FsError> {
    if !xs.enabled() {
        return Ok(None);
    }
    let mut buf = vec![0u8; FIRST_READ];
    loop {
        match sys::fgetxattr(fd, XATTR_DESCRIPTOR, &mut buf) {
            Ok(Some(n)) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Ok(None) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) && buf.len() < MAX_DESCRIPTOR_LEN => {
                buf.resize(MAX_DESCRIPTOR_LEN, 0);
            }
            Err(e) if sys::xattr_unsupported(&e) => {
                xs.note(&e);
                return Ok(None);
            }
            Err(e) => return Err(FsError::from_io("read security descriptor", e)),
        }
    }
}

/// The stored descriptor of a directory held by an `O_PATH` descriptor (the parents the
/// resolver opens, read for every new file's inherited descriptor), which takes no `f*xattr`
/// calls: read as its own entry `.` with `getxattrat` (Linux 6.13), else through a fresh
/// read-only open.
pub fn read_dir(dir: BorrowedFd<'_>, xs: &XattrSupport) -> Result<StoredDescriptor, FsError> {
    if !xs.enabled() {
        return Ok(None);
    }
    if super::attrs::xattr_at_calls() {
        let mut buf = vec![0u8; FIRST_READ];
        match sys::getxattr_at(dir, c".", XATTR_DESCRIPTOR, &mut buf) {
            Ok(Some(n)) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Ok(None) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => super::attrs::no_xattr_at_calls(),
            // A larger descriptor, no xattrs here, a seccomp filter's EPERM: the open below
            // reads it (or reports why not) as before these calls.
            Err(_) => {}
        }
    }
    let fd = sys::openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(|e| FsError::from_io("open the parent directory", e))?;
    read(fd.as_fd(), xs)
}

/// Stores a descriptor. Where the file system keeps no user xattrs this fails with
/// NOT_SUPPORTED unless `best_effort` (descriptors inherited at create time), so that a
/// client never believes a DACL protects a file when it does not.
pub fn write(
    fd: BorrowedFd<'_>,
    descriptor: &[u8],
    xs: &XattrSupport,
    best_effort: bool,
) -> Result<(), FsError> {
    if descriptor.len() > MAX_DESCRIPTOR_LEN {
        return Err(FsError::InvalidParameter(
            "security descriptor too large".into(),
        ));
    }
    let unsupported = || {
        if best_effort {
            Ok(())
        } else {
            Err(FsError::NotSupported(
                "the share's file system keeps no extended attributes".into(),
            ))
        }
    };
    if !xs.enabled() {
        return unsupported();
    }
    match sys::fsetxattr(fd, XATTR_DESCRIPTOR, descriptor) {
        Ok(()) => Ok(()),
        Err(e) if sys::xattr_unsupported(&e) => {
            xs.note(&e);
            unsupported()
        }
        Err(e) => Err(FsError::from_io("store security descriptor", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    #[test]
    fn a_parent_descriptor_reads_the_same_with_or_without_opening_it() {
        let tmp = tempfile::tempdir().unwrap();
        let xs = XattrSupport::default();
        let dir = |name: &str, sd: Option<&[u8]>| {
            let p = tmp.path().join(name);
            std::fs::create_dir(&p).unwrap();
            if let Some(sd) = sd {
                let f = std::fs::File::open(&p).unwrap();
                write(f.as_fd(), sd, &xs, false).unwrap();
            }
            let c = sys::cstr(p.to_str().unwrap()).unwrap();
            // SAFETY: `c` is NUL-terminated; the result is checked and owned at once.
            let fd = unsafe { libc::open(c.as_ptr(), super::super::resolve::PARENT_FLAGS) };
            assert!(fd >= 0);
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        };
        let small: Vec<u8> = (0..104u8).collect();
        // Larger than the first read: the getxattrat attempt gets ERANGE.
        let large: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let cases = [
            (dir("none", None), None),
            (dir("small", Some(&small)), Some(small.clone())),
            (dir("large", Some(&large)), Some(large.clone())),
        ];
        for at_calls in [true, false] {
            super::super::attrs::use_xattr_at_calls(at_calls);
            for (fd, want) in &cases {
                assert_eq!(
                    read_dir(fd.as_fd(), &xs).unwrap(),
                    *want,
                    "at calls {at_calls}"
                );
            }
        }
        super::super::attrs::use_xattr_at_calls(true);
    }
}
