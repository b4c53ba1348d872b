//! The side store of named streams too large for an extended attribute: one file per
//! stream in the share's hidden `.quarry-streams` directory, named by a random id that
//! the stream's file records in an xattr (`user.quarry.bigstream.<name>`, see
//! [`super::stream`]). The id travels with the file's inode (renames, hard links), and the
//! store sits inside the share, so snapshots and previous versions carry it.
//!
//! The name is reserved: no client can open, create, rename to or list a
//! `.quarry-streams` entry anywhere in a share ([`is_reserved`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use quarry_smb::vfs::FsError;

use super::sys;

/// The hidden directory at the share root.
pub const SIDE_DIR: &str = ".quarry-streams";
/// Bytes of a side-store id.
pub const ID_LEN: usize = 16;

/// Whether `name` (one path component) is the reserved side-store name.
pub fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case(SIDE_DIR)
}

/// Whether any component of a client path (`\`-separated) is reserved.
pub fn path_is_reserved(path: &str) -> bool {
    path.split(['\\', '/'])
        .any(|c| is_reserved(c.split(':').next().unwrap_or(c)))
}

/// A fresh random id.
pub fn new_id() -> Result<[u8; ID_LEN], FsError> {
    let mut id = [0u8; ID_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id).map_err(|_| {
        FsError::from_io(
            "random stream id",
            std::io::Error::other("the system random source failed"),
        )
    })?;
    Ok(id)
}

/// The side file's path beneath the share root.
fn rel_path(id: &[u8; ID_LEN]) -> String {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!("{SIDE_DIR}/{hex}")
}

/// Opens the side file of `id` for reading and writing; `create` makes it (and the hidden
/// directory) when missing.
pub fn open(root: BorrowedFd<'_>, id: &[u8; ID_LEN], create: bool) -> Result<OwnedFd, FsError> {
    if create {
        let dir = sys::cstr(SIDE_DIR).map_err(|_| FsError::InvalidName(SIDE_DIR.into()))?;
        match sys::mkdirat(root, &dir, 0o700) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(FsError::from_io("create the stream side store", e)),
        }
    }
    let path = rel_path(id);
    let cpath = sys::cstr(&path).map_err(|_| FsError::InvalidName(path.clone()))?;
    let flags =
        libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW | if create { libc::O_CREAT } else { 0 };
    sys::openat_beneath(root, &cpath, flags, 0o600).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => FsError::NotFound(format!("stream side file {path}")),
        _ => FsError::from_io(format!("open stream side file {path}"), e),
    })
}

/// Removes the side file of `id`; returns its size (for the quota), 0 if it was gone.
pub fn remove(root: BorrowedFd<'_>, id: &[u8; ID_LEN]) -> Result<u64, FsError> {
    let size = match open(root, id, false) {
        Ok(fd) => sys::fstat(fd.as_fd()).map(|st| st.size).unwrap_or(0),
        Err(FsError::NotFound(_)) => return Ok(0),
        Err(e) => return Err(e),
    };
    let dir = sys::openat_beneath(
        root,
        &sys::cstr(SIDE_DIR).map_err(|_| FsError::InvalidName(SIDE_DIR.into()))?,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )
    .map_err(|e| FsError::from_io("open the stream side store", e))?;
    let name = rel_path(id);
    let leaf = name.rsplit('/').next().unwrap_or(&name);
    let cleaf = sys::cstr(leaf).map_err(|_| FsError::InvalidName(leaf.into()))?;
    match sys::unlinkat(dir.as_fd(), &cleaf, false) {
        Ok(()) => Ok(size),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(0),
        Err(e) => Err(FsError::from_io("remove stream side file", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_side_store_name_is_reserved_in_any_case_and_position() {
        assert!(is_reserved(".quarry-streams"));
        assert!(is_reserved(".Quarry-Streams"));
        assert!(!is_reserved("quarry-streams"));
        assert!(path_is_reserved(".quarry-streams"));
        assert!(path_is_reserved("a\\.QUARRY-STREAMS\\b"));
        assert!(path_is_reserved(".quarry-streams:s"));
        assert!(!path_is_reserved("a\\b.quarry-streams"));
    }

    #[test]
    fn side_files_are_made_found_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::File::open(dir.path()).unwrap();
        let id = new_id().unwrap();
        assert!(matches!(
            open(root.as_fd(), &id, false),
            Err(FsError::NotFound(_))
        ));
        let fd = open(root.as_fd(), &id, true).unwrap();
        std::fs::write(
            format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)),
            b"12345",
        )
        .unwrap();
        assert!(dir.path().join(rel_path(&id)).exists());
        assert_eq!(remove(root.as_fd(), &id).unwrap(), 5);
        assert_eq!(remove(root.as_fd(), &id).unwrap(), 0, "already gone");
    }
}
