//! The storage boundary: the only way the SMB server reaches files. The appliance implements it
//! (`quarry::smb_service::posix_fs`); tests may wrap an implementation to inject faults.
//!
//! # API boundary
//! - The server holds one `Arc<dyn ShareFs>` per tree connect and one `Box<dyn FsFile>` per
//!   open. Every method is **synchronous and may block** (disk I/O, fsync): the server calls
//!   them from a blocking pool (`spawn_blocking` or an I/O thread), never on the reactor.
//! - Paths are exactly what the client sent in CREATE / SET_INFO(Rename), decoded from UTF-16
//!   to a Rust string: relative to the share root, `\`-separated, no leading `\`; the empty
//!   path is the share root itself. The implementation validates names ([`names`]) and
//!   resolves every path beneath the share root, case-insensitively.
//! - SMB semantics that span opens (share modes, delete-pending, byte-range locks, oplocks)
//!   belong to the server (`crate::share_mode`); this trait only carries out the file-system
//!   side: e.g. the server decides *when* a delete-on-close takes effect and then calls
//!   [`FsFile::unlink`].
//! - Quota: the implementation charges the share's quota before a file grows and releases it
//!   when a file shrinks or is deleted; a write that does not fit fails with
//!   [`FsError::DiskFull`] before any byte of it lands.
//!
//! Times are Windows FILETIMEs (100 ns intervals since 1601-01-01 UTC, [`FileTime`]).

pub mod names;
pub mod wildcard;

use std::fmt;

/// NTSTATUS values the storage layer maps errors to (MS-ERREF 2.3.1): the codec's table
/// ([`crate::proto::status`]) plus the few file-system statuses it does not carry.
pub mod nt {
    pub use crate::proto::status::*;
    /// A file-system I/O error (EIO).
    pub const IO_DEVICE_ERROR: u32 = 0xC000_0185;
    /// The file is too large for the file system (EFBIG).
    pub const FILE_TOO_LARGE: u32 = 0xC000_0904;
    /// The lock range is invalid (offset + length overflows).
    pub const INVALID_LOCK_RANGE: u32 = 0xC000_01A1;
}

/// A Windows FILETIME: 100-nanosecond intervals since 1601-01-01 UTC. 0 means "unknown /
/// do not change" where the protocol says so.
pub type FileTime = u64;

/// FILETIME -1 in a SET_INFO: stop updating this time for this open (MS-FSA 2.1.5.14.2).
pub const FILETIME_FREEZE: FileTime = u64::MAX;
/// FILETIME -2 in a SET_INFO: resume updating this time for this open.
pub const FILETIME_THAW: FileTime = u64::MAX - 1;

/// Seconds between 1601-01-01 and 1970-01-01.
pub const FILETIME_UNIX_EPOCH_SECS: u64 = 11_644_473_600;
/// FILETIME ticks (100 ns) per second.
pub const FILETIME_TICKS_PER_SEC: u64 = 10_000_000;

/// Converts Unix time (seconds + nanoseconds, possibly before 1970) to a FILETIME, clamping
/// times before 1601 to 0.
pub fn filetime_from_unix(secs: i64, nsec: u32) -> FileTime {
    let ticks = (i128::from(secs) + i128::from(FILETIME_UNIX_EPOCH_SECS))
        * i128::from(FILETIME_TICKS_PER_SEC)
        + i128::from(nsec / 100);
    u64::try_from(ticks.max(0)).unwrap_or(u64::MAX)
}

/// Converts a FILETIME to Unix (seconds, nanoseconds).
pub fn filetime_to_unix(ft: FileTime) -> (i64, u32) {
    let secs = (ft / FILETIME_TICKS_PER_SEC) as i64 - FILETIME_UNIX_EPOCH_SECS as i64;
    let nsec = ((ft % FILETIME_TICKS_PER_SEC) * 100) as u32;
    (secs, nsec)
}

/// DOS/NT file attribute bits (MS-FSCC 2.6) the implementation stores and reports.
pub mod attr {
    /// FILE_ATTRIBUTE_READONLY.
    pub const READONLY: u32 = 0x0000_0001;
    /// FILE_ATTRIBUTE_HIDDEN.
    pub const HIDDEN: u32 = 0x0000_0002;
    /// FILE_ATTRIBUTE_SYSTEM.
    pub const SYSTEM: u32 = 0x0000_0004;
    /// FILE_ATTRIBUTE_DIRECTORY (derived from the file type, never stored).
    pub const DIRECTORY: u32 = 0x0000_0010;
    /// FILE_ATTRIBUTE_ARCHIVE.
    pub const ARCHIVE: u32 = 0x0000_0020;
    /// FILE_ATTRIBUTE_NORMAL: reported when no other bit is set.
    pub const NORMAL: u32 = 0x0000_0080;
    /// FILE_ATTRIBUTE_TEMPORARY.
    pub const TEMPORARY: u32 = 0x0000_0100;
    /// FILE_ATTRIBUTE_SPARSE_FILE (set through FSCTL_SET_SPARSE).
    pub const SPARSE_FILE: u32 = 0x0000_0200;
    /// FILE_ATTRIBUTE_OFFLINE.
    pub const OFFLINE: u32 = 0x0000_1000;
    /// FILE_ATTRIBUTE_NOT_CONTENT_INDEXED.
    pub const NOT_CONTENT_INDEXED: u32 = 0x0000_2000;
    /// Bits a client may set through CREATE or SET_INFO(Basic); others are ignored.
    pub const SETTABLE: u32 =
        READONLY | HIDDEN | SYSTEM | ARCHIVE | TEMPORARY | OFFLINE | NOT_CONTENT_INDEXED;
}

