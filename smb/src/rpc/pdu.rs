//! Connection-oriented DCE/RPC PDUs (C706 12.6; MS-RPCE 2.2.2): the 16-byte common header,
//! bind / alter_context (read), bind_ack / alter_context_resp / bind_nak (written), request
//! (read), response and fault (written).

use super::RpcError;
use crate::proto::wire::{array_at, le_u16_at, le_u32_at, len_u16, Put};

/// Length of the common header.
pub const HEADER_LEN: usize = 16;
/// Length of a request header (common header + alloc_hint, p_cont_id, opnum).
pub const REQUEST_HEADER_LEN: usize = 24;
/// Length of a response/fault header.
pub const RESPONSE_HEADER_LEN: usize = 24;
/// Largest fragment this server sends or accepts (the value Windows and Samba use).
pub const MAX_FRAG: u16 = 4280;
/// Smallest max_xmit_frag a client may impose (C706: must be at least 1432).
pub const MIN_FRAG: u16 = 1432;
/// Most presentation contexts read from one bind.
pub const MAX_CONTEXTS: usize = 16;
/// Most transfer syntaxes read per context.
pub const MAX_TRANSFER_SYNTAXES: usize = 8;

/// Packet types (C706 12.6.4.1).
pub mod ptype {
    /// request.
    pub const REQUEST: u8 = 0;
    /// response.
    pub const RESPONSE: u8 = 2;
    /// fault.
    pub const FAULT: u8 = 3;
    /// bind.
    pub const BIND: u8 = 11;
    /// bind_ack.
    pub const BIND_ACK: u8 = 12;
    /// bind_nak.
    pub const BIND_NAK: u8 = 13;
    /// alter_context.
    pub const ALTER_CONTEXT: u8 = 14;
    /// alter_context_resp.
    pub const ALTER_CONTEXT_RESP: u8 = 15;
}

/// pfc_flags bits.
pub mod pfc {
    /// First fragment.
    pub const FIRST_FRAG: u8 = 0x01;
    /// Last fragment.
    pub const LAST_FRAG: u8 = 0x02;
    /// An object UUID follows the request header.
    pub const OBJECT_UUID: u8 = 0x80;
}

/// Fault status codes (C706 appendix E, MS-RPCE 3.1.1.5.5).
pub mod fault {
    /// nca_s_op_rng_error: unknown opnum.
    pub const OP_RNG_ERROR: u32 = 0x1C01_0002;
    /// nca_s_unknown_if / context mismatch: request on a context that was never bound.
    pub const CONTEXT_MISMATCH: u32 = 0x1C00_001A;
    /// nca_s_fault_ndr: the stub data could not be unmarshalled.
    pub const NDR: u32 = 0x0000_06F7;
    /// nca_s_proto_error.
    pub const PROTO_ERROR: u32 = 0x1C01_000B;
}

/// A 16-byte UUID in its NDR (little-endian fields) wire form, plus a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxId {
    /// The UUID bytes exactly as on the wire.
    pub uuid: [u8; 16],
    /// Major version (low 16 bits) and minor version (high 16 bits).
    pub version: u32,
}

/// NDR 2.0 transfer syntax 8a885d04-1ceb-11c9-9fe8-08002b104860 v2.
pub const NDR20: SyntaxId = SyntaxId {
    uuid: [
        0x04, 0x5d, 0x88, 0x8a, 0xeb, 0x1c, 0xc9, 0x11, 0x9f, 0xe8, 0x08, 0x00, 0x2b, 0x10, 0x48,
        0x60,
    ],
    version: 2,
};

/// srvsvc interface 4b324fc8-1670-01d3-1278-5a47bf6ee188 v3.0.
pub const SRVSVC: SyntaxId = SyntaxId {
    uuid: [
        0xc8, 0x4f, 0x32, 0x4b, 0x70, 0x16, 0xd3, 0x01, 0x12, 0x78, 0x5a, 0x47, 0xbf, 0x6e, 0xe1,
        0x88,
    ],
    version: 3,
};

