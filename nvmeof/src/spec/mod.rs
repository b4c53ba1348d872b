//! NVMe command set structures shared by every transport: SQE/CQE, status codes,
//! opcodes, Fabrics Connect data, Identify and log page layouts.
//!
//! Why a separate module: these are transport-independent, and both the target and the
//! test initiator encode/decode them.

pub mod fabrics;
pub mod identify;
pub mod log;
mod sqe;

pub use sqe::{
    Cqe, KeyedSgl, Sgl, Sqe, Status, CQE_LEN, SGL_ID_INCAPSULE, SGL_ID_TRANSPORT, SGL_TYPE_KEYED,
    SQE_LEN,
};

/// Admin command opcodes (NVMe Base 2.0 figure 138).
pub mod admin_opc {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0c;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Fabrics command (FCTYPE selects which).
    pub const FABRICS: u8 = 0x7f;
}

/// NVM command set I/O opcodes.
pub mod io_opc {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// Status codes used by the target (generic SCT 0 unless noted).
pub mod sc {
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: u8 = 0x01;
    /// Invalid Field in Command.
    pub const INVALID_FIELD: u8 = 0x02;
    /// Command ID Conflict.
    pub const CID_CONFLICT: u8 = 0x03;
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: u8 = 0x04;
    /// Internal Error.
    pub const INTERNAL: u8 = 0x06;
    /// Command Aborted due to SQ Deletion.
    pub const ABORTED_SQ_DELETION: u8 = 0x08;
    /// Invalid Namespace or Format.
    pub const INVALID_NS: u8 = 0x0b;
    /// Command Sequence Error.
    pub const COMMAND_SEQUENCE: u8 = 0x0c;
    /// Invalid SGL Segment Descriptor.
    pub const INVALID_SGL_DESC: u8 = 0x0d;
    /// Data SGL Length Invalid.
    pub const SGL_LENGTH_INVALID: u8 = 0x0f;
    /// SGL Descriptor Type Invalid.
    pub const SGL_TYPE_INVALID: u8 = 0x11;
    /// SGL Offset Invalid.
    pub const SGL_OFFSET_INVALID: u8 = 0x16;
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
    /// Command specific (SCT 1): Invalid Queue Identifier.
    pub const INVALID_QID: u8 = 0x01;
    /// Command specific: Invalid Queue Size.
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    /// Command specific: Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT: u8 = 0x05;
    /// Command specific: Invalid Log Page.
    pub const INVALID_LOG_PAGE: u8 = 0x09;
    /// Command specific: Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: u8 = 0x0d;
    /// Command specific (Connect): Controller Busy.
    pub const CONNECT_CTRL_BUSY: u8 = 0x81;
    /// Command specific (Connect): Connect Invalid Parameters.
    pub const CONNECT_INVALID_PARAM: u8 = 0x82;
    /// Command specific (Connect): Connect Invalid Host.
    pub const CONNECT_INVALID_HOST: u8 = 0x84;
}

/// Feature identifiers.
pub mod fid {
    /// Volatile Write Cache.
    pub const VOLATILE_WC: u8 = 0x06;
    /// Number of Queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT: u8 = 0x0b;
    /// Keep Alive Timer.
    pub const KATO: u8 = 0x0f;
}

/// Log page identifiers.
pub mod lid {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FW_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS: u8 = 0x04;
    /// Discovery log page.
    pub const DISCOVERY: u8 = 0x70;
}

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Little-endian u32 at byte `at`; 0 past the end (callers read fields of a header or
/// command whose length was checked).
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    match b.get(at..).and_then(<[u8]>::first_chunk) {
        Some(w) => u32::from_le_bytes(*w),
        None => 0,
    }
}

/// Little-endian u16 at byte `at`; 0 past the end, as [`le32`].
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    match b.get(at..).and_then(<[u8]>::first_chunk) {
        Some(w) => u16::from_le_bytes(*w),
        None => 0,
    }
}

/// Copies `s` into `dst` padded with spaces (Identify's ASCII fields: SN, MN, FR).
pub fn put_ascii_space(dst: &mut [u8], s: &str) {
    dst.fill(b' ');
    for (d, c) in dst.iter_mut().zip(s.bytes()) {
        *d = c;
    }
}

/// Copies `s` into `dst` padded with NULs (NQNs, discovery addresses).
pub fn put_ascii_nul(dst: &mut [u8], s: &str) {
    dst.fill(0);
    for (d, c) in dst.iter_mut().zip(s.bytes()) {
        *d = c;
    }
}

/// Reads a NUL-terminated (or full-length) ASCII field, trimming trailing spaces.
pub fn get_ascii(src: &[u8]) -> String {
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(src.get(..end).unwrap_or_default())
        .trim_end()
        .to_string()
}