/// CREATE options (MS-SMB2 2.2.13) the storage layer honours; the rest are the server's.
pub mod create_options {
    /// FILE_DIRECTORY_FILE: the target must be (or is created as) a directory.
    pub const DIRECTORY_FILE: u32 = 0x0000_0001;
    /// FILE_WRITE_THROUGH: writes are durable before they are acknowledged.
    pub const WRITE_THROUGH: u32 = 0x0000_0002;
    /// FILE_NON_DIRECTORY_FILE: the target must not be a directory.
    pub const NON_DIRECTORY_FILE: u32 = 0x0000_0040;
    /// FILE_DELETE_ON_CLOSE: handled by the server (it calls [`super::FsFile::unlink`]).
    pub const DELETE_ON_CLOSE: u32 = 0x0000_1000;
}

/// CreateDisposition (MS-SMB2 2.2.13): what to do when the file does or does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateDisposition {
    /// Exists: replace it (truncate, reset attributes). Absent: create.
    Supersede,
    /// Exists: open. Absent: fail with OBJECT_NAME_NOT_FOUND.
    Open,
    /// Exists: fail with OBJECT_NAME_COLLISION. Absent: create.
    Create,
    /// Exists: open. Absent: create.
    OpenIf,
    /// Exists: truncate. Absent: fail.
    Overwrite,
    /// Exists: truncate. Absent: create.
    OverwriteIf,
}

impl CreateDisposition {
    /// Decodes the wire value; `None` for values above 5 (the server answers INVALID_PARAMETER).
    pub fn from_wire(v: u32) -> Option<CreateDisposition> {
        Some(match v {
            0 => CreateDisposition::Supersede,
            1 => CreateDisposition::Open,
            2 => CreateDisposition::Create,
            3 => CreateDisposition::OpenIf,
            4 => CreateDisposition::Overwrite,
            5 => CreateDisposition::OverwriteIf,
            _ => return None,
        })
    }

    /// Whether this disposition may create the file (so write access to the parent matters).
    pub fn may_create(self) -> bool {
        !matches!(self, CreateDisposition::Open | CreateDisposition::Overwrite)
    }
}

/// CreateAction returned in the CREATE response (MS-SMB2 2.2.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateAction {
    /// FILE_SUPERSEDED (0).
    Superseded,
    /// FILE_OPENED (1).
    Opened,
    /// FILE_CREATED (2).
    Created,
    /// FILE_OVERWRITTEN (3).
    Overwritten,
}

impl CreateAction {
    /// The wire value.
    pub fn to_wire(self) -> u32 {
        match self {
            CreateAction::Superseded => 0,
            CreateAction::Opened => 1,
            CreateAction::Created => 2,
            CreateAction::Overwritten => 3,
        }
    }
}

/// What the server asks of [`ShareFs::create`].
#[derive(Debug, Clone)]
pub struct CreateRequest<'a> {
    /// Client path relative to the share (`\`-separated, may be empty for the root).
    pub path: &'a str,
    /// What to do if the file exists or not.
    pub disposition: CreateDisposition,
    /// Raw CreateOptions; the storage layer looks at [`create_options`] bits.
    pub options: u32,
    /// FileAttributes for a newly created / superseded / overwritten file ([`attr`]).
    pub attributes: u32,
    /// Open the underlying file for writing (the server sets this when the granted access
    /// includes FILE_WRITE_DATA or FILE_APPEND_DATA, or the disposition truncates).
    pub write: bool,
    /// Open for reading data (FILE_READ_DATA / FILE_EXECUTE granted).
    pub read: bool,
    /// AllocationSize from the request: for a created, overwritten or superseded file this
    /// open reports at least this allocation (rounded up to the cluster), as Windows and
    /// Samba do; no space is reserved and nothing is charged to the quota. 0 = none.
    pub allocation_size: u64,
    /// A named data stream of the file at `path` to open or create instead of the file's
    /// data ([`names::split_stream`] checked its syntax). The disposition applies to the
    /// stream; a missing file is created (empty) when the disposition may create.
    pub stream: Option<&'a str>,
    /// The server's security decisions, asked at the moments only the storage layer can
    /// (`None`: no descriptors are checked or stored, e.g. an internal probe open).
    pub security: Option<&'a dyn CreateSecurity>,
}

/// One data stream of a file (FileStreamInformation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// The stream's name as stored; empty for the unnamed (default) data stream.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Bytes allocated for it.
    pub allocation: u64,
}

/// Stored descriptor bytes of one file, or `None` when none was ever stored.
pub type StoredDescriptor = Option<Vec<u8>>;