/// First 8 bytes of the bind-time feature negotiation pseudo transfer syntax
/// 6cb71c2c-9812-4540-xxxx (MS-RPCE 3.3.1.5.3); the last 8 bytes carry the feature bits.
pub const BIND_TIME_FEATURE_PREFIX: [u8; 8] = [0x2c, 0x1c, 0xb7, 0x6c, 0x12, 0x98, 0x40, 0x45];

/// The common header fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// PTYPE.
    pub ptype: u8,
    /// pfc_flags.
    pub flags: u8,
    /// frag_length: bytes of this PDU.
    pub frag_len: u16,
    /// auth_length.
    pub auth_len: u16,
    /// call_id.
    pub call_id: u32,
}

fn u16_at(b: &[u8], off: usize) -> Result<u16, RpcError> {
    le_u16_at(b, off).ok_or(RpcError::Malformed("truncated u16"))
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, RpcError> {
    le_u32_at(b, off).ok_or(RpcError::Malformed("truncated u32"))
}

/// Parses the common header of `buf` (at least 16 bytes). Only version 5.0 with
/// little-endian, ASCII, IEEE data representation is accepted.
pub fn parse_header(buf: &[u8]) -> Result<Header, RpcError> {
    let (h, _) = buf
        .split_first_chunk::<HEADER_LEN>()
        .ok_or(RpcError::Malformed("short header"))?;
    if h[0] != 5 || h[1] != 0 {
        return Err(RpcError::Malformed("not DCE/RPC 5.0"));
    }
    if h[4] & 0xF0 != 0x10 {
        return Err(RpcError::Malformed(
            "only little-endian data representation is supported",
        ));
    }
    let frag_len = u16::from_le_bytes([h[8], h[9]]);
    if usize::from(frag_len) < HEADER_LEN {
        return Err(RpcError::Malformed("frag_length shorter than header"));
    }
    if frag_len > MAX_FRAG {
        return Err(RpcError::TooLarge("fragment"));
    }
    Ok(Header {
        ptype: h[2],
        flags: h[3],
        frag_len,
        auth_len: u16::from_le_bytes([h[10], h[11]]),
        call_id: u32::from_le_bytes([h[12], h[13], h[14], h[15]]),
    })
}

/// Starts a PDU with its common header (version 5.0, little-endian, no auth trailer);
/// [`finish`] fills in its frag_length.
fn write_header(out: &mut Vec<u8>, ptype: u8, flags: u8, call_id: u32) {
    out.extend_from_slice(&[5, 0, ptype, flags, 0x10, 0, 0, 0]);
    out.extend_from_slice(&[0, 0, 0, 0]); // frag_length, auth_length
    out.extend_from_slice(&call_id.to_le_bytes());
}

/// Sets frag_length (bytes 8..10) to the length of the PDU as written.
fn finish(mut pdu: Vec<u8>) -> Vec<u8> {
    let len = len_u16(pdu.len());
    pdu.set_u16(8, len);
    pdu
}

/// One presentation context offered in a bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextElem {
    /// p_cont_id.
    pub id: u16,
    /// The abstract syntax (interface).
    pub abstract_syntax: SyntaxId,
    /// Offered transfer syntaxes.
    pub transfer_syntaxes: Vec<SyntaxId>,
}

/// A parsed bind or alter_context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// max_xmit_frag the client proposes (the largest PDU it will send).
    pub max_xmit_frag: u16,
    /// max_recv_frag: the largest PDU the client accepts.
    pub max_recv_frag: u16,
    /// assoc_group_id.
    pub assoc_group_id: u32,
    /// Offered contexts.
    pub contexts: Vec<ContextElem>,
}

fn syntax_at(b: &[u8], off: usize) -> Result<SyntaxId, RpcError> {
    let uuid = array_at::<16>(b, off).ok_or(RpcError::Malformed("truncated syntax id"))?;
    Ok(SyntaxId {
        uuid: *uuid,
        version: u32_at(b, off + 16)?,
    })
}

