//! File-system measurements: recursive usage scans and statvfs.

use std::fs;
use std::path::Path;

use super::Capacity;

/// Most directory levels a usage scan descends (a deeper tree is counted to this depth).
const MAX_SCAN_DEPTH: usize = 256;

/// Sum of the apparent sizes of the regular files under `dir` (symlinks not followed).
/// This is the measure the SMB write path charges against the quota.
pub fn apparent_size(dir: &Path) -> u64 {
    fn walk(dir: &Path, depth: usize) -> u64 {
        if depth > MAX_SCAN_DEPTH {
            return 0;
        }
        let Ok(entries) = fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path(), depth + 1),
                Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => 0,
            })
            .sum()
    }
    walk(dir, 0)
}

/// Capacity of the file system holding `path`.
pub fn statvfs(path: &Path) -> std::io::Result<Capacity> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    let size = (st.f_blocks as u64).saturating_mul(frsize);
    let free = (st.f_bfree as u64).saturating_mul(frsize);
    let avail = (st.f_bavail as u64).saturating_mul(frsize);
    Ok(Capacity {
        size_bytes: size,
        used_bytes: size.saturating_sub(free),
        available_bytes: avail,
    })
}