/// What [`CreateSecurity::check_existing`] is told about the file being opened.
pub struct ExistingFile<'a> {
    /// The file's stored security descriptor (self-relative bytes).
    pub descriptor: Option<&'a [u8]>,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Reads the parent directory's stored descriptor; `Ok(None)` when it has none.
    /// Absent for the share root, which has no parent in the share.
    pub parent: Option<&'a dyn Fn() -> Result<StoredDescriptor, FsError>>,
}

/// The server's side of a create: the storage layer resolves the path and asks these
/// before it changes anything, so an access check sees the real file and a refused open
/// truncates or creates nothing.
pub trait CreateSecurity: Sync + fmt::Debug {
    /// An existing file is about to be opened (before truncation): refuse with
    /// [`FsError::AccessDenied`], or allow.
    fn check_existing(&self, file: &ExistingFile<'_>) -> Result<(), FsError>;
    /// A file or directory is about to be created in a directory whose stored descriptor
    /// is `parent`: refuse, or return the descriptor bytes to store with the new file.
    fn descriptor_for_new(&self, parent: Option<&[u8]>, is_dir: bool) -> Result<Vec<u8>, FsError>;
}

/// Metadata of a file or directory, as the QUERY_INFO classes need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileInfo {
    /// CreationTime (kept in an xattr, or the file system's birth time).
    pub creation_time: FileTime,
    /// LastAccessTime.
    pub last_access_time: FileTime,
    /// LastWriteTime (mtime).
    pub last_write_time: FileTime,
    /// ChangeTime (the POSIX implementation reports the last write time: ctime cannot be
    /// set, and clients expect the value they set back).
    pub change_time: FileTime,
    /// EndOfFile: the byte size (0 for directories).
    pub end_of_file: u64,
    /// AllocationSize: bytes allocated on disk.
    pub allocation_size: u64,
    /// FileAttributes ([`attr`]); never 0 (NORMAL when nothing else applies).
    pub attributes: u32,
    /// A stable 64-bit id (the inode number): FileInternalInformation / QFid.
    pub file_id: u64,
    /// Number of hard links.
    pub nlink: u32,
    /// Whether this is a directory.
    pub is_dir: bool,
    /// The POSIX mode (type and permission bits), 0 when the storage has none: Apple
    /// clients that negotiated AAPL read it from directory listings.
    pub unix_mode: u32,
}

/// The result of a successful [`ShareFs::create`].
pub struct Opened {
    /// The open file or directory.
    pub file: Box<dyn FsFile>,
    /// What happened.
    pub action: CreateAction,
    /// Metadata after the create.
    pub info: FileInfo,
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("action", &self.action)
            .field("info", &self.info)
            .finish()
    }
}

/// Times and attributes to change (FileBasicInformation). `None` leaves a field unchanged
/// (the wire's 0). A time may also be [`FILETIME_FREEZE`] or [`FILETIME_THAW`] (the wire's
/// -1 and -2): the POSIX implementation honours them for the last write time and ignores
/// them elsewhere; values above `i64::MAX` never become timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BasicInfoChange {
    /// New CreationTime.
    pub creation_time: Option<FileTime>,
    /// New LastAccessTime.
    pub last_access_time: Option<FileTime>,
    /// New LastWriteTime.
    pub last_write_time: Option<FileTime>,
    /// New ChangeTime (best effort: POSIX cannot set ctime; ignored).
    pub change_time: Option<FileTime>,
    /// New FileAttributes (only [`attr::SETTABLE`] bits are kept).
    pub attributes: Option<u32>,
}

/// One directory entry from a [`DirCursor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name as stored (for `.`/`..`, those strings).
    pub name: String,
    /// Its metadata.
    pub info: FileInfo,
    /// Its Apple stream metadata, when the cursor was asked for it
    /// ([`DirCursor::want_mac_metadata`]) and the storage keeps streams.
    pub mac: Option<MacMetadata>,
}

/// What an Apple client's listing needs from a file's `AFP_Resource` and `AFP_AfpInfo`
/// streams, read while the entry is listed so Finder needs no request per file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MacMetadata {
    /// Length of the `AFP_Resource` stream (0 when absent).
    pub rfork_size: u64,
    /// The `AFP_AfpInfo` stream, when present and exactly 60 bytes long.
    pub afp_info: Option<Vec<u8>>,
}

/// A resumable directory enumeration with a fixed search pattern.
///
/// QUERY_DIRECTORY responses are bounded by the client's output buffer, so the server pulls
/// entries one by one and hands back ([`DirCursor::unread`]) the first one that no longer
/// fits; the next request continues from there. `Send` so it can live in the server's open
/// table and move between blocking-pool threads.
pub trait DirCursor: Send {
    /// The next entry matching the pattern, `.` and `..` first; `Ok(None)` at the end.
    fn next_entry(&mut self) -> Result<Option<DirEntry>, FsError>;
    /// Pushes one entry back so the next [`DirCursor::next_entry`] returns it again.
    fn unread(&mut self, entry: DirEntry);
    /// Starts over from the first entry (RESTART_SCANS), seeing the directory as it is now.
    fn restart(&mut self) -> Result<(), FsError>;
    /// From now on, fill [`DirEntry::mac`] (an AAPL client lists with read-dir-attr). The
    /// default keeps it `None`: storage without streams has no Mac metadata.
    fn want_mac_metadata(&mut self) {}
}