/// Parses the body of a bind/alter_context PDU (`pdu` is the whole fragment).
pub fn parse_bind(pdu: &[u8]) -> Result<Bind, RpcError> {
    let max_xmit_frag = u16_at(pdu, 16)?;
    let max_recv_frag = u16_at(pdu, 18)?;
    let assoc_group_id = u32_at(pdu, 20)?;
    let n = usize::from(*pdu.get(24).ok_or(RpcError::Malformed("truncated bind"))?);
    if n > MAX_CONTEXTS {
        return Err(RpcError::TooLarge("presentation contexts"));
    }
    let mut off = 28;
    let mut contexts = Vec::with_capacity(n);
    for _ in 0..n {
        let id = u16_at(pdu, off)?;
        let nts = usize::from(
            *pdu.get(off + 2)
                .ok_or(RpcError::Malformed("truncated context"))?,
        );
        if nts > MAX_TRANSFER_SYNTAXES {
            return Err(RpcError::TooLarge("transfer syntaxes"));
        }
        let abstract_syntax = syntax_at(pdu, off + 4)?;
        let mut transfer_syntaxes = Vec::with_capacity(nts);
        for i in 0..nts {
            transfer_syntaxes.push(syntax_at(pdu, off + 24 + 20 * i)?);
        }
        off += 24 + 20 * nts;
        contexts.push(ContextElem {
            id,
            abstract_syntax,
            transfer_syntaxes,
        });
    }
    Ok(Bind {
        max_xmit_frag,
        max_recv_frag,
        assoc_group_id,
        contexts,
    })
}

/// Result of one presentation context (p_result_t).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextResult {
    /// 0 acceptance, 2 provider_rejection, 3 negotiate_ack (bind-time features).
    pub result: u16,
    /// Rejection reason, or the accepted feature bits for negotiate_ack.
    pub reason: u16,
    /// The chosen transfer syntax (zeros when rejected).
    pub transfer_syntax: SyntaxId,
}

/// p_result values.
pub mod result {
    /// acceptance.
    pub const ACCEPTANCE: u16 = 0;
    /// provider_rejection.
    pub const PROVIDER_REJECTION: u16 = 2;
    /// negotiate_ack (MS-RPCE bind-time feature negotiation).
    pub const NEGOTIATE_ACK: u16 = 3;
    /// Reason: abstract syntax not supported.
    pub const REASON_ABSTRACT_SYNTAX: u16 = 1;
    /// Reason: proposed transfer syntaxes not supported.
    pub const REASON_TRANSFER_SYNTAXES: u16 = 2;
}

/// Builds a bind_ack or alter_context_resp.
pub fn build_bind_ack(
    ptype_out: u8,
    call_id: u32,
    max_xmit: u16,
    max_recv: u16,
    assoc_group_id: u32,
    secondary_address: &str,
    results: &[ContextResult],
) -> Vec<u8> {
    let mut p = Vec::with_capacity(64 + results.len() * 24);
    write_header(&mut p, ptype_out, pfc::FIRST_FRAG | pfc::LAST_FRAG, call_id);
    p.extend_from_slice(&max_xmit.to_le_bytes());
    p.extend_from_slice(&max_recv.to_le_bytes());
    p.extend_from_slice(&assoc_group_id.to_le_bytes());
    if secondary_address.is_empty() {
        p.extend_from_slice(&0u16.to_le_bytes());
    } else {
        let addr = secondary_address.as_bytes();
        p.extend_from_slice(&((addr.len() + 1) as u16).to_le_bytes());
        p.extend_from_slice(addr);
        p.push(0);
    }
    while !p.len().is_multiple_of(4) {
        p.push(0);
    }
    p.extend_from_slice(&[results.len() as u8, 0, 0, 0]);
    for r in results {
        p.extend_from_slice(&r.result.to_le_bytes());
        p.extend_from_slice(&r.reason.to_le_bytes());
        p.extend_from_slice(&r.transfer_syntax.uuid);
        p.extend_from_slice(&r.transfer_syntax.version.to_le_bytes());
    }
    finish(p)
}

