//! DCE/RPC over named pipes on IPC$: enough of srvsvc for NetShareEnumAll and NetShareGetInfo.
//!
//! The SMB server opens a [`SrvsvcPipe`] when a client creates `srvsvc` on `IPC$`, passes it
//! the bytes of every WRITE (or the input of an FSCTL_PIPE_TRANSCEIVE IOCTL) and answers READs
//! from [`SrvsvcPipe::read`]. Everything is sans-I/O and bounded.
//!
//! Wiring in the SMB server (MS-SMB2 3.3.5.9/3.3.5.12/3.3.5.13/3.3.5.15.8):
//! - CREATE of `srvsvc` on IPC$: `SrvsvcPipe::new(visible_shares).with_server_info(name, comment)`.
//! - WRITE: [`SrvsvcPipe::write`]; an `Err` means the client spoke garbage: fail the WRITE
//!   (STATUS_INVALID_PARAMETER) and close the pipe.
//! - READ: [`SrvsvcPipe::read`]: `None` = nothing pending (STATUS_PIPE_EMPTY, or pend the
//!   read); `Some` with `more` = STATUS_BUFFER_OVERFLOW with the partial data; else SUCCESS.
//! - IOCTL FSCTL_PIPE_TRANSCEIVE (0x0011C017): [`SrvsvcPipe::transact`] with the request's
//!   MaxOutputResponse, same status mapping as READ.
//!
//! Map:
//! - [`pdu`]: connection-oriented DCE/RPC PDUs (C706 chapter 12; MS-RPCE 2.2.2).
//! - [`ndr`]: the NDR 2.0 transfer syntax (C706 chapter 14) for the few types srvsvc needs.
//! - [`srvsvc`]: NetrShareEnum (opnum 15) and NetrShareGetInfo (opnum 16) of MS-SRVS.
//! - [`pipe`]: the per-open pipe state machine tying them together.

pub mod ndr;
pub mod pdu;
pub mod pipe;
pub mod srvsvc;

pub use pipe::{PipeRead, SrvsvcPipe};

/// What kind of share an entry is, as MS-SRVS 2.2.2.4 encodes it in `shi*_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareKind {
    /// A disk share (STYPE_DISKTREE).
    Disk,
    /// The IPC$ share (STYPE_IPC | STYPE_SPECIAL).
    Ipc,
}

/// One share as the srvsvc pipe reports it. The caller lists every share the client may see,
/// including `IPC$` (kind [`ShareKind::Ipc`]) if it should appear in `smbclient -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEntry {
    /// Share name, e.g. "datasets" or "IPC$".
    pub name: String,
    /// Disk or IPC.
    pub kind: ShareKind,
    /// Free-text comment ("remark") shown next to the name.
    pub comment: String,
}

/// Errors that make a pipe unusable (the server should close it). Recoverable RPC errors are
/// answered in-band with a fault or bind_nak PDU instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// Input that is not a DCE/RPC connection-oriented PDU at all.
    #[error("malformed DCE/RPC PDU: {0}")]
    Malformed(&'static str),
    /// A PDU or reassembled request larger than the explicit limits.
    #[error("DCE/RPC input exceeds limit: {0}")]
    TooLarge(&'static str),
}