/// A byte range reported by FSCTL_QUERY_ALLOCATED_RANGES.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatedRange {
    /// Start offset.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
}

/// Bytes read once and sent by several READ responses ([`FsFile::read_shared`]): the
/// buffer's whole length is the data.
pub type SharedData = std::sync::Arc<SharedBytes>;

/// The bytes behind a [`SharedData`], and where their buffer goes when the last response or
/// cache entry holding them lets go: back to the storage that read them, which reuses it
/// for its next read. A buffer that is freed and allocated anew is zeroed and faulted in
/// again, 8 MiB at a time (tests/bench/RESULTS.md, step 34).
pub struct SharedBytes {
    bytes: Vec<u8>,
    recycle: Option<fn(Vec<u8>)>,
}

impl SharedBytes {
    /// `bytes`, whose buffer is handed to `recycle` once nothing holds them any more.
    pub fn recycled_by(bytes: Vec<u8>, recycle: fn(Vec<u8>)) -> SharedBytes {
        SharedBytes {
            bytes,
            recycle: Some(recycle),
        }
    }

    /// The bytes as a slice.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// The memory the buffer holds, which may exceed the bytes' length.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

impl From<Vec<u8>> for SharedBytes {
    /// `bytes`, freed with the last holder.
    fn from(bytes: Vec<u8>) -> SharedBytes {
        SharedBytes {
            bytes,
            recycle: None,
        }
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBytes")
            .field("len", &self.bytes.len())
            .field("recycled", &self.recycle.is_some())
            .finish()
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        if let Some(recycle) = self.recycle {
            recycle(std::mem::take(&mut self.bytes));
        }
    }
}

/// One open file or directory. The server keeps it for the open's lifetime and drops it on
/// CLOSE (dropping closes the descriptor; it never deletes anything by itself).
pub trait FsFile: Send + Sync {
    /// Reads at `offset` into `buf`; returns the bytes read (0 at or past end of file).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FsError>;
    /// [`FsFile::read_at`] served from memory alone (the page cache), so the server can run
    /// it on its own task instead of handing it to the blocking pool: all of `buf` (or up
    /// to end of file), or [`FsError::WouldBlock`] if any of it would have to wait for the
    /// device. Reads are side-effect free, so the server retries a failed attempt with
    /// `read_at` on the pool. The default never tries.
    fn read_cached(&self, _offset: u64, _buf: &mut [u8]) -> Result<usize, FsError> {
        Err(FsError::WouldBlock)
    }
    /// The `len` bytes at `offset` (fewer at end of file) as a buffer that READ responses
    /// of other opens may send too: when many clients read one file at once (a model's
    /// weights fanned out to many nodes), the storage reads each range once and every
    /// response sends the same bytes, instead of each copying them out of the page cache.
    /// `Ok(None)` when the storage does not share this read (the server then reads into its
    /// own buffer). With `cached_only`, as [`FsFile::read_cached`]: fails with
    /// [`FsError::WouldBlock`] rather than wait for the device. The default never shares.
    fn read_shared(
        &self,
        _offset: u64,
        _len: usize,
        _cached_only: bool,
    ) -> Result<Option<SharedData>, FsError> {
        Ok(None)
    }
    /// Writes all of `data` at `offset`, charging the quota first for any growth; returns
    /// `data.len()`. Fails with [`FsError::DiskFull`] and writes nothing when the share's
    /// quota (or the disk) cannot hold it. Durable before returning if `write_through` is
    /// set here or the open had WRITE_THROUGH.
    fn write_at(&self, offset: u64, data: &[u8], write_through: bool) -> Result<usize, FsError>;
    /// Makes written data durable (fdatasync). FLUSH.
    fn flush(&self) -> Result<(), FsError>;
    /// Current metadata.
    fn info(&self) -> Result<FileInfo, FsError>;
    /// [`FsFile::info`] from the open inode in memory, without waiting for the device (for
    /// instance no delayed write time to stamp first), or [`FsError::WouldBlock`] with
    /// nothing done. The default never tries.
    fn info_cached(&self) -> Result<FileInfo, FsError> {
        Err(FsError::WouldBlock)
    }
    /// The path of this open relative to the share, as stored (after renames), `\`-separated.
    fn path(&self) -> String;
    /// Changes times/attributes (SET_INFO FileBasicInformation).
    fn set_basic_info(&self, change: &BasicInfoChange) -> Result<(), FsError>;
    /// Sets the end of file (SET_INFO FileEndOfFileInformation), charging growth to the quota
    /// and releasing shrinkage.
    fn set_end_of_file(&self, size: u64) -> Result<(), FsError>;
    /// Sets the allocation size (FileAllocationInformation): below the end of file it
    /// truncates; above, it is accepted without reserving space (this open then reports it
    /// as its AllocationSize).
    fn set_allocation_size(&self, size: u64) -> Result<(), FsError>;
    /// Renames this open's file or directory to `new_path` (client syntax, relative to the
    /// share). With `replace_if_exists` an existing file target is replaced (its space
    /// released); an existing directory target is never replaced (ACCESS_DENIED) and without
    /// the flag any existing target gives OBJECT_NAME_COLLISION. A rename to a different case
    /// of the same name is allowed. Through a named stream's open, `new_path` is
    /// `:name[:$DATA]` and the stream is renamed within its file (an existing target is
    /// OBJECT_NAME_COLLISION without the flag and INVALID_PARAMETER with it, as NTFS
    /// answers); a file's own open refuses such a target (INVALID_PARAMETER).
    fn rename(&self, new_path: &str, replace_if_exists: bool) -> Result<(), FsError>;
    /// The file id ([`FileInfo::file_id`]) of the directory holding this file, so a rename
    /// can respect opens of that directory; `None` for the share root or when unknown.
    fn parent_file_id(&self) -> Result<Option<u64>, FsError> {
        Ok(None)
    }
    /// Checks that this file could be deleted now (directory empty, not the share root),
    /// without deleting. SET_INFO FileDispositionInformation and CREATE with DELETE_ON_CLOSE.
    fn check_deletable(&self) -> Result<(), FsError>;
    /// Removes this open's name (unlink, or rmdir for a directory), releasing its space. The
    /// server calls it when the last open of a delete-pending file closes.
    fn unlink(&self) -> Result<(), FsError>;
    /// Starts an enumeration of this directory with a search pattern ([`wildcard`] syntax;
    /// empty means `*`). NOT_A_DIRECTORY on a file.
    fn list_dir(&self, pattern: &str) -> Result<Box<dyn DirCursor>, FsError>;
    /// Marks or clears the file sparse (FSCTL_SET_SPARSE).
    fn set_sparse(&self, sparse: bool) -> Result<(), FsError>;
    /// Zeroes `[offset, offset+length)` inside the file, deallocating where possible
    /// (FSCTL_SET_ZERO_DATA: punch hole). Does not change the end of file.
    fn zero_data(&self, offset: u64, length: u64) -> Result<(), FsError>;
    /// CLOSE: completes what the open deferred (a delayed write-time update) so that the
    /// attributes the server then reports are final. The server calls it once, before its
    /// post-close query; dropping an open without it does the same, best effort.
    fn close(&self) -> Result<(), FsError> {
        Ok(())
    }
    /// [`FsFile::close`] when closing changes nothing on the device (no write time to
    /// stamp), or [`FsError::WouldBlock`] with nothing done. The default never tries.
    fn close_cached(&self) -> Result<(), FsError> {
        Err(FsError::WouldBlock)
    }
    /// CLOSE with POSTQUERY_ATTRIB: [`FsFile::close`], then [`FsFile::info`] of the
    /// closed file, in one call so that an implementation can read the file's state once
    /// for both. The default makes the two calls.
    fn close_and_info(&self) -> Result<FileInfo, FsError> {
        self.close()?;
        self.info()
    }
    /// [`FsFile::close_and_info`] when neither part waits for the device, or
    /// [`FsError::WouldBlock`]. The default makes the two cached calls; when the query
    /// then cannot answer from memory, the close has already run, and the server's
    /// uncached retry closes again, which must change nothing (a close ends a deferred
    /// update once).
    fn close_and_info_cached(&self) -> Result<FileInfo, FsError> {
        self.close_cached()?;
        self.info_cached()
    }
    /// Allocated ranges within `[offset, offset+length)`, at most `max_ranges` of them
    /// (FSCTL_QUERY_ALLOCATED_RANGES, via SEEK_DATA/SEEK_HOLE). Returns the ranges and whether
    /// more were left out.
    fn allocated_ranges(
        &self,
        offset: u64,
        length: u64,
        max_ranges: usize,
    ) -> Result<(Vec<AllocatedRange>, bool), FsError>;
    /// The file's extended attributes (name, value), names as stored (upper case).
    /// Through a stream's open, those of its file.
    fn eas(&self) -> Result<Vec<(String, Vec<u8>)>, FsError>;
    /// Sets extended attributes: each name (matched case-insensitively) gets its value,
    /// an empty value removes it. NOT_SUPPORTED where the file system cannot keep them.
    fn set_eas(&self, eas: &[(String, Vec<u8>)]) -> Result<(), FsError>;
    /// The file's data streams: the unnamed one first (files only; a directory has none)
    /// and then the named ones. Through a stream's open, those of its file.
    fn streams(&self) -> Result<Vec<StreamInfo>, FsError>;
    /// Removes the file this open belongs to: the open's own name for a file or
    /// directory ([`FsFile::unlink`]), the file that holds it for a named stream. The
    /// server calls it when the last open of a stream closes after its file's last open
    /// closed with the file's delete pending.
    fn unlink_file(&self) -> Result<(), FsError>;
    /// The stored security descriptor (self-relative bytes), `None` when none was stored.
    fn security_descriptor(&self) -> Result<StoredDescriptor, FsError>;
    /// Stores a security descriptor (self-relative bytes, at most
    /// [`crate::security::descriptor::MAX_DESCRIPTOR_LEN`]), replacing the old one.
    /// [`FsError::NotSupported`] where the file system cannot keep it.
    fn set_security_descriptor(&self, descriptor: &[u8]) -> Result<(), FsError>;
}

/// Volume figures for FileFsSize/FullSize/Volume/Attribute/SectorSize information.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsInfo {
    /// Total bytes: the share's quota when it has one, else the file system's size.
    pub total_bytes: u64,
    /// Bytes available to this share's users (quota remainder, capped by the disk's free).
    pub free_bytes: u64,
    /// Bytes per sector (logical).
    pub bytes_per_sector: u32,
    /// Sectors per allocation unit (cluster = bytes_per_sector * this).
    pub sectors_per_unit: u32,
    /// Volume label.
    pub label: String,
    /// Volume serial number.
    pub serial: u32,
    /// Volume creation time.
    pub created: FileTime,
    /// FileSystemAttributes (MS-FSCC 2.5.1).
    pub fs_attributes: u32,
    /// Maximum component name length in characters.
    pub max_name_len: u32,
    /// File system name (e.g. "NTFS", which clients expect for full feature use).
    pub fs_name: String,
}