/// bind_nak reject reasons (C706 12.6.4.4).
pub mod reject {
    /// reason_not_specified.
    pub const NOT_SPECIFIED: u16 = 0;
    /// protocol_version_not_supported.
    pub const PROTOCOL_VERSION_NOT_SUPPORTED: u16 = 4;
    /// authentication_type_not_recognized.
    pub const AUTHENTICATION_TYPE_NOT_RECOGNIZED: u16 = 8;
}

/// Builds a bind_nak with one supported protocol version (5.0).
pub fn build_bind_nak(call_id: u32, reason: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(24);
    write_header(
        &mut p,
        ptype::BIND_NAK,
        pfc::FIRST_FRAG | pfc::LAST_FRAG,
        call_id,
    );
    p.extend_from_slice(&reason.to_le_bytes());
    p.extend_from_slice(&[1, 5, 0, 0]); // n_protocols = 1, {5, 0}, pad
    finish(p)
}

/// A parsed request fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// alloc_hint.
    pub alloc_hint: u32,
    /// p_cont_id.
    pub context_id: u16,
    /// opnum.
    pub opnum: u16,
    /// Stub data of this fragment (auth trailer excluded).
    pub stub: &'a [u8],
}

/// Parses a request fragment (`pdu` is exactly one fragment of `h.frag_len` bytes).
pub fn parse_request<'a>(h: &Header, pdu: &'a [u8]) -> Result<Request<'a>, RpcError> {
    let mut start = REQUEST_HEADER_LEN;
    if h.flags & pfc::OBJECT_UUID != 0 {
        start += 16;
    }
    let auth = if h.auth_len == 0 {
        0
    } else {
        usize::from(h.auth_len) + 8
    };
    let end = pdu
        .len()
        .checked_sub(auth)
        .ok_or(RpcError::Malformed("auth trailer longer than PDU"))?;
    let stub = pdu
        .get(start..end)
        .ok_or(RpcError::Malformed("truncated request"))?;
    Ok(Request {
        alloc_hint: u32_at(pdu, 16)?,
        context_id: u16_at(pdu, 20)?,
        opnum: u16_at(pdu, 22)?,
        stub,
    })
}

