//! Named data streams (`file:name:$DATA`). A small stream is one extended attribute of its
//! file (`user.quarry.stream.<name>`, the name as the client spelled it; lookups fold
//! case), so it lives and dies with the file's inode: renames and hard links carry it. A
//! stream that outgrows [`MAX_INLINE_SIZE`], or that the file system refuses to keep in an
//! xattr (ext4 keeps about 4 KiB of xattrs per inode), moves to the side store
//! ([`super::stream_store`]): the file then carries `user.quarry.bigstream.<name>` holding
//! the id of a side file. Deleting the file through the server removes its side files;
//! side-file bytes are charged to the share's quota (inline bytes are not: they are
//! metadata of at most 64 KiB).

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use quarry_smb::proto::aapl::{AFP_INFO_LEN, AFP_INFO_STREAM, AFP_RESOURCE_STREAM};
use quarry_smb::vfs::names::split_stream;
use quarry_smb::vfs::{
    attr, AllocatedRange, BasicInfoChange, DirCursor, FileInfo, FsError, FsFile, MacMetadata,
    StoredDescriptor, StreamInfo,
};

use super::attrs::XattrSupport;
use super::file::PosixFile;
use super::{stream_store, sys, ShareInner};

/// Prefix of the xattrs that hold streams.
const STREAM_PREFIX: &str = "user.quarry.stream.";
/// Prefix of the xattrs that name a stream's side file.
const BIG_PREFIX: &str = "user.quarry.bigstream.";
/// Largest stream kept in an xattr: Linux's cap on one xattr value.
pub const MAX_INLINE_SIZE: usize = 65_536;
/// Largest stream at all (an explicit bound; the quota and the disk usually come first).
pub const MAX_STREAM_SIZE: u64 = 1 << 40;
/// Allocation unit streams report.
const CLUSTER: u64 = 4096;

fn xattr_name(stream: &str) -> Result<CString, FsError> {
    CString::new(format!("{STREAM_PREFIX}{stream}"))
        .map_err(|_| FsError::InvalidName(format!("stream {stream:?}")))
}

fn big_name(stream: &str) -> Result<CString, FsError> {
    CString::new(format!("{BIG_PREFIX}{stream}"))
        .map_err(|_| FsError::InvalidName(format!("stream {stream:?}")))
}

/// Where a stream's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// In the stream's own xattr.
    Inline,
    /// In the side file with this id.
    Side([u8; stream_store::ID_LEN]),
}

/// Where stream `stream` of an open file keeps its bytes.
fn stored(fd: BorrowedFd<'_>, stream: &str) -> Result<Stored, FsError> {
    let mut id = [0u8; stream_store::ID_LEN];
    match sys::fgetxattr(fd, &big_name(stream)?, &mut id) {
        Ok(Some(stream_store::ID_LEN)) => Ok(Stored::Side(id)),
        Ok(Some(n)) => Err(FsError::from_io(
            format!("stream {stream:?}"),
            std::io::Error::other(format!("side-store id of {n} bytes")),
        )),
        Ok(None) => Ok(Stored::Inline),
        Err(e) if sys::xattr_unsupported(&e) => Ok(Stored::Inline),
        Err(e) => Err(FsError::from_io("read stream side-store id", e)),
    }
}