/// File system attribute bits for [`FsInfo::fs_attributes`] (MS-FSCC 2.5.1).
pub mod fs_attr {
    /// FILE_CASE_SENSITIVE_SEARCH.
    pub const CASE_SENSITIVE_SEARCH: u32 = 0x0000_0001;
    /// FILE_CASE_PRESERVED_NAMES.
    pub const CASE_PRESERVED_NAMES: u32 = 0x0000_0002;
    /// FILE_UNICODE_ON_DISK.
    pub const UNICODE_ON_DISK: u32 = 0x0000_0004;
    /// FILE_PERSISTENT_ACLS: security descriptors are kept and enforced.
    pub const PERSISTENT_ACLS: u32 = 0x0000_0008;
    /// FILE_SUPPORTS_SPARSE_FILES.
    pub const SUPPORTS_SPARSE_FILES: u32 = 0x0000_0040;
    /// FILE_NAMED_STREAMS.
    pub const NAMED_STREAMS: u32 = 0x0004_0000;
    /// FILE_SUPPORTS_OBJECT_IDS.
    pub const SUPPORTS_OBJECT_IDS: u32 = 0x0001_0000;
}

/// One share's file system, as seen by the SMB server.
pub trait ShareFs: Send + Sync {
    /// CREATE: opens or creates `req.path` with NT semantics. Checks, in order: name
    /// validity, path resolution (OBJECT_PATH_NOT_FOUND for a missing parent), existence per
    /// disposition, DIRECTORY_FILE / NON_DIRECTORY_FILE against the file type
    /// (NOT_A_DIRECTORY / FILE_IS_A_DIRECTORY).
    fn create(&self, req: &CreateRequest<'_>) -> Result<Opened, FsError>;
    /// [`ShareFs::create`] of a file that exists, answered from the kernel's caches alone
    /// (path lookup, inode and attributes in memory, nothing created, truncated or written),
    /// so the server can run it on its own task instead of the blocking pool. Anything it
    /// cannot answer that way, and any failure, leaves no trace: the server then runs
    /// `create` on the pool, which gives the authoritative answer. The default never tries.
    fn open_cached(&self, _req: &CreateRequest<'_>) -> Result<Opened, FsError> {
        Err(FsError::WouldBlock)
    }
    /// Volume/size figures for QUERY_INFO (file-system classes).
    fn fs_info(&self) -> Result<FsInfo, FsError>;
}

/// Why a storage operation failed. Each variant maps to one NTSTATUS ([`FsError::nt_status`]).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The final path component does not exist → OBJECT_NAME_NOT_FOUND.
    #[error("not found: {0}")]
    NotFound(String),
    /// An intermediate directory does not exist → OBJECT_PATH_NOT_FOUND.
    #[error("path not found: {0}")]
    PathNotFound(String),
    /// The name exists and the operation needs it not to → OBJECT_NAME_COLLISION.
    #[error("already exists: {0}")]
    Exists(String),
    /// Permission denied by the file system or policy (EACCES/EPERM) → ACCESS_DENIED.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// The path tried to leave the share (symlink out, absolute target) → ACCESS_DENIED.
    #[error("path escapes the share: {0}")]
    Escape(String),
    /// `.`/`..` components or similar syntax → OBJECT_PATH_SYNTAX_BAD.
    #[error("bad path syntax: {0}")]
    PathSyntax(String),
    /// Illegal character, reserved device name, stream syntax → OBJECT_NAME_INVALID.
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// A component or the whole path is too long → OBJECT_NAME_INVALID (what Windows
    /// answers for an over-long name).
    #[error("name too long")]
    NameTooLong,
    /// The share's quota or the disk is full (ENOSPC/EDQUOT/quota) → DISK_FULL.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// Directory not empty (ENOTEMPTY) → DIRECTORY_NOT_EMPTY.
    #[error("directory not empty")]
    NotEmpty,
    /// A directory where a file was required (EISDIR) → FILE_IS_A_DIRECTORY.
    #[error("is a directory")]
    IsDirectory,
    /// A file where a directory was required (ENOTDIR) → NOT_A_DIRECTORY.
    #[error("not a directory")]
    NotDirectory,
    /// The object cannot be deleted (share root, read-only attribute) → CANNOT_DELETE.
    #[error("cannot delete: {0}")]
    CannotDelete(String),
    /// The share is read-only → MEDIA_WRITE_PROTECTED.
    #[error("share is read-only")]
    ReadOnly,
    /// A parameter is out of range (offset overflow, etc.) → INVALID_PARAMETER.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// The object is of a kind SMB cannot serve (fifo, socket, device) → OBJECT_TYPE_MISMATCH.
    #[error("unsupported file type")]
    UnsupportedType,
    /// The operation is not supported here → NOT_SUPPORTED.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// File too large (EFBIG) → FILE_TOO_LARGE.
    #[error("file too large")]
    TooLarge,
    /// Process out of descriptors (EMFILE/ENFILE) → TOO_MANY_OPENED_FILES.
    #[error("too many open files")]
    TooManyOpenFiles,
    /// A cached-only call ([`FsFile::read_cached`], [`ShareFs::open_cached`] and the like)
    /// would have to wait for the device. The server answers it by retrying on the blocking
    /// pool, so it never reaches a client (UNSUCCESSFUL if it did).
    #[error("would block")]
    WouldBlock,
    /// Any other I/O error (EIO, ...) → IO_DEVICE_ERROR / UNSUCCESSFUL.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl FsError {
    /// Maps an OS error from `context` to the matching variant.
    pub fn from_io(context: impl Into<String>, e: std::io::Error) -> FsError {
        let context = context.into();
        match e.raw_os_error() {
            Some(libc_errno::ENOENT) => FsError::NotFound(context),
            Some(libc_errno::EEXIST) => FsError::Exists(context),
            Some(libc_errno::EACCES) | Some(libc_errno::EPERM) => FsError::AccessDenied(context),
            Some(libc_errno::EXDEV) => FsError::Escape(context),
            Some(libc_errno::ENOSPC) | Some(libc_errno::EDQUOT) => FsError::DiskFull(context),
            Some(libc_errno::ENOTEMPTY) => FsError::NotEmpty,
            Some(libc_errno::EISDIR) => FsError::IsDirectory,
            Some(libc_errno::ENOTDIR) => FsError::NotDirectory,
            Some(libc_errno::ENAMETOOLONG) => FsError::NameTooLong,
            Some(libc_errno::EROFS) => FsError::ReadOnly,
            Some(libc_errno::EFBIG) => FsError::TooLarge,
            Some(libc_errno::EMFILE) | Some(libc_errno::ENFILE) => FsError::TooManyOpenFiles,
            Some(libc_errno::EOPNOTSUPP) => FsError::NotSupported(context),
            Some(libc_errno::ELOOP) => FsError::Escape(context),
            Some(libc_errno::EINVAL) => FsError::InvalidParameter(context),
            _ => FsError::Io { context, source: e },
        }
    }