/// Splits a response stub into response fragments of at most `max_frag` bytes each.
pub fn build_responses(call_id: u32, context_id: u16, stub: &[u8], max_frag: u16) -> Vec<Vec<u8>> {
    let room = usize::from(max_frag.max(MIN_FRAG)) - RESPONSE_HEADER_LEN;
    let mut out = Vec::with_capacity(stub.len() / room + 1);
    let mut rest = stub;
    loop {
        // This fragment's stub, and what is left for the next ones.
        let (part, tail) = rest.split_at_checked(room).unwrap_or((rest, &[]));
        let mut flags = 0;
        if rest.len() == stub.len() {
            flags |= pfc::FIRST_FRAG;
        }
        if tail.is_empty() {
            flags |= pfc::LAST_FRAG;
        }
        let mut p = Vec::with_capacity(RESPONSE_HEADER_LEN + part.len());
        write_header(&mut p, ptype::RESPONSE, flags, call_id);
        // alloc_hint: the stub bytes still to come, this fragment's included.
        p.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        p.extend_from_slice(&context_id.to_le_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(part);
        out.push(finish(p));
        rest = tail;
        if rest.is_empty() {
            return out;
        }
    }
}

/// Builds a fault PDU.
pub fn build_fault(call_id: u32, context_id: u16, status: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    write_header(
        &mut p,
        ptype::FAULT,
        pfc::FIRST_FRAG | pfc::LAST_FRAG,
        call_id,
    );
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&context_id.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    finish(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// smbclient 4.17's bind to srvsvc, from a loopback capture.
    pub(crate) const SMBCLIENT_BIND: &str =
        "05000b03100000004800000001000000b810b810000000000100000000000100\
         c84f324b7016d30112785a47bf6ee18803000000045d888aeb1cc9119fe808002b10486002000000";

    #[test]
    fn parses_smbclient_bind() {
        let b = unhex(SMBCLIENT_BIND);
        let h = parse_header(&b).unwrap();
        assert_eq!(h.ptype, ptype::BIND);
        assert_eq!(usize::from(h.frag_len), b.len());
        let bind = parse_bind(&b).unwrap();
        assert_eq!(bind.max_recv_frag, 4280);
        assert_eq!(bind.contexts.len(), 1);
        assert_eq!(bind.contexts[0].abstract_syntax, SRVSVC);
        assert_eq!(bind.contexts[0].transfer_syntaxes, vec![NDR20]);
    }

    #[test]
    fn responses_fragment_and_carry_alloc_hint() {
        let stub: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let frags = build_responses(7, 0, &stub, MAX_FRAG);
        assert_eq!(frags.len(), 3);
        let mut joined = Vec::new();
        for (i, f) in frags.iter().enumerate() {
            let h = parse_header(f).unwrap();
            assert_eq!(usize::from(h.frag_len), f.len());
            assert!(f.len() <= usize::from(MAX_FRAG));
            assert_eq!(h.flags & pfc::FIRST_FRAG != 0, i == 0);
            assert_eq!(h.flags & pfc::LAST_FRAG != 0, i == 2);
            joined.extend_from_slice(&f[24..]);
        }
        assert_eq!(joined, stub);
        assert_eq!(build_responses(1, 0, &[], MAX_FRAG).len(), 1);
        let exact = build_responses(1, 0, &stub[..4280 - 24], MAX_FRAG);
        assert_eq!(exact.len(), 1, "a stub that fills one fragment exactly");
        assert_eq!(exact[0].len(), 4280);
        assert_eq!(exact[0][3], pfc::FIRST_FRAG | pfc::LAST_FRAG);
    }

    /// Every builder's frag_length is the length of what it wrote.
    #[test]
    fn built_pdus_carry_their_own_length() {
        let result = ContextResult {
            result: result::ACCEPTANCE,
            reason: 0,
            transfer_syntax: NDR20,
        };
        let mut pdus = vec![
            build_bind_nak(3, reject::NOT_SPECIFIED),
            build_fault(4, 0, 5),
        ];
        for addr in ["", "\\PIPE\\srvsvc", "ab", "abc", "abcd"] {
            for n in 0..3 {
                pdus.push(build_bind_ack(
                    ptype::BIND_ACK,
                    5,
                    MAX_FRAG,
                    MAX_FRAG,
                    0x1234,
                    addr,
                    &vec![result; n],
                ));
            }
        }
        pdus.extend(build_responses(6, 0, &[7; 5000], MIN_FRAG));
        for p in pdus {
            let h = parse_header(&p).unwrap();
            assert_eq!(usize::from(h.frag_len), p.len());
            assert_eq!(h.auth_len, 0);
        }
        let ack = build_bind_ack(ptype::BIND_ACK, 5, MAX_FRAG, MAX_FRAG, 1, "ab", &[result]);
        assert_eq!(
            &ack[24..30],
            b"\x03\x00ab\x00\x00",
            "sec_addr then pad to 4"
        );
        assert_eq!(&ack[30..36], &[0, 0, 1, 0, 0, 0], "pad, then one result");
        assert_eq!(build_bind_nak(3, 0).len(), 22);
        assert_eq!(build_fault(4, 0, 5).len(), 32);
    }

    #[test]
    fn hostile_headers_are_errors() {
        assert!(parse_header(&[5, 0, 0]).is_err());
        assert!(parse_header(&[4, 0, 0, 3, 0x10, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_header(&[5, 0, 0, 3, 0x00, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_header(&[5, 0, 0, 3, 0x10, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_header(&[5, 0, 0, 3, 0x10, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0]).is_err());
        let mut b = unhex(SMBCLIENT_BIND);
        b[24] = 200;
        assert!(parse_bind(&b).is_err());
        b[24] = 2;
        assert!(parse_bind(&b).is_err());
    }
}
