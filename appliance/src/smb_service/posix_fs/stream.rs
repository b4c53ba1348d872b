//! Named data streams (`file:name:$DATA`), each kept as one extended attribute of its file
//! (`user.quarry.stream.<name>`, the name as the client spelled it; lookups fold case).
//! A stream therefore lives and dies with its file's inode: renames and hard links carry
//! it, deleting the file removes it. An xattr value holds at most 64 KiB
//! ([`MAX_STREAM_SIZE`]; the file system may allow less): what Windows clients keep in
//! streams (zone identifiers, summary information, macOS Finder info) fits; a write
//! beyond gets DISK_FULL. Stream bytes are not charged to the share's quota.

use std::ffi::CString;
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use quarry_smb::proto::aapl::{AFP_INFO_LEN, AFP_INFO_STREAM, AFP_RESOURCE_STREAM};
use quarry_smb::vfs::names::split_stream;
use quarry_smb::vfs::{
    attr, AllocatedRange, BasicInfoChange, DirCursor, FileInfo, FsError, FsFile, MacMetadata,
    StoredDescriptor, StreamInfo,
};

use super::attrs::XattrSupport;
use super::file::PosixFile;
use super::sys;

/// Prefix of the xattrs that hold streams.
const STREAM_PREFIX: &str = "user.quarry.stream.";
/// Largest stream: Linux's cap on one xattr value.
pub const MAX_STREAM_SIZE: usize = 65_536;
/// Allocation unit streams report.
const CLUSTER: u64 = 4096;

fn xattr_name(stream: &str) -> Result<CString, FsError> {
    CString::new(format!("{STREAM_PREFIX}{stream}"))
        .map_err(|_| FsError::InvalidName(format!("stream {stream:?}")))
}

fn io_err(context: &str) -> impl FnOnce(std::io::Error) -> FsError + '_ {
    move |e| FsError::from_io(context, e)
}

/// The stored names of the streams of an open file.
pub fn stream_names(fd: BorrowedFd<'_>, xs: &XattrSupport) -> Result<Vec<String>, FsError> {
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
    Ok(list
        .split(|b| *b == 0)
        .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix(STREAM_PREFIX))
        .map(str::to_string)
        .collect())
}

/// The stored name of stream `name` of an open file (compared case-insensitively).
pub fn find_stream(
    fd: BorrowedFd<'_>,
    xs: &XattrSupport,
    name: &str,
) -> Result<Option<String>, FsError> {
    let folded = name.to_lowercase();
    Ok(stream_names(fd, xs)?
        .into_iter()
        .find(|n| n.to_lowercase() == folded))
}

/// The bytes of a stream.
fn read_value(fd: BorrowedFd<'_>, stream: &str) -> Result<Vec<u8>, FsError> {
    let name = xattr_name(stream)?;
    let mut buf = vec![0u8; MAX_STREAM_SIZE];
    match sys::fgetxattr(fd, &name, &mut buf).map_err(io_err("read stream"))? {
        Some(n) => {
            buf.truncate(n);
            Ok(buf)
        }
        None => Err(FsError::NotFound(format!("stream {stream:?}"))),
    }
}

/// The size of a stream without reading it.
fn value_len(fd: BorrowedFd<'_>, stream: &str) -> Result<u64, FsError> {
    let name = xattr_name(stream)?;
    match sys::fgetxattr(fd, &name, &mut []).map_err(io_err("size stream"))? {
        Some(n) => Ok(n as u64),
        None => Err(FsError::NotFound(format!("stream {stream:?}"))),
    }
}

/// The Apple metadata kept in an open file's `AFP_Resource` and `AFP_AfpInfo` streams
/// (found case-insensitively, like every stream lookup), for an AAPL client's listing.
/// Unreadable streams count as absent: a listing never fails over Finder hints.
pub fn mac_metadata(fd: BorrowedFd<'_>, xs: &XattrSupport) -> MacMetadata {
    let Ok(names) = stream_names(fd, xs) else {
        return MacMetadata::default();
    };
    let find = |want: &str| {
        let folded = want.to_lowercase();
        names.iter().find(|n| n.to_lowercase() == folded)
    };
    let rfork_size = find(AFP_RESOURCE_STREAM)
        .and_then(|n| value_len(fd, n).ok())
        .unwrap_or(0);
    let afp_info = find(AFP_INFO_STREAM).and_then(|n| {
        let mut buf = [0u8; AFP_INFO_LEN];
        // A longer value fails with ERANGE: not an AfpInfo either.
        match sys::fgetxattr(fd, &xattr_name(n).ok()?, &mut buf) {
            Ok(Some(AFP_INFO_LEN)) => Some(buf.to_vec()),
            _ => None,
        }
    });
    MacMetadata {
        rfork_size,
        afp_info,
    }
}