    /// The NTSTATUS the server answers with (MS-ERREF 2.3.1):
    ///
    /// | variant | NTSTATUS |
    /// |---|---|
    /// | NotFound | OBJECT_NAME_NOT_FOUND |
    /// | PathNotFound | OBJECT_PATH_NOT_FOUND |
    /// | Exists | OBJECT_NAME_COLLISION |
    /// | AccessDenied, Escape | ACCESS_DENIED |
    /// | PathSyntax | OBJECT_PATH_SYNTAX_BAD |
    /// | InvalidName, NameTooLong | OBJECT_NAME_INVALID |
    /// | DiskFull | DISK_FULL |
    /// | NotEmpty | DIRECTORY_NOT_EMPTY |
    /// | IsDirectory | FILE_IS_A_DIRECTORY |
    /// | NotDirectory | NOT_A_DIRECTORY |
    /// | CannotDelete | CANNOT_DELETE |
    /// | ReadOnly | MEDIA_WRITE_PROTECTED |
    /// | InvalidParameter | INVALID_PARAMETER |
    /// | UnsupportedType | OBJECT_TYPE_MISMATCH |
    /// | NotSupported | NOT_SUPPORTED |
    /// | TooLarge | FILE_TOO_LARGE |
    /// | TooManyOpenFiles | TOO_MANY_OPENED_FILES |
    /// | Io (EIO) | IO_DEVICE_ERROR, other errors UNSUCCESSFUL |
    pub fn nt_status(&self) -> u32 {
        match self {
            FsError::NotFound(_) => nt::OBJECT_NAME_NOT_FOUND,
            FsError::PathNotFound(_) => nt::OBJECT_PATH_NOT_FOUND,
            FsError::Exists(_) => nt::OBJECT_NAME_COLLISION,
            FsError::AccessDenied(_) | FsError::Escape(_) => nt::ACCESS_DENIED,
            FsError::PathSyntax(_) => nt::OBJECT_PATH_SYNTAX_BAD,
            FsError::InvalidName(_) | FsError::NameTooLong => nt::OBJECT_NAME_INVALID,
            FsError::DiskFull(_) => nt::DISK_FULL,
            FsError::NotEmpty => nt::DIRECTORY_NOT_EMPTY,
            FsError::IsDirectory => nt::FILE_IS_A_DIRECTORY,
            FsError::NotDirectory => nt::NOT_A_DIRECTORY,
            FsError::CannotDelete(_) => nt::CANNOT_DELETE,
            FsError::ReadOnly => nt::MEDIA_WRITE_PROTECTED,
            FsError::InvalidParameter(_) => nt::INVALID_PARAMETER,
            FsError::UnsupportedType => nt::OBJECT_TYPE_MISMATCH,
            FsError::NotSupported(_) => nt::NOT_SUPPORTED,
            FsError::TooLarge => nt::FILE_TOO_LARGE,
            FsError::TooManyOpenFiles => nt::TOO_MANY_OPENED_FILES,
            FsError::Io { source, .. } if source.raw_os_error() == Some(libc_errno::EIO) => {
                nt::IO_DEVICE_ERROR
            }
            FsError::Io { .. } | FsError::WouldBlock => nt::UNSUCCESSFUL,
        }
    }
}

