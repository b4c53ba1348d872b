//! Framing and decoding of any NVMe/TCP PDU, with every length, offset and digest checked.

use super::digest::{crc32c_digest, Digests};
use super::header::*;
use crate::spec::{le16, le32, Cqe, Sqe, CQE_LEN, SQE_LEN};

/// What the decoder needs to know about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeContext {
    /// Digests negotiated (NONE before the IC exchange).
    pub digests: Digests,
    /// Required alignment of PDO for data PDUs we receive, in 0's based dwords (CPDA or
    /// HPDA we asked for). 0 imposes no alignment beyond the header end.
    pub data_alignment: u8,
    /// Largest PDU we accept (at most [`MAX_PDU_LEN`]).
    pub max_pdu_len: u32,
}

impl Default for DecodeContext {
    fn default() -> Self {
        DecodeContext {
            digests: Digests::NONE,
            data_alignment: 0,
            max_pdu_len: MAX_PDU_LEN,
        }
    }
}

/// Why a PDU was rejected. [`PduError::fes`] maps it to a termination request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    /// A header field has an invalid value; `offset` is its byte offset in the PDU.
    #[error("invalid PDU header field at byte {offset}: {what}")]
    InvalidHeaderField {
        /// Byte offset of the field within the PDU.
        offset: u32,
        /// Which rule was broken.
        what: &'static str,
    },
    /// PLEN exceeds what we are willing to buffer.
    #[error("PDU length {plen} exceeds limit {max}")]
    TooLong {
        /// The PLEN the peer sent.
        plen: u32,
        /// Our limit.
        max: u32,
    },
    /// The frame is shorter than PLEN says (a framing bug, not a peer error).
    #[error("frame of {got} bytes, PDU needs {need}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// Header digest mismatch.
    #[error("header digest mismatch: received {received:#010x}, computed {computed:#010x}")]
    HeaderDigest {
        /// Digest on the wire.
        received: u32,
        /// Digest we computed.
        computed: u32,
    },
    /// Data digest mismatch.
    #[error("data digest mismatch: received {received:#010x}, computed {computed:#010x}")]
    DataDigest {
        /// Digest on the wire.
        received: u32,
        /// Digest we computed.
        computed: u32,
    },
}

impl PduError {
    /// The termination request (FES, FEI) that reports this error to the peer, if any.
    /// Data digest errors have no FES: the connection is closed instead.
    pub fn fes(&self) -> Option<(TermReqFes, u32)> {
        match self {
            PduError::InvalidHeaderField { offset, .. } => {
                Some((TermReqFes::InvalidHeaderField, *offset))
            }
            PduError::TooLong { .. } => Some((TermReqFes::InvalidHeaderField, 4)),
            PduError::HeaderDigest { .. } => Some((TermReqFes::HeaderDigestError, 0)),
            PduError::Truncated { .. } | PduError::DataDigest { .. } => None,
        }
    }
}

fn bad(offset: u32, what: &'static str) -> PduError {
    PduError::InvalidHeaderField { offset, what }
}

/// Given the bytes received so far, returns `Ok(Some(plen))` once the common header is
/// complete and its PLEN is acceptable, `Ok(None)` if fewer than 8 bytes are present.
/// Why: lets a transport read exactly one PDU and refuse oversized ones before buffering.
pub fn frame_len(buf: &[u8], ctx: &DecodeContext) -> Result<Option<usize>, PduError> {
    let Some(ch) = CommonHeader::parse(buf) else {
        return Ok(None);
    };
    let max = ctx.max_pdu_len.min(MAX_PDU_LEN);
    if ch.plen > max {
        return Err(PduError::TooLong { plen: ch.plen, max });
    }
    let Some(ty) = PduType::from_u8(ch.pdu_type) else {
        return Err(bad(0, "reserved PDU type"));
    };
    if ch.hlen != ty.hlen() {
        return Err(bad(2, "HLEN does not match PDU type"));
    }
    if (ch.plen as usize) < usize::from(ch.hlen) {
        return Err(bad(4, "PLEN shorter than HLEN"));
    }
    Ok(Some(ch.plen as usize))
}