/// Stores a stream's bytes (creating it).
pub fn write_value(
    fd: BorrowedFd<'_>,
    xs: &XattrSupport,
    stream: &str,
    value: &[u8],
) -> Result<(), FsError> {
    if !xs.enabled() {
        return Err(FsError::NotSupported(
            "the share's file system keeps no extended attributes, so no streams".into(),
        ));
    }
    if value.len() > MAX_STREAM_SIZE {
        return Err(FsError::DiskFull(format!(
            "streams hold at most {MAX_STREAM_SIZE} bytes"
        )));
    }
    let name = xattr_name(stream)?;
    match sys::fsetxattr(fd, &name, value) {
        Ok(()) => Ok(()),
        Err(e) if sys::xattr_unsupported(&e) => {
            xs.note(&e);
            Err(FsError::NotSupported("no extended attributes".into()))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::E2BIG) | Some(libc::ENOSPC)) => {
            Err(FsError::DiskFull(format!(
                "the file system cannot hold stream {stream:?}: {e}"
            )))
        }
        Err(e) => Err(FsError::from_io("write stream", e)),
    }
}

/// The allocation a stream of `len` bytes reports.
fn allocation(len: u64) -> u64 {
    len.div_ceil(CLUSTER) * CLUSTER
}

/// The streams of an open file for FileStreamInformation: the unnamed one (files only),
/// then the named ones.
pub fn list(
    fd: BorrowedFd<'_>,
    xs: &XattrSupport,
    data: Option<&FileInfo>,
) -> Result<Vec<StreamInfo>, FsError> {
    let mut out = Vec::new();
    if let Some(info) = data {
        out.push(StreamInfo {
            name: String::new(),
            size: info.end_of_file,
            allocation: info.allocation_size,
        });
    }
    for name in stream_names(fd, xs)? {
        let size = value_len(fd, &name)?;
        out.push(StreamInfo {
            name,
            size,
            allocation: allocation(size),
        });
    }
    Ok(out)
}

/// An open of a named stream: its file's open plus the stream's stored name.
pub struct StreamFile {
    file: PosixFile,
    name: Mutex<String>,
    writable: bool,
}

impl StreamFile {
    /// An open of stream `name` (as stored) of `file`.
    pub(crate) fn new(file: PosixFile, name: String, writable: bool) -> StreamFile {
        StreamFile {
            file,
            name: Mutex::new(name),
            writable,
        }
    }

    fn name(&self) -> String {
        self.name.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.raw_fd()
    }