/// Whether an xattr write failed because the file system will not keep a value that big.
fn too_big_for_xattr(e: &FsError) -> bool {
    matches!(e, FsError::DiskFull(_))
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
    let mut names: Vec<String> = Vec::new();
    for n in list.split(|b| *b == 0) {
        let Ok(n) = std::str::from_utf8(n) else {
            continue;
        };
        if let Some(name) = n
            .strip_prefix(STREAM_PREFIX)
            .or_else(|| n.strip_prefix(BIG_PREFIX))
        {
            // A stream caught between its two forms (a crash while it moved) is one stream.
            if !names.iter().any(|m| m == name) {
                names.push(name.to_string());
            }
        }
    }
    Ok(names)
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

/// The bytes of an inline stream.
fn read_value(fd: BorrowedFd<'_>, stream: &str) -> Result<Vec<u8>, FsError> {
    let name = xattr_name(stream)?;
    let mut buf = vec![0u8; MAX_INLINE_SIZE];
    match sys::fgetxattr(fd, &name, &mut buf).map_err(io_err("read stream"))? {
        Some(n) => {
            buf.truncate(n);
            Ok(buf)
        }
        None => Err(FsError::NotFound(format!("stream {stream:?}"))),
    }
}

/// The size of an inline stream without reading it.
fn inline_len(fd: BorrowedFd<'_>, stream: &str) -> Result<u64, FsError> {
    let name = xattr_name(stream)?;
    match sys::fgetxattr(fd, &name, &mut []).map_err(io_err("size stream"))? {
        Some(n) => Ok(n as u64),
        None => Err(FsError::NotFound(format!("stream {stream:?}"))),
    }
}

/// The size of a stream, wherever it is kept (`root`: the share root, for side files).
fn value_len(fd: BorrowedFd<'_>, root: BorrowedFd<'_>, stream: &str) -> Result<u64, FsError> {
    match stored(fd, stream)? {
        Stored::Inline => inline_len(fd, stream),
        Stored::Side(id) => {
            let side = stream_store::open(root, &id, false)?;
            Ok(sys::fstat(side.as_fd())
                .map_err(io_err("stat stream"))?
                .size)
        }
    }
}

/// Empties stream `stream` (an overwriting open): a side file is given up and the
/// stream is an empty xattr again. `share` releases the side file's bytes.
pub fn reset(fd: BorrowedFd<'_>, share: &ShareInner, stream: &str) -> Result<(), FsError> {
    if let Stored::Side(id) = stored(fd, stream)? {
        write_value(fd, &share.xattrs, stream, &[])?;
        drop_side(fd, share, stream, &id)?;
        return Ok(());
    }
    write_value(fd, &share.xattrs, stream, &[])
}

/// Removes the side file `id` of `stream` and the xattr naming it.
fn drop_side(
    fd: BorrowedFd<'_>,
    share: &ShareInner,
    stream: &str,
    id: &[u8; stream_store::ID_LEN],
) -> Result<(), FsError> {
    match sys::fremovexattr(fd, &big_name(stream)?) {
        Ok(_) => {}
        Err(e) => return Err(FsError::from_io("forget stream side file", e)),
    }
    let freed = stream_store::remove(share.root.as_fd(), id)?;
    share.quota.release(freed);
    Ok(())
}

/// Removes the side files of every stream of an open file (the file is being deleted for
/// good); errors are logged, not returned: the file's deletion goes on.
pub fn drop_side_files(fd: BorrowedFd<'_>, share: &ShareInner) {
    let Ok(names) = stream_names(fd, &share.xattrs) else {
        return;
    };
    for name in names {
        if let Ok(Stored::Side(id)) = stored(fd, &name) {
            match stream_store::remove(share.root.as_fd(), &id) {
                Ok(freed) => share.quota.release(freed),
                Err(e) => tracing::warn!(error = %e, "a deleted file's stream side file stays"),
            }
        }
    }
}

/// The Apple metadata kept in an open file's `AFP_Resource` and `AFP_AfpInfo` streams
/// (found case-insensitively, like every stream lookup), for an AAPL client's listing.
/// Unreadable streams count as absent: a listing never fails over Finder hints.
pub fn mac_metadata(fd: BorrowedFd<'_>, share: &ShareInner) -> MacMetadata {
    let Ok(names) = stream_names(fd, &share.xattrs) else {
        return MacMetadata::default();
    };
    let find = |want: &str| {
        let folded = want.to_lowercase();
        names.iter().find(|n| n.to_lowercase() == folded)
    };
    let rfork_size = find(AFP_RESOURCE_STREAM)
        .and_then(|n| value_len(fd, share.root.as_fd(), n).ok())
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
    if value.len() > MAX_INLINE_SIZE {
        return Err(FsError::DiskFull(format!(
            "an xattr holds at most {MAX_INLINE_SIZE} bytes"
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
    share: &ShareInner,
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
    for name in stream_names(fd, &share.xattrs)? {
        let size = value_len(fd, share.root.as_fd(), &name)?;
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

    /// The share root (side files live beneath it).
    fn root(&self) -> BorrowedFd<'_> {
        self.file.share().root.as_fd()
    }

    /// Changes the stream's bytes under the file's size lock: an inline stream by
    /// read-modify-write of its xattr as long as the result is at most `inline_limit`
    /// bytes and the file system keeps it, else in the side file (moved there first).
    /// `side` makes the change to a side file (`fd`, its size before).
    fn change(
        &self,
        inline_limit: u64,
        inline: impl FnOnce(&mut Vec<u8>) -> Result<(), FsError>,
        side: impl FnOnce(&std::fs::File, u64) -> Result<(), FsError>,
    ) -> Result<(), FsError> {
        self.check_writable()?;
        let _g = self.file.size_lock();
        let name = self.name();
        let file = match stored(self.fd(), &name)? {
            Stored::Side(id) => std::fs::File::from(stream_store::open(self.root(), &id, false)?),
            Stored::Inline => {
                let mut value = read_value(self.fd(), &name)?;
                if inline_limit <= MAX_INLINE_SIZE as u64 {
                    inline(&mut value)?;
                    match write_value(self.fd(), self.file.xattrs(), &name, &value) {
                        Err(e) if too_big_for_xattr(&e) => {}
                        other => return other,
                    }
                    // The file system will not keep it inline: move what is there (the
                    // refused write left the xattr as it was).
                    let before = read_value(self.fd(), &name)?;
                    self.spill(&name, &before)?
                } else {
                    self.spill(&name, &value)?
                }
            }
        };
        let size = file.metadata().map_err(io_err("stat stream"))?.len();
        side(&file, size)
    }

    /// Moves inline stream `name` (holding `value`) to a new side file; returns the side
    /// file, open. The side file is written before the xattr naming it, and that before the
    /// inline xattr goes, so a crash in between leaves the stream readable (the side form
    /// wins).
    fn spill(&self, name: &str, value: &[u8]) -> Result<std::fs::File, FsError> {
        let share = self.file.share();
        let id = stream_store::new_id()?;
        share
            .quota
            .try_charge(value.len() as u64)
            .map_err(|e| FsError::DiskFull(e.to_string()))?;
        let written = (|| {
            let file = std::fs::File::from(stream_store::open(self.root(), &id, true)?);
            file.write_all_at(value, 0)
                .map_err(io_err("write stream side file"))?;
            sys::fsetxattr(self.fd(), &big_name(name)?, &id)
                .map_err(io_err("name stream side file"))?;
            Ok(file)
        })();
        let file = match written {
            Ok(file) => file,
            Err(e) => {
                let _ = stream_store::remove(self.root(), &id);
                share.quota.release(value.len() as u64);
                return Err(e);
            }
        };
        if let Err(e) = sys::fremovexattr(self.fd(), &xattr_name(name)?) {
            tracing::debug!(error = %e, "inline copy of a moved stream stays");
        }
        Ok(file)
    }

    /// Grows or shrinks a side file to `new` bytes from `old`, keeping the quota.
    fn resize_side(&self, file: &std::fs::File, old: u64, new: u64) -> Result<(), FsError> {
        let quota = &self.file.share().quota;
        if new > old {
            quota
                .try_charge(new - old)
                .map_err(|e| FsError::DiskFull(e.to_string()))?;
        }
        if let Err(e) = file.set_len(new) {
            if new > old {
                quota.release(new - old);
            }
            return Err(FsError::from_io("resize stream", e));
        }
        if old > new {
            quota.release(old - new);
        }
        Ok(())
    }
}

impl FsFile for StreamFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        let name = self.name();
        if let Stored::Side(id) = stored(self.fd(), &name)? {
            let fd = stream_store::open(self.root(), &id, false)?;
            let file = std::fs::File::from(fd);
            let mut done = 0;
            while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
                match file.read_at(rest, offset.saturating_add(done as u64)) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(FsError::from_io("read stream", e)),
                }
            }
            return Ok(done);
        }
        let value = read_value(self.fd(), &name)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let from = value.get(start..).unwrap_or_default();
        let n = buf.len().min(from.len());
        for (dst, src) in buf.iter_mut().zip(from) {
            *dst = *src;
        }
        Ok(n)
    }

    fn write_at(&self, offset: u64, data: &[u8], write_through: bool) -> Result<usize, FsError> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= MAX_STREAM_SIZE)
            .ok_or_else(|| {
                FsError::DiskFull(format!("streams hold at most {MAX_STREAM_SIZE} bytes"))
            })?;
        self.change(
            end,
            |v| {
                // `end` is at most MAX_INLINE_SIZE here.
                let (start, end) = (offset as usize, end as usize);
                if v.len() < end {
                    v.resize(end, 0);
                }
                let dst = v.get_mut(start..end).ok_or_else(|| {
                    FsError::InvalidParameter(format!("stream write {start}..{end} past its value"))
                })?;
                dst.copy_from_slice(data);
                Ok(())
            },
            |file, size| {
                if end > size {
                    self.resize_side(file, size, end)?;
                }
                file.write_all_at(data, offset)
                    .map_err(io_err("write stream"))
            },
        )?;
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
        let len = value_len(self.fd(), self.root(), &self.name())?;
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
        if size > MAX_STREAM_SIZE {
            return Err(FsError::DiskFull(format!(
                "streams hold at most {MAX_STREAM_SIZE} bytes"
            )));
        }
        self.change(
            size,
            |v| {
                v.resize(size as usize, 0);
                Ok(())
            },
            |file, old| self.resize_side(file, old, size),
        )
    }

    fn set_allocation_size(&self, size: u64) -> Result<(), FsError> {
        // MS-FSA 2.1.5.14.3: an allocation below the end of file truncates it; more
        // allocation is not reserved ahead.
        let len = value_len(self.fd(), self.root(), &self.name())?;
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
        if let Stored::Side(id) = stored(self.fd(), &old)? {
            // The side file stays; only the xattr naming it moves.
            if old != new {
                sys::fsetxattr(self.fd(), &big_name(new)?, &id).map_err(io_err("rename stream"))?;
                sys::fremovexattr(self.fd(), &big_name(&old)?)
                    .map_err(io_err("remove old stream"))?;
            }
        } else {
            let value = read_value(self.fd(), &old)?;
            write_value(self.fd(), self.file.xattrs(), new, &value)?;
            if old != new {
                sys::fremovexattr(self.fd(), &xattr_name(&old)?)
                    .map_err(io_err("remove old stream"))?;
            }
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
        let name = self.name();
        if let Stored::Side(id) = stored(self.fd(), &name)? {
            drop_side(self.fd(), self.file.share(), &name, &id)?;
            // A leftover inline copy (a move cut short) goes too.
            let _ = sys::fremovexattr(self.fd(), &xattr_name(&name)?);
            return Ok(());
        }
        sys::fremovexattr(self.fd(), &xattr_name(&name)?).map_err(io_err("delete stream"))?;
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
        self.change(
            0,
            |v| {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(v.len());
                let end = usize::try_from(offset.saturating_add(length))
                    .unwrap_or(usize::MAX)
                    .min(v.len());
                if let Some(range) = v.get_mut(start..end) {
                    range.fill(0);
                }
                Ok(())
            },
            |file, size| {
                let end = offset.saturating_add(length).min(size);
                let zeros = [0u8; 64 * 1024];
                let mut at = offset.min(end);
                while at < end {
                    let n = (end - at).min(zeros.len() as u64) as usize;
                    let chunk = zeros.get(..n).unwrap_or(&zeros);
                    file.write_all_at(chunk, at)
                        .map_err(io_err("zero stream"))?;
                    at += n as u64;
                }
                Ok(())
            },
        )
    }

    fn close(&self) -> Result<(), FsError> {
        self.file.close()
    }

    fn close_cached(&self) -> Result<(), FsError> {
        self.file.close_cached()
    }

    fn allocated_ranges(
        &self,
        offset: u64,
        length: u64,
        max_ranges: usize,
    ) -> Result<(Vec<AllocatedRange>, bool), FsError> {
        let end =
            offset
                .saturating_add(length)
                .min(value_len(self.fd(), self.root(), &self.name())?);
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
