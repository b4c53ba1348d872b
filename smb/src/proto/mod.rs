//! SMB2/3 wire codec (sans-I/O): headers, transform header, every command request/response
//! the server handles (MS-SMB2 section 2), and the MS-FSCC information structures.
//!
//! Conventions that every module follows:
//! - Decoders take the *whole* SMB2 message (header at offset 0) because every offset on the
//!   wire counts from the header start. They never panic: all access goes through
//!   [`wire::Reader`] and [`wire::slice_at`].
//! - Encoders append a body to a `Vec<u8>` that already holds the 64-byte header, so an
//!   offset field is simply `out.len()` at the moment the buffer is written.
//! - Variable data (names, WRITE payloads, security blobs) is borrowed from the request.
//!
//! Map: [`wire`] bounds-checked reading; [`header`] SMB2 header; [`framing`] direct-TCP
//! length prefix; [`smb1`] the SMB1 NEGOTIATE upgrade; [`transform`] encryption header;
//! [`negotiate`]; [`session`] (session setup, logoff, tree connect); [`create`] (create,
//! close); [`io`] (read, write, flush, lock, echo, notify, error); [`ioctl`]; [`dir`] (query
//! directory); [`info`] (query/set info, file classes); [`fsinfo`]; [`status`] NTSTATUS codes;
//! [`request`] the one-call decoder used by the server and the fuzz target; [`aapl`] the Apple
//! `AAPL` create context.

pub mod aapl;
pub mod create;
pub mod dir;
pub mod durable;
pub mod ea;
pub mod framing;
pub mod fsinfo;
pub mod header;
pub mod info;
pub mod io;
pub mod ioctl;
pub mod negotiate;
pub mod oplock;
pub mod request;
pub mod session;
pub mod smb1;
pub mod status;
pub mod transform;
pub mod wire;

pub use header::{Command, Header, HEADER_LEN};
pub use request::Request;

use wire::{Put, Reader};

/// Why a message could not be decoded. Every variant is the peer's fault; the server answers
/// with STATUS_INVALID_PARAMETER (or drops the connection for framing errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The message ended before a field.
    #[error("message truncated")]
    Truncated,
    /// The protocol id is not the expected one.
    #[error("bad protocol id")]
    BadMagic,
    /// A StructureSize field has the wrong value.
    #[error("bad StructureSize in {0}")]
    BadStructureSize(&'static str),
    /// An (offset, length) pair points outside the message.
    #[error("offset/length outside the message")]
    BadOffset,
    /// A UTF-16 string is malformed.
    #[error("malformed UTF-16 string")]
    BadString,
    /// A count exceeds the server's limit.
    #[error("too many {0}")]
    TooMany(&'static str),
    /// A field value is not allowed.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// A well-formed message the server does not implement.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// The framing length exceeds the server's limit.
    #[error("frame of {0} bytes exceeds the limit")]
    FrameTooLarge(usize),
    /// The framing header's type byte is not a session message.
    #[error("unexpected NetBIOS frame type {0:#x}")]
    BadFrameType(u8),
}

/// An SMB2 file handle (MS-SMB2 2.2.14.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileId {
    /// Persistent part.
    pub persistent: u64,
    /// Volatile part.
    pub volatile: u64,
}

impl FileId {
    /// The all-ones id: "the previous handle" in a related compound, or "no file" in IOCTL.
    pub const ALL_ONES: FileId = FileId {
        persistent: u64::MAX,
        volatile: u64::MAX,
    };

    /// Reads 16 bytes.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, ProtoError> {
        Ok(Self {
            persistent: r.u64()?,
            volatile: r.u64()?,
        })
    }

    /// Appends 16 bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.persistent);
        out.put_u64(self.volatile);
    }
}

/// File attribute: read-only.
pub const ATTR_READONLY: u32 = 0x0000_0001;
/// File attribute: hidden.
pub const ATTR_HIDDEN: u32 = 0x0000_0002;
/// File attribute: system.
pub const ATTR_SYSTEM: u32 = 0x0000_0004;
/// File attribute: directory.
pub const ATTR_DIRECTORY: u32 = 0x0000_0010;
/// File attribute: archive.
pub const ATTR_ARCHIVE: u32 = 0x0000_0020;
/// File attribute: normal (only when no other bit is set).
pub const ATTR_NORMAL: u32 = 0x0000_0080;
/// File attribute: sparse.
pub const ATTR_SPARSE_FILE: u32 = 0x0000_0200;

/// The attribute/time/size block shared by CREATE, CLOSE, directory entries and several
/// information classes. Times are FILETIME (100 ns since 1601).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileAttrs {
    /// CreationTime.
    pub creation_time: u64,
    /// LastAccessTime.
    pub last_access_time: u64,
    /// LastWriteTime.
    pub last_write_time: u64,
    /// ChangeTime.
    pub change_time: u64,
    /// AllocationSize.
    pub allocation_size: u64,
    /// EndOfFile.
    pub end_of_file: u64,
    /// FileAttributes.
    pub attributes: u32,
}

impl FileAttrs {
    /// Appends the four times (32 bytes).
    pub fn encode_times(&self, out: &mut Vec<u8>) {
        out.put_u64(self.creation_time);
        out.put_u64(self.last_access_time);
        out.put_u64(self.last_write_time);
        out.put_u64(self.change_time);
    }
}
