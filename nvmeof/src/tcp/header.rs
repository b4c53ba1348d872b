//! PDU types, header layouts and the decoded PDU values (NVMe/TCP 1.0 section 3.6).

use crate::spec::{Cqe, Sqe};

/// Length of the common header every PDU starts with (type, flags, hlen, pdo, plen).
pub const COMMON_HEADER_LEN: usize = 8;
/// Length of a header or data digest (CRC32C).
pub const DIGEST_LEN: usize = 4;
/// HLEN of ICReq and ICResp.
pub const HLEN_IC: u8 = 128;
/// HLEN of H2CTermReq and C2HTermReq.
pub const HLEN_TERM_REQ: u8 = 24;
/// HLEN of CapsuleCmd: common header plus a 64-byte SQE.
pub const HLEN_CAPSULE_CMD: u8 = 72;
/// HLEN of CapsuleResp: common header plus a 16-byte CQE.
pub const HLEN_CAPSULE_RESP: u8 = 24;
/// HLEN of H2CData and C2HData.
pub const HLEN_DATA: u8 = 24;
/// HLEN of R2T.
pub const HLEN_R2T: u8 = 24;
/// Longest term request data: the spec caps a TermReq PDU at 152 bytes.
pub const MAX_TERM_REQ_DATA: usize = 152 - HLEN_TERM_REQ as usize;
/// Upper bound on any PDU this codec accepts; why: bounds the memory a peer can make
/// us buffer for one PDU (1 MiB of data plus headers, padding and digests).
pub const MAX_PDU_LEN: u32 = (1 << 20) + 512;
/// PDU format version 1.0, the only one defined.
pub const PFV_1_0: u16 = 0;

/// HDGSTF: a header digest follows the PDU header.
pub const FLAG_HDGSTF: u8 = 0x01;
/// DDGSTF: a data digest follows the PDU data.
pub const FLAG_DDGSTF: u8 = 0x02;
/// LAST_PDU on H2CData/C2HData: last data PDU of the transfer (or of the R2T).
pub const FLAG_LAST_PDU: u8 = 0x04;
/// SUCCESS on C2HData: the command completed successfully, no CapsuleResp follows.
pub const FLAG_SUCCESS: u8 = 0x08;

/// PDU-TYPE values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PduType {
    /// Initialize Connection Request (host to controller).
    IcReq = 0x00,
    /// Initialize Connection Response.
    IcResp = 0x01,
    /// Host to controller termination request.
    H2cTermReq = 0x02,
    /// Controller to host termination request.
    C2hTermReq = 0x03,
    /// Command capsule.
    CapsuleCmd = 0x04,
    /// Response capsule.
    CapsuleResp = 0x05,
    /// Host to controller data.
    H2cData = 0x06,
    /// Controller to host data.
    C2hData = 0x07,
    /// Ready to transfer.
    R2t = 0x09,
}

impl PduType {
    /// Maps the wire byte; `None` for reserved types.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::IcReq,
            0x01 => Self::IcResp,
            0x02 => Self::H2cTermReq,
            0x03 => Self::C2hTermReq,
            0x04 => Self::CapsuleCmd,
            0x05 => Self::CapsuleResp,
            0x06 => Self::H2cData,
            0x07 => Self::C2hData,
            0x09 => Self::R2t,
            _ => return None,
        })
    }

    /// The fixed HLEN of this type.
    pub fn hlen(self) -> u8 {
        match self {
            Self::IcReq | Self::IcResp => HLEN_IC,
            Self::H2cTermReq | Self::C2hTermReq => HLEN_TERM_REQ,
            Self::CapsuleCmd => HLEN_CAPSULE_CMD,
            Self::CapsuleResp => HLEN_CAPSULE_RESP,
            Self::H2cData | Self::C2hData => HLEN_DATA,
            Self::R2t => HLEN_R2T,
        }
    }

    /// Whether this type may carry PDU data (and so a PDO and a data digest).
    pub fn may_carry_data(self) -> bool {
        matches!(
            self,
            Self::CapsuleCmd | Self::CapsuleResp | Self::H2cData | Self::C2hData
        )
    }

    /// Whether header/data digests apply to this type once negotiated (IC and TermReq never).
    pub fn digested(self) -> bool {
        !matches!(
            self,
            Self::IcReq | Self::IcResp | Self::H2cTermReq | Self::C2hTermReq
        )
    }
}