/// Decodes one complete PDU (`frame.len()` must equal its PLEN).
pub fn decode<'a>(frame: &'a [u8], ctx: &DecodeContext) -> Result<Pdu<'a>, PduError> {
    let plen = match frame_len(frame, ctx)? {
        Some(p) => p,
        None => {
            return Err(PduError::Truncated {
                need: COMMON_HEADER_LEN,
                got: frame.len(),
            })
        }
    };
    if frame.len() != plen {
        return Err(PduError::Truncated {
            need: plen,
            got: frame.len(),
        });
    }
    let ch = CommonHeader::parse(frame).ok_or(PduError::Truncated {
        need: COMMON_HEADER_LEN,
        got: frame.len(),
    })?;
    let ty = PduType::from_u8(ch.pdu_type).ok_or_else(|| bad(0, "reserved PDU type"))?;
    let hlen = usize::from(ch.hlen);

    if !ty.digested() {
        return decode_undigested(ty, &ch, frame);
    }

    let header_end = check_header_digest(frame, &ch, plen, ctx)?;
    let data = data_region(ty, &ch, frame, header_end, ctx)?;
    let hdr = frame.get(..hlen).unwrap_or_default();
    Ok(match ty {
        PduType::CapsuleCmd => Pdu::CapsuleCmd(CapsuleCmd {
            sqe: capsule_sqe(hdr),
            data,
        }),
        PduType::CapsuleResp => {
            if !data.is_empty() {
                return Err(bad(3, "CapsuleResp with data is not supported"));
            }
            let mut cqe = [0u8; CQE_LEN];
            cqe.copy_from_slice(hdr.get(COMMON_HEADER_LEN..).unwrap_or_default());
            Pdu::CapsuleResp(CapsuleResp {
                cqe: Cqe::from_bytes(&cqe),
            })
        }
        PduType::H2cData | PduType::C2hData => {
            if data.is_empty() {
                return Err(bad(4, "data PDU without data"));
            }
            let (cccid, ttag, datao) = data_fields(hdr, data.len())?;
            let d = DataPdu {
                cccid,
                ttag,
                datao,
                flags: ch.flags,
                data,
            };
            if ty == PduType::H2cData {
                check_h2c_flags(ch.flags)?;
                Pdu::H2cData(d)
            } else {
                if ch.flags & FLAG_SUCCESS != 0 && ch.flags & FLAG_LAST_PDU == 0 {
                    return Err(bad(1, "SUCCESS without LAST_PDU"));
                }
                Pdu::C2hData(d)
            }
        }
        PduType::R2t => {
            let r2tl = le32(hdr, 16);
            if r2tl == 0 {
                return Err(bad(16, "R2T length zero"));
            }
            Pdu::R2t(R2t {
                cccid: le16(hdr, 8),
                ttag: le16(hdr, 10),
                r2to: le32(hdr, 12),
                r2tl,
            })
        }
        // Undigested types returned above.
        PduType::IcReq | PduType::IcResp | PduType::H2cTermReq | PduType::C2hTermReq => {
            return Err(bad(0, "unexpected PDU type"))
        }
    })
}

/// What a data-carrying PDU is, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadOf {
    /// Host to controller data, for the command `cccid`.
    H2cData {
        /// Command capsule CID the data belongs to.
        cccid: u16,
        /// Transfer tag from the R2T.
        ttag: u16,
        /// Offset of the data within the command's transfer.
        datao: u32,
    },
    /// A command capsule with in-capsule data.
    CapsuleCmd(Sqe),
}

/// A data-carrying PDU from the host (H2CData, or a command capsule with in-capsule
/// data) known from its header alone (the bytes before its data), so that a transport
/// can read a large PDU's data from the socket straight into an aligned buffer instead
/// of buffering the whole PDU first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHead {
    /// The PDU and its header fields.
    pub of: HeadOf,
    /// Raw flags (LAST_PDU, DDGSTF).
    pub flags: u8,
    /// Where the data starts (PDO): the header, its digest and padding come first.
    pub pdo: usize,
    /// Data bytes.
    pub data_len: usize,
    /// A CRC32C data digest follows the data; the caller verifies it
    /// ([`crate::tcp::check_data_digest`] of the data against the 4 bytes after it).
    pub data_digest: bool,
    /// The whole PDU (PLEN).
    pub plen: usize,
}

