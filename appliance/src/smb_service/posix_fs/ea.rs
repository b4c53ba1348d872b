//! Extended attributes of SMB clients (FileFullEaInformation, the `ExtA` create
//! context), each kept as a `user.quarry.ea.<NAME>` xattr of the file. NTFS upper-cases
//! EA names and compares them case-insensitively; so does this store.

use std::ffi::CString;
use std::os::fd::BorrowedFd;

use quarry_smb::vfs::FsError;

use super::attrs::XattrSupport;
use super::sys;

/// Prefix of the xattrs that hold EAs.
const EA_PREFIX: &str = "user.quarry.ea.";

fn xattr_name(name: &str) -> Result<CString, FsError> {
    CString::new(format!("{EA_PREFIX}{name}"))
        .map_err(|_| FsError::InvalidParameter(format!("EA name {name:?}")))
}

/// The EAs of an open file, sorted by name.
pub fn read_all(fd: BorrowedFd<'_>, xs: &XattrSupport) -> Result<Vec<(String, Vec<u8>)>, FsError> {
    if !xs.enabled() {
        return Ok(Vec::new());
    }
    let list = match sys::flistxattr(fd) {
        Ok(l) => l,
        Err(e) if sys::xattr_unsupported(&e) => {
            xs.note(&e);
            return Ok(Vec::new());
        }
        Err(e) => return Err(FsError::from_io("list extended attributes", e)),
    };
    let mut out = Vec::new();
    for raw in list.split(|b| *b == 0) {
        let Some(name) = std::str::from_utf8(raw)
            .ok()
            .and_then(|n| n.strip_prefix(EA_PREFIX))
        else {
            continue;
        };
        let mut value = vec![0u8; 65_536];
        if let Some(n) = sys::fgetxattr(fd, &xattr_name(name)?, &mut value)
            .map_err(|e| FsError::from_io("read extended attribute", e))?
        {
            value.truncate(n);
            out.push((name.to_string(), value));
        }
    }
    out.sort();
    Ok(out)
}

/// Sets or (with an empty value) removes EAs of an open file.
pub fn write(
    fd: BorrowedFd<'_>,
    xs: &XattrSupport,
    eas: &[(String, Vec<u8>)],
) -> Result<(), FsError> {
    if !xs.enabled() {
        return Err(FsError::NotSupported(
            "the share's file system keeps no extended attributes".into(),
        ));
    }
    for (name, value) in eas {
        let key = xattr_name(&name.to_ascii_uppercase())?;
        if value.is_empty() {
            sys::fremovexattr(fd, &key)
                .map_err(|e| FsError::from_io("remove extended attribute", e))?;
            continue;
        }
        match sys::fsetxattr(fd, &key, value) {
            Ok(()) => {}
            Err(e) if sys::xattr_unsupported(&e) => {
                xs.note(&e);
                return Err(FsError::NotSupported("no extended attributes".into()));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::E2BIG) | Some(libc::ENOSPC)) => {
                return Err(FsError::DiskFull(format!(
                    "extended attribute {name:?}: {e}"
                )))
            }
            Err(e) => return Err(FsError::from_io("write extended attribute", e)),
        }
    }
    Ok(())
}
