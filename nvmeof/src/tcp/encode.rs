//! PDU encoders. Each appends one complete PDU (header, digests, padding, data) to `out`.

use super::digest::{crc32c_digest, Digests};
use super::header::*;
use crate::spec::{Cqe, Sqe};

/// Appends a PDU of type `ty` with PDU-specific header `specific` (HLEN - 8 bytes).
/// `align` is the peer's data alignment requirement (0's based dwords; 0 = none).
fn encode_pdu(
    out: &mut Vec<u8>,
    ty: PduType,
    extra_flags: u8,
    specific: &[u8],
    data: &[u8],
    digests: Digests,
    align: u8,
) {
    let digested = encode_pdu_head(out, ty, extra_flags, specific, data.len(), digests, align);
    append_data(out, data, digested);
}

/// Appends a PDU's data after its head, and its data digest when the head says one
/// follows.
fn append_data(out: &mut Vec<u8>, data: &[u8], digested: bool) {
    out.extend_from_slice(data);
    if digested {
        out.extend_from_slice(&data_digest(data));
    }
}

/// Appends everything of a PDU that comes before its `data_len` bytes of data (header,
/// header digest, padding to the data offset); true when a data digest must follow the
/// data. With [`encode_pdu`]'s callers this is the whole PDU but its data, so a large
/// payload can be written from its own buffer instead of copied in.
fn encode_pdu_head(
    out: &mut Vec<u8>,
    ty: PduType,
    extra_flags: u8,
    specific: &[u8],
    data_len: usize,
    digests: Digests,
    align: u8,
) -> bool {
    let digests = if ty.digested() {
        digests
    } else {
        Digests::NONE
    };
    let hlen = ty.hlen();
    let hd = digests.header_len();
    let header_end = usize::from(hlen) + hd;
    let (pdo, dd) = if data_len == 0 {
        (0usize, 0usize)
    } else {
        let a = if align == 0 {
            1
        } else {
            (usize::from(align) + 1) * 4
        };
        (
            header_end.div_ceil(a) * a,
            if digests.data { DIGEST_LEN } else { 0 },
        )
    };
    let plen = if data_len == 0 {
        header_end
    } else {
        pdo + data_len + dd
    };
    let mut flags = extra_flags;
    if digests.header {
        flags |= FLAG_HDGSTF;
    }
    if data_len != 0 && digests.data {
        flags |= FLAG_DDGSTF;
    }
    let start = out.len();
    let mut ch = [0u8; COMMON_HEADER_LEN];
    CommonHeader {
        pdu_type: ty as u8,
        flags,
        hlen,
        // PDO fits a byte: header_end is at most 132 and alignment at most 1 KiB is
        // clamped by the caller's negotiated value; saturate rather than wrap.
        pdo: u8::try_from(pdo).unwrap_or(u8::MAX),
        plen: u32::try_from(plen).unwrap_or(u32::MAX),
    }
    .write(&mut ch);
    out.extend_from_slice(&ch);
    out.extend_from_slice(specific);
    out.resize(start + usize::from(hlen), 0);
    if digests.header {
        // `start` is where this PDU begins and `out` has only grown since: this is the
        // whole header, HLEN bytes.
        let d = crc32c_digest(out.get(start..).unwrap_or_default());
        out.extend_from_slice(&d.to_le_bytes());
    }
    if data_len != 0 {
        out.resize(start + pdo, 0);
    }
    data_len != 0 && digests.data
}

/// ICReq (host side).
pub fn encode_icreq(out: &mut Vec<u8>, req: &IcReq) {
    let mut s = [0u8; HLEN_IC as usize - COMMON_HEADER_LEN];
    s[0..2].copy_from_slice(&req.pfv.to_le_bytes());
    s[2] = req.hpda;
    s[3] = req.dgst;
    s[4..8].copy_from_slice(&req.maxr2t.to_le_bytes());
    encode_pdu(out, PduType::IcReq, 0, &s, &[], Digests::NONE, 0);
}

/// ICResp (controller side).
pub fn encode_icresp(out: &mut Vec<u8>, resp: &IcResp) {
    let mut s = [0u8; HLEN_IC as usize - COMMON_HEADER_LEN];
    s[0..2].copy_from_slice(&resp.pfv.to_le_bytes());
    s[2] = resp.cpda;
    s[3] = resp.dgst;
    s[4..8].copy_from_slice(&resp.maxh2cdata.to_le_bytes());
    encode_pdu(out, PduType::IcResp, 0, &s, &[], Digests::NONE, 0);
}

/// H2CTermReq (`host == true`) or C2HTermReq; `offending` is truncated to 128 bytes.
pub fn encode_term_req(out: &mut Vec<u8>, host: bool, fes: u16, fei: u32, offending: &[u8]) {
    let mut s = [0u8; HLEN_TERM_REQ as usize - COMMON_HEADER_LEN];
    s[0..2].copy_from_slice(&fes.to_le_bytes());
    s[2..6].copy_from_slice(&fei.to_le_bytes());
    let ty = if host {
        PduType::H2cTermReq
    } else {
        PduType::C2hTermReq
    };
    let d = offending.get(..MAX_TERM_REQ_DATA).unwrap_or(offending);
    // Not through `encode_pdu`: the offending header rides in the PDU without a PDO,
    // so PLEN covers it although it is not PDU data.
    let mut ch = [0u8; COMMON_HEADER_LEN];
    CommonHeader {
        pdu_type: ty as u8,
        flags: 0,
        hlen: HLEN_TERM_REQ,
        pdo: 0,
        plen: u32::try_from(usize::from(HLEN_TERM_REQ) + d.len()).unwrap_or(u32::MAX),
    }
    .write(&mut ch);
    out.extend_from_slice(&ch);
    out.extend_from_slice(&s);
    out.extend_from_slice(d);
}