/// Decodes the header of an H2CData PDU, or of a command capsule with data, from the
/// start of `buf`, checking everything [`decode`] checks except the data digest.
/// `Ok(None)`: another PDU type, a capsule without data, or fewer bytes than its PDO so
/// far. Whenever this returns a head, [`decode`] of the complete PDU returns the same
/// fields, or a data digest error (fuzz target `data_head`).
pub fn decode_data_head(buf: &[u8], ctx: &DecodeContext) -> Result<Option<DataHead>, PduError> {
    let Some(plen) = frame_len(buf, ctx)? else {
        return Ok(None);
    };
    let Some(ch) = CommonHeader::parse(buf) else {
        return Ok(None);
    };
    let ty = match PduType::from_u8(ch.pdu_type) {
        Some(ty @ (PduType::H2cData | PduType::CapsuleCmd)) => ty,
        _ => return Ok(None),
    };
    if !header_received(buf, ctx) {
        return Ok(None);
    }
    let header_end = check_header_digest(buf, &ch, plen, ctx)?;
    let bounds = data_bounds(ty, &ch, plen, header_end, ctx)?;
    let hdr = buf.get(..usize::from(ch.hlen)).unwrap_or_default();
    let of = match (ty, bounds) {
        (PduType::CapsuleCmd, None) => return Ok(None),
        (PduType::CapsuleCmd, Some(_)) => HeadOf::CapsuleCmd(capsule_sqe(hdr)),
        (_, None) => return Err(bad(4, "data PDU without data")),
        (_, Some((pdo, data_end))) => {
            let (cccid, ttag, datao) = data_fields(hdr, data_end - pdo)?;
            check_h2c_flags(ch.flags)?;
            HeadOf::H2cData { cccid, ttag, datao }
        }
    };
    let (pdo, data_end) = bounds.unwrap_or_default();
    Ok(Some(DataHead {
        of,
        flags: ch.flags,
        pdo,
        data_len: data_end - pdo,
        data_digest: ch.flags & FLAG_DDGSTF != 0,
        plen,
    }))
}

/// Whether `buf` holds the whole header of the PDU at its front: the header, its digest
/// (when negotiated) and the padding up to PDO. A transport reading a large PDU's data in
/// place waits for this much first.
pub fn header_received(buf: &[u8], ctx: &DecodeContext) -> bool {
    match (buf.get(2), buf.get(3)) {
        (Some(&hlen), Some(&pdo)) => {
            let header_end = usize::from(hlen) + ctx.digests.header_len();
            buf.len() >= header_end.max(usize::from(pdo))
        }
        _ => false,
    }
}

/// The SQE in a command capsule's header (`hdr`: the header, HLEN bytes).
fn capsule_sqe(hdr: &[u8]) -> Sqe {
    let mut sqe = [0u8; SQE_LEN];
    sqe.copy_from_slice(hdr.get(COMMON_HEADER_LEN..).unwrap_or(&[0; SQE_LEN]));
    Sqe::from_bytes(sqe)
}

/// A data PDU's CCCID, TTAG and DATAO, with its DATAL checked against the `data_len`
/// bytes of data the PDU carries.
fn data_fields(hdr: &[u8], data_len: usize) -> Result<(u16, u16, u32), PduError> {
    if le32(hdr, 16) as usize != data_len {
        return Err(bad(16, "DATAL does not match PDU data length"));
    }
    Ok((le16(hdr, 8), le16(hdr, 10), le32(hdr, 12)))
}

/// H2CData must not carry the SUCCESS flag (a controller-to-host flag).
fn check_h2c_flags(flags: u8) -> Result<(), PduError> {
    if flags & FLAG_SUCCESS != 0 {
        return Err(bad(1, "SUCCESS flag in H2CData"));
    }
    Ok(())
}

/// Checks `data` against the CRC32C data digest that follows it (`received`, the 4
/// bytes on the wire, little endian).
pub fn check_data_digest(data: &[u8], received: u32) -> Result<(), PduError> {
    let computed = crc32c_digest(data);
    if received != computed {
        return Err(PduError::DataDigest { received, computed });
    }
    Ok(())
}

/// Checks a digested PDU's header digest: present iff negotiated, the flag saying so,
/// and matching the header (`buf` holds at least the header and its digest). Returns
/// where the header and its digest end.
fn check_header_digest(
    buf: &[u8],
    ch: &CommonHeader,
    plen: usize,
    ctx: &DecodeContext,
) -> Result<usize, PduError> {
    let hlen = usize::from(ch.hlen);
    let hdgst = ch.flags & FLAG_HDGSTF != 0;
    if hdgst != ctx.digests.header {
        return Err(bad(1, "HDGSTF does not match negotiated header digest"));
    }
    let header_end = hlen + ctx.digests.header_len();
    if plen < header_end {
        return Err(bad(4, "PLEN shorter than header and digest"));
    }
    if hdgst {
        let received = le32(buf, hlen);
        let computed = crc32c_digest(buf.get(..hlen).unwrap_or_default());
        if received != computed {
            return Err(PduError::HeaderDigest { received, computed });
        }
    }
    Ok(header_end)
}