    fn check_writable(&self) -> Result<(), FsError> {
        if self.file.share_read_only() {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        if !self.writable {
            return Err(FsError::AccessDenied("not opened for writing".into()));
        }
        Ok(())
    }

    /// Read-modify-write of the stream's bytes under the file's size lock.
    fn modify(
        &self,
        change: impl FnOnce(&mut Vec<u8>) -> Result<(), FsError>,
    ) -> Result<(), FsError> {
        self.check_writable()?;
        let _g = self.file.size_lock();
        let name = self.name();
        let mut value = read_value(self.fd(), &name)?;
        change(&mut value)?;
        write_value(self.fd(), self.file.xattrs(), &name, &value)
    }
}

impl FsFile for StreamFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        let value = read_value(self.fd(), &self.name())?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(value.len());
        let n = buf.len().min(value.len() - start);
        buf[..n].copy_from_slice(&value[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, offset: u64, data: &[u8], write_through: bool) -> Result<usize, FsError> {
        let start = usize::try_from(offset)
            .ok()
            .filter(|o| o.saturating_add(data.len()) <= MAX_STREAM_SIZE)
            .ok_or_else(|| {
                FsError::DiskFull(format!("streams hold at most {MAX_STREAM_SIZE} bytes"))
            })?;
        self.modify(|v| {
            if v.len() < start + data.len() {
                v.resize(start + data.len(), 0);
            }
            v[start..start + data.len()].copy_from_slice(data);
            Ok(())
        })?;
        if write_through {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&self) -> Result<(), FsError> {
        // Extended attributes are metadata: fsync, not fdatasync.
        self.file.sync_all()
    }

    fn info(&self) -> Result<FileInfo, FsError> {
        let mut info = self.file.info()?;
        let len = value_len(self.fd(), &self.name())?;
        info.end_of_file = len;
        info.allocation_size = allocation(len);
        info.is_dir = false;
        info.attributes &= !attr::DIRECTORY;
        if info.attributes == 0 {
            info.attributes = attr::NORMAL;
        }
        Ok(info)
    }

    fn path(&self) -> String {
        format!("{}:{}", self.file.path(), self.name())
    }

    fn set_basic_info(&self, change: &BasicInfoChange) -> Result<(), FsError> {
        self.file.set_basic_info(change)
    }

    fn set_end_of_file(&self, size: u64) -> Result<(), FsError> {
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= MAX_STREAM_SIZE)
            .ok_or_else(|| {
                FsError::DiskFull(format!("streams hold at most {MAX_STREAM_SIZE} bytes"))
            })?;
        self.modify(|v| {
            v.resize(size, 0);
            Ok(())
        })
    }

    fn set_allocation_size(&self, size: u64) -> Result<(), FsError> {
        // MS-FSA 2.1.5.14.3: an allocation below the end of file truncates it; more
        // allocation has nothing to reserve in an xattr.
        let len = value_len(self.fd(), &self.name())?;
        if size < len {
            self.set_end_of_file(size)?;
        }
        Ok(())
    }

    fn rename(&self, new_path: &str, replace_if_exists: bool) -> Result<(), FsError> {
        self.check_writable()?;
        let target = format!("f{new_path}");
        let parsed = split_stream(&target)?;
        let (true, Some(new)) = (parsed.file == "f", parsed.stream) else {
            return Err(FsError::InvalidParameter(
                "a stream is renamed to another stream of its file".into(),
            ));
        };
        let _g = self.file.size_lock();
        let old = self.name();
        if let Some(existing) = find_stream(self.fd(), self.file.xattrs(), new)? {
            if existing.to_lowercase() != old.to_lowercase() {
                return Err(if replace_if_exists {
                    FsError::InvalidParameter("a stream cannot replace another".into())
                } else {
                    FsError::Exists(format!("stream {existing:?}"))
                });
            }
        }
        let value = read_value(self.fd(), &old)?;
        write_value(self.fd(), self.file.xattrs(), new, &value)?;
        if old != new {
            sys::fremovexattr(self.fd(), &xattr_name(&old)?)
                .map_err(io_err("remove old stream"))?;
        }
        *self.name.lock().unwrap_or_else(|p| p.into_inner()) = new.to_string();
        Ok(())
    }

    fn parent_file_id(&self) -> Result<Option<u64>, FsError> {
        self.file.parent_file_id()
    }

    fn check_deletable(&self) -> Result<(), FsError> {
        if self.file.share_read_only() {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        Ok(())
    }

    fn unlink(&self) -> Result<(), FsError> {
        if self.file.share_read_only() {
            return Err(FsError::AccessDenied("read-only share".into()));
        }
        let _g = self.file.size_lock();
        sys::fremovexattr(self.fd(), &xattr_name(&self.name())?)
            .map_err(io_err("delete stream"))?;
        Ok(())
    }

    fn unlink_file(&self) -> Result<(), FsError> {
        self.file.unlink()
    }

    fn list_dir(&self, _pattern: &str) -> Result<Box<dyn DirCursor>, FsError> {
        Err(FsError::NotDirectory)
    }

    fn set_sparse(&self, _sparse: bool) -> Result<(), FsError> {
        Err(FsError::NotSupported("streams are never sparse".into()))
    }

    fn zero_data(&self, offset: u64, length: u64) -> Result<(), FsError> {
        self.modify(|v| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(v.len());
            let end = usize::try_from(offset.saturating_add(length))
                .unwrap_or(usize::MAX)
                .min(v.len());
            v[start..end].fill(0);
            Ok(())
        })
    }

    fn close(&self) -> Result<(), FsError> {
        self.file.close()
    }

    fn allocated_ranges(
        &self,
        offset: u64,
        length: u64,
        max_ranges: usize,
    ) -> Result<(Vec<AllocatedRange>, bool), FsError> {
        let end = offset
            .saturating_add(length)
            .min(value_len(self.fd(), &self.name())?);
        if offset >= end {
            return Ok((Vec::new(), false));
        }
        if max_ranges == 0 {
            return Ok((Vec::new(), true));
        }
        Ok((
            vec![AllocatedRange {
                offset,
                length: end - offset,
            }],
            false,
        ))
    }

    fn streams(&self) -> Result<Vec<StreamInfo>, FsError> {
        self.file.streams()
    }

    fn eas(&self) -> Result<Vec<(String, Vec<u8>)>, FsError> {
        self.file.eas()
    }

    fn set_eas(&self, eas: &[(String, Vec<u8>)]) -> Result<(), FsError> {
        self.file.set_eas(eas)
    }

    fn security_descriptor(&self) -> Result<StoredDescriptor, FsError> {
        self.file.security_descriptor()
    }

    fn set_security_descriptor(&self, descriptor: &[u8]) -> Result<(), FsError> {
        self.file.set_security_descriptor(descriptor)
    }
}