/// CapsuleCmd with optional in-capsule data (host side).
pub fn encode_capsule_cmd(out: &mut Vec<u8>, sqe: &Sqe, data: &[u8], digests: Digests, cpda: u8) {
    let digested = encode_capsule_cmd_head(out, sqe, data.len(), digests, cpda);
    append_data(out, data, digested);
}

/// What [`encode_capsule_cmd`] writes before `data_len` bytes of in-capsule data, for a
/// host that sends the data from its own buffer (no copy into the PDU): the caller sends
/// this, then the data, then (when this returns true) its [`data_digest`].
pub fn encode_capsule_cmd_head(
    out: &mut Vec<u8>,
    sqe: &Sqe,
    data_len: usize,
    digests: Digests,
    cpda: u8,
) -> bool {
    encode_pdu_head(
        out,
        PduType::CapsuleCmd,
        0,
        sqe.as_bytes(),
        data_len,
        digests,
        cpda,
    )
}

/// CapsuleResp (controller side).
pub fn encode_capsule_resp(out: &mut Vec<u8>, cqe: &Cqe, digests: Digests) {
    encode_pdu(
        out,
        PduType::CapsuleResp,
        0,
        &cqe.to_bytes(),
        &[],
        digests,
        0,
    );
}

fn data_specific(cccid: u16, ttag: u16, offset: u32, len: usize) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..2].copy_from_slice(&cccid.to_le_bytes());
    s[2..4].copy_from_slice(&ttag.to_le_bytes());
    s[4..8].copy_from_slice(&offset.to_le_bytes());
    s[8..12].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    s
}

/// C2HData; `last` sets LAST_PDU, `success` (implies last) sets SUCCESS so no
/// CapsuleResp is needed. `hpda` is the host's requested alignment.
#[allow(clippy::too_many_arguments)]
pub fn encode_c2h_data(
    out: &mut Vec<u8>,
    cccid: u16,
    datao: u32,
    data: &[u8],
    last: bool,
    success: bool,
    digests: Digests,
    hpda: u8,
) {
    let digested =
        encode_c2h_data_head(out, cccid, datao, data.len(), last, success, digests, hpda);
    append_data(out, data, digested);
}

/// What [`encode_c2h_data`] writes before the data, for a read answered from its own
/// buffer (no copy into the PDU): the caller sends this, then the `data_len` bytes,
/// then (when this returns true) their [`data_digest`].
#[allow(clippy::too_many_arguments)]
pub fn encode_c2h_data_head(
    out: &mut Vec<u8>,
    cccid: u16,
    datao: u32,
    data_len: usize,
    last: bool,
    success: bool,
    digests: Digests,
    hpda: u8,
) -> bool {
    let mut flags = 0;
    if last || success {
        flags |= FLAG_LAST_PDU;
    }
    if success {
        flags |= FLAG_SUCCESS;
    }
    let s = data_specific(cccid, 0, datao, data_len);
    encode_pdu_head(out, PduType::C2hData, flags, &s, data_len, digests, hpda)
}

/// The data digest (CRC32C, little-endian) that follows a PDU's data.
pub fn data_digest(data: &[u8]) -> [u8; DIGEST_LEN] {
    crc32c_digest(data).to_le_bytes()
}

/// H2CData answering an R2T (host side).
#[allow(clippy::too_many_arguments)]
pub fn encode_h2c_data(
    out: &mut Vec<u8>,
    cccid: u16,
    ttag: u16,
    datao: u32,
    data: &[u8],
    last: bool,
    digests: Digests,
    cpda: u8,
) {
    let digested = encode_h2c_data_head(out, cccid, ttag, datao, data.len(), last, digests, cpda);
    append_data(out, data, digested);
}

/// What [`encode_h2c_data`] writes before the data, for a host that sends the data from
/// its own buffer: the caller sends this, then the `data_len` bytes, then (when this
/// returns true) their [`data_digest`].
#[allow(clippy::too_many_arguments)]
pub fn encode_h2c_data_head(
    out: &mut Vec<u8>,
    cccid: u16,
    ttag: u16,
    datao: u32,
    data_len: usize,
    last: bool,
    digests: Digests,
    cpda: u8,
) -> bool {
    let flags = if last { FLAG_LAST_PDU } else { 0 };
    let s = data_specific(cccid, ttag, datao, data_len);
    encode_pdu_head(out, PduType::H2cData, flags, &s, data_len, digests, cpda)
}

/// R2T (controller side).
pub fn encode_r2t(out: &mut Vec<u8>, r2t: &R2t, digests: Digests) {
    let mut s = [0u8; 16];
    s[0..2].copy_from_slice(&r2t.cccid.to_le_bytes());
    s[2..4].copy_from_slice(&r2t.ttag.to_le_bytes());
    s[4..8].copy_from_slice(&r2t.r2to.to_le_bytes());
    s[8..12].copy_from_slice(&r2t.r2tl.to_le_bytes());
    encode_pdu(out, PduType::R2t, 0, &s, &[], digests, 0);
}