/// Where a digested PDU's data lies, from its header alone: `(pdo, data_end)` with the
/// data digest (if flagged) at `data_end`, or `None` when it carries no data.
fn data_bounds(
    ty: PduType,
    ch: &CommonHeader,
    plen: usize,
    header_end: usize,
    ctx: &DecodeContext,
) -> Result<Option<(usize, usize)>, PduError> {
    let ddgstf = ch.flags & FLAG_DDGSTF != 0;
    if plen == header_end {
        // No data: PDO must be 0 (or point at the end) and no data digest flagged.
        if ddgstf {
            return Err(bad(1, "DDGSTF set on a PDU without data"));
        }
        if ch.pdo != 0 && usize::from(ch.pdo) != header_end {
            return Err(bad(3, "PDO set on a PDU without data"));
        }
        return Ok(None);
    }
    if !ty.may_carry_data() {
        return Err(bad(
            4,
            "PLEN leaves bytes after a header that carries no data",
        ));
    }
    if ddgstf != ctx.digests.data {
        return Err(bad(1, "DDGSTF does not match negotiated data digest"));
    }
    let pdo = usize::from(ch.pdo);
    if pdo < header_end {
        return Err(bad(3, "PDO inside the header"));
    }
    if ctx.data_alignment != 0 {
        let align = (usize::from(ctx.data_alignment) + 1) * 4;
        if pdo % align != 0 {
            return Err(bad(3, "PDO not aligned to the data alignment"));
        }
    }
    let dd = if ddgstf { DIGEST_LEN } else { 0 };
    let data_end = plen
        .checked_sub(dd)
        .filter(|&e| e > pdo)
        .ok_or_else(|| bad(4, "PLEN leaves no room for data after PDO"))?;
    Ok(Some((pdo, data_end)))
}

/// Locates and verifies the data of a digested PDU; empty slice when it has none.
fn data_region<'a>(
    ty: PduType,
    ch: &CommonHeader,
    frame: &'a [u8],
    header_end: usize,
    ctx: &DecodeContext,
) -> Result<&'a [u8], PduError> {
    let Some((pdo, data_end)) = data_bounds(ty, ch, frame.len(), header_end, ctx)? else {
        return Ok(&[]);
    };
    let data = frame.get(pdo..data_end).unwrap_or_default();
    if ch.flags & FLAG_DDGSTF != 0 {
        check_data_digest(data, le32(frame, data_end))?;
    }
    Ok(data)
}

fn decode_undigested<'a>(
    ty: PduType,
    ch: &CommonHeader,
    frame: &'a [u8],
) -> Result<Pdu<'a>, PduError> {
    if ch.flags & (FLAG_HDGSTF | FLAG_DDGSTF) != 0 {
        return Err(bad(1, "digest flags set on IC/TermReq PDU"));
    }
    if ch.pdo != 0 {
        return Err(bad(3, "PDO must be 0"));
    }
    match ty {
        PduType::IcReq | PduType::IcResp => {
            if frame.len() != usize::from(HLEN_IC) {
                return Err(bad(4, "IC PDU PLEN must be 128"));
            }
            let pfv = le16(frame, 8);
            let b10 = frame.get(10).copied().unwrap_or(0);
            let dgst = frame.get(11).copied().unwrap_or(0);
            let v32 = le32(frame, 12);
            Ok(if ty == PduType::IcReq {
                Pdu::IcReq(IcReq {
                    pfv,
                    hpda: b10,
                    dgst,
                    maxr2t: v32,
                })
            } else {
                Pdu::IcResp(IcResp {
                    pfv,
                    cpda: b10,
                    dgst,
                    maxh2cdata: v32,
                })
            })
        }
        PduType::H2cTermReq | PduType::C2hTermReq => {
            let data = frame.get(usize::from(HLEN_TERM_REQ)..).unwrap_or_default();
            if data.len() > MAX_TERM_REQ_DATA {
                return Err(bad(4, "TermReq longer than 152 bytes"));
            }
            let t = TermReq {
                fes: le16(frame, 8),
                fei: le32(frame, 10),
                data,
            };
            Ok(if ty == PduType::H2cTermReq {
                Pdu::H2cTermReq(t)
            } else {
                Pdu::C2hTermReq(t)
            })
        }
        _ => Err(bad(0, "unexpected PDU type")),
    }
}