/// The 8-byte common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU-TYPE byte as received.
    pub pdu_type: u8,
    /// FLAGS byte.
    pub flags: u8,
    /// Header length (common + PDU-specific, without digest).
    pub hlen: u8,
    /// PDU data offset from the start of the PDU (0 when no data).
    pub pdo: u8,
    /// Total PDU length including digests and padding.
    pub plen: u32,
}

impl CommonHeader {
    /// Reads the common header from the first 8 bytes; `None` if fewer are present.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let h: &[u8; COMMON_HEADER_LEN] = b.first_chunk()?;
        Some(CommonHeader {
            pdu_type: h[0],
            flags: h[1],
            hlen: h[2],
            pdo: h[3],
            plen: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
        })
    }

    /// Writes the common header into `out[..8]`.
    pub fn write(&self, out: &mut [u8; COMMON_HEADER_LEN]) {
        out[0] = self.pdu_type;
        out[1] = self.flags;
        out[2] = self.hlen;
        out[3] = self.pdo;
        out[4..8].copy_from_slice(&self.plen.to_le_bytes());
    }
}

/// ICReq PDU-specific fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version.
    pub pfv: u16,
    /// Host PDU data alignment (0's based dwords) for C2H PDUs.
    pub hpda: u8,
    /// Requested digests.
    pub dgst: u8,
    /// Max outstanding R2T per command (0's based).
    pub maxr2t: u32,
}

/// ICResp PDU-specific fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    /// PDU format version.
    pub pfv: u16,
    /// Controller PDU data alignment (0's based dwords) for H2C PDUs.
    pub cpda: u8,
    /// Enabled digests.
    pub dgst: u8,
    /// Max bytes of data in one H2CData PDU.
    pub maxh2cdata: u32,
}

/// Fatal error status (FES) of a termination request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum TermReqFes {
    /// A header field is invalid; FEI is the byte offset of the field.
    InvalidHeaderField = 0x01,
    /// The PDU was not expected in this state.
    PduSequenceError = 0x02,
    /// The header digest did not match.
    HeaderDigestError = 0x03,
    /// Data offset/length outside the command's transfer.
    DataTransferOutOfRange = 0x04,
    /// More R2Ts or data than allowed.
    DataTransferLimitExceeded = 0x05,
    /// An ICReq parameter is not supported; FEI is the byte offset.
    UnsupportedParameter = 0x06,
}

/// A decoded termination request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermReq<'a> {
    /// Fatal error status.
    pub fes: u16,
    /// Fatal error information (meaning depends on FES).
    pub fei: u32,
    /// Copy of the offending PDU header (up to [`MAX_TERM_REQ_DATA`]).
    pub data: &'a [u8],
}

/// A decoded command capsule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsuleCmd<'a> {
    /// The submission queue entry.
    pub sqe: Sqe,
    /// In-capsule data (empty when none).
    pub data: &'a [u8],
}

/// A decoded response capsule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapsuleResp {
    /// The completion queue entry.
    pub cqe: Cqe,
}

/// H2CData / C2HData fields and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPdu<'a> {
    /// Command capsule CID this data belongs to.
    pub cccid: u16,
    /// Transfer tag from the R2T (H2CData only; 0 in C2HData).
    pub ttag: u16,
    /// Offset of this data within the command's transfer.
    pub datao: u32,
    /// Raw flags (LAST_PDU, SUCCESS).
    pub flags: u8,
    /// The data bytes.
    pub data: &'a [u8],
}

/// R2T fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    /// Command capsule CID.
    pub cccid: u16,
    /// Transfer tag the host echoes in H2CData.
    pub ttag: u16,
    /// Offset of the requested data.
    pub r2to: u32,
    /// Length of the requested data.
    pub r2tl: u32,
}

/// One decoded PDU; data borrows from the frame so large writes are not copied twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pdu<'a> {
    /// Initialize Connection Request.
    IcReq(IcReq),
    /// Initialize Connection Response.
    IcResp(IcResp),
    /// Host to controller termination request.
    H2cTermReq(TermReq<'a>),
    /// Controller to host termination request.
    C2hTermReq(TermReq<'a>),
    /// Command capsule.
    CapsuleCmd(CapsuleCmd<'a>),
    /// Response capsule.
    CapsuleResp(CapsuleResp),
    /// Host to controller data.
    H2cData(DataPdu<'a>),
    /// Controller to host data.
    C2hData(DataPdu<'a>),
    /// Ready to transfer.
    R2t(R2t),
}