/// Linux errno values used by [`FsError::from_io`] (asm-generic, identical on x86-64 and
/// aarch64); kept here so this crate needs no libc dependency.
mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EACCES: i32 = 13;
    pub const EEXIST: i32 = 17;
    pub const EXDEV: i32 = 18;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
    pub const EFBIG: i32 = 27;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOTEMPTY: i32 = 39;
    pub const ELOOP: i32 = 40;
    pub const EOPNOTSUPP: i32 = 95;
    pub const EDQUOT: i32 = 122;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers handed back by [`SharedBytes`] in [`shared_bytes_go_back_when_the_last_holder_lets_go`].
    static RECYCLED: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

    fn record(buf: Vec<u8>) {
        RECYCLED
            .lock()
            .unwrap()
            .push((buf.as_ptr() as usize, buf.capacity()));
    }

    #[test]
    fn shared_bytes_go_back_when_the_last_holder_lets_go() {
        let mut bytes = Vec::with_capacity(3 * 4096 + 77);
        bytes.extend_from_slice(b"weights");
        let at = bytes.as_ptr() as usize;
        let entry: SharedData = std::sync::Arc::new(SharedBytes::recycled_by(bytes, record));
        let response = entry.clone();
        assert_eq!(&response[..], b"weights");
        assert_eq!(response.capacity(), 3 * 4096 + 77);
        // The cache entry goes first; a response is still sending the bytes.
        drop(entry);
        assert!(RECYCLED.lock().unwrap().is_empty());
        drop(response);
        assert_eq!(*RECYCLED.lock().unwrap(), [(at, 3 * 4096 + 77)]);
        // Bytes made without a home are simply freed.
        drop(std::sync::Arc::new(SharedBytes::from(vec![1, 2, 3])));
        assert_eq!(RECYCLED.lock().unwrap().len(), 1);
    }

    #[test]
    fn filetime_round_trips_and_knows_the_epoch() {
        assert_eq!(filetime_from_unix(0, 0), 116_444_736_000_000_000);
        assert_eq!(filetime_to_unix(116_444_736_000_000_000), (0, 0));
        let ft = filetime_from_unix(1_700_000_000, 123_456_700);
        assert_eq!(filetime_to_unix(ft), (1_700_000_000, 123_456_700));
        assert_eq!(filetime_from_unix(-20_000_000_000, 0), 0);
    }

    #[test]
    fn errno_maps_to_the_documented_status() {
        let cases = [
            (libc_errno::ENOENT, nt::OBJECT_NAME_NOT_FOUND),
            (libc_errno::EEXIST, nt::OBJECT_NAME_COLLISION),
            (libc_errno::EACCES, nt::ACCESS_DENIED),
            (libc_errno::ENOSPC, nt::DISK_FULL),
            (libc_errno::EDQUOT, nt::DISK_FULL),
            (libc_errno::ENOTEMPTY, nt::DIRECTORY_NOT_EMPTY),
            (libc_errno::EISDIR, nt::FILE_IS_A_DIRECTORY),
            (libc_errno::ENOTDIR, nt::NOT_A_DIRECTORY),
            (libc_errno::EXDEV, nt::ACCESS_DENIED),
            (libc_errno::EIO, nt::IO_DEVICE_ERROR),
        ];
        for (errno, status) in cases {
            let e = FsError::from_io("t", std::io::Error::from_raw_os_error(errno));
            assert_eq!(e.nt_status(), status, "errno {errno}");
        }
        assert_eq!(
            FsError::PathNotFound("a".into()).nt_status(),
            nt::OBJECT_PATH_NOT_FOUND
        );
        assert_eq!(
            FsError::InvalidName("a".into()).nt_status(),
            nt::OBJECT_NAME_INVALID
        );
        assert_eq!(
            FsError::PathSyntax("..".into()).nt_status(),
            nt::OBJECT_PATH_SYNTAX_BAD
        );
    }

    #[test]
    fn dispositions_decode() {
        assert_eq!(
            CreateDisposition::from_wire(5),
            Some(CreateDisposition::OverwriteIf)
        );
        assert_eq!(CreateDisposition::from_wire(6), None);
        assert!(!CreateDisposition::Open.may_create());
        assert!(CreateDisposition::Supersede.may_create());
        assert_eq!(CreateAction::Overwritten.to_wire(), 3);
    }
}
