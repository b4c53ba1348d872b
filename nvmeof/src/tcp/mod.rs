//! Sans-I/O NVMe/TCP PDU codec (NVMe/TCP Transport Specification 1.0, section 3.6).
//!
//! Why sans-I/O: the same decoder serves the target, the test initiator and the fuzz
//! target, and every byte can be checked in a unit test without a socket. Framing
//! ([`frame_len`]) is separate from decoding ([`decode`]) so a transport can read exactly
//! one PDU and never buffer more than [`MAX_PDU_LEN`] bytes for a peer.

mod decode;
mod digest;
mod encode;
mod header;

pub use decode::{
    check_data_digest, decode, decode_data_head, frame_len, header_received, DataHead,
    DecodeContext, HeadOf, PduError,
};
pub use digest::{crc32c_digest, Digests};
pub use encode::{
    data_digest, encode_c2h_data, encode_c2h_data_head, encode_capsule_cmd,
    encode_capsule_cmd_head, encode_capsule_resp, encode_h2c_data, encode_h2c_data_head,
    encode_icreq, encode_icresp, encode_r2t, encode_term_req,
};
pub use header::{
    CapsuleCmd, CapsuleResp, CommonHeader, DataPdu, IcReq, IcResp, Pdu, PduType, R2t, TermReq,
    TermReqFes, COMMON_HEADER_LEN, DIGEST_LEN, FLAG_DDGSTF, FLAG_HDGSTF, FLAG_LAST_PDU,
    FLAG_SUCCESS, HLEN_CAPSULE_CMD, HLEN_CAPSULE_RESP, HLEN_DATA, HLEN_IC, HLEN_R2T, HLEN_TERM_REQ,
    MAX_PDU_LEN, MAX_TERM_REQ_DATA, PFV_1_0,
};

#[cfg(test)]
pub(crate) mod tests;
