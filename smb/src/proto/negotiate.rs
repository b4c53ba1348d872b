//! NEGOTIATE request and response with the 3.1.1 negotiate contexts (MS-SMB2 2.2.3, 2.2.4).

use super::header::HEADER_LEN;
use super::wire::{len_u16, len_u32, slice_at, Put, Reader};
use super::ProtoError;

/// Dialect 2.0.2.
pub const DIALECT_202: u16 = 0x0202;
/// Dialect 2.1.
pub const DIALECT_210: u16 = 0x0210;
/// Dialect 3.0.
pub const DIALECT_300: u16 = 0x0300;
/// Dialect 3.0.2.
pub const DIALECT_302: u16 = 0x0302;
/// Dialect 3.1.1.
pub const DIALECT_311: u16 = 0x0311;
/// The wildcard revision answered to an SMB1 NEGOTIATE offering "SMB 2.???".
pub const DIALECT_WILDCARD: u16 = 0x02FF;

/// SecurityMode bit: signing enabled.
pub const SIGNING_ENABLED: u16 = 0x0001;
/// SecurityMode bit: signing required.
pub const SIGNING_REQUIRED: u16 = 0x0002;

/// Capability: DFS.
pub const CAP_DFS: u32 = 0x0000_0001;
/// Capability: leasing.
pub const CAP_LEASING: u32 = 0x0000_0002;
/// SMB2_GLOBAL_CAP_DIRECTORY_LEASING: directories take (v2) leases.
pub const CAP_DIRECTORY_LEASING: u32 = 0x0000_0020;
/// Capability: multi-credit operations (large MTU).
pub const CAP_LARGE_MTU: u32 = 0x0000_0004;
/// Capability: multichannel.
pub const CAP_MULTI_CHANNEL: u32 = 0x0000_0008;
/// Capability: encryption (3.0/3.0.2; 3.1.1 negotiates ciphers by context).
pub const CAP_ENCRYPTION: u32 = 0x0000_0040;
/// SMB2_GLOBAL_CAP_PERSISTENT_HANDLES: continuously available shares keep persistent
/// handles across a server restart.
pub const CAP_PERSISTENT_HANDLES: u32 = 0x0000_0010;

/// Negotiate context: preauth integrity capabilities.
pub const CTX_PREAUTH_INTEGRITY: u16 = 0x0001;
/// Negotiate context: encryption capabilities.
pub const CTX_ENCRYPTION: u16 = 0x0002;
/// Negotiate context: compression capabilities.
pub const CTX_COMPRESSION: u16 = 0x0003;
/// Negotiate context: the client's net name.
pub const CTX_NETNAME: u16 = 0x0005;
/// Negotiate context: signing capabilities.
pub const CTX_SIGNING: u16 = 0x0008;
/// Hash algorithm id of SHA-512 in the preauth context.
pub const HASH_SHA512: u16 = 0x0001;

/// Most dialects a NEGOTIATE may list (real clients send at most a handful).
pub const MAX_DIALECTS: usize = 64;
/// Most negotiate contexts we parse.
pub const MAX_NEGOTIATE_CONTEXTS: usize = 32;
/// Most algorithm ids inside one context.
pub const MAX_CONTEXT_IDS: usize = 32;
/// Largest preauth salt we accept.
pub const MAX_SALT_LEN: usize = 64;

/// One negotiate context as far as the server cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NegotiateContext {
    /// SMB2_PREAUTH_INTEGRITY_CAPABILITIES.
    Preauth {
        /// Hash algorithm ids.
        hashes: Vec<u16>,
        /// Salt.
        salt: Vec<u8>,
    },
    /// SMB2_ENCRYPTION_CAPABILITIES.
    Encryption {
        /// Cipher ids, client's preference order.
        ciphers: Vec<u16>,
    },
    /// SMB2_SIGNING_CAPABILITIES.
    Signing {
        /// Signing algorithm ids, client's preference order.
        algorithms: Vec<u16>,
    },
    /// Any other context (kept so the caller can count or ignore it).
    Other {
        /// Context type.
        kind: u16,
        /// Raw data.
        data: Vec<u8>,
    },
}

/// A NEGOTIATE request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NegotiateRequest {
    /// SecurityMode.
    pub security_mode: u16,
    /// Capabilities.
    pub capabilities: u32,
    /// ClientGuid.
    pub client_guid: [u8; 16],
    /// Dialects offered.
    pub dialects: Vec<u16>,
    /// Negotiate contexts (only when 3.1.1 is offered).
    pub contexts: Vec<NegotiateContext>,
}

fn ids(r: &mut Reader<'_>, n: usize) -> Result<Vec<u16>, ProtoError> {
    if n > MAX_CONTEXT_IDS {
        return Err(ProtoError::TooMany("negotiate context ids"));
    }
    (0..n).map(|_| r.u16()).collect()
}

impl NegotiateContext {
    fn decode(kind: u16, data: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(data);
        Ok(match kind {
            CTX_PREAUTH_INTEGRITY => {
                let n = usize::from(r.u16()?);
                let salt_len = usize::from(r.u16()?);
                if salt_len > MAX_SALT_LEN {
                    return Err(ProtoError::TooMany("preauth salt"));
                }
                let hashes = ids(&mut r, n)?;
                let salt = r.bytes(salt_len)?.to_vec();
                NegotiateContext::Preauth { hashes, salt }
            }
            CTX_ENCRYPTION => {
                let n = usize::from(r.u16()?);
                NegotiateContext::Encryption {
                    ciphers: ids(&mut r, n)?,
                }
            }
            CTX_SIGNING => {
                let n = usize::from(r.u16()?);
                NegotiateContext::Signing {
                    algorithms: ids(&mut r, n)?,
                }
            }
            other => NegotiateContext::Other {
                kind: other,
                data: data.to_vec(),
            },
        })
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Preauth { .. } => CTX_PREAUTH_INTEGRITY,
            Self::Encryption { .. } => CTX_ENCRYPTION,
            Self::Signing { .. } => CTX_SIGNING,
            Self::Other { kind, .. } => *kind,
        }
    }

    fn encode_data(&self, out: &mut Vec<u8>) {
        match self {
            Self::Preauth { hashes, salt } => {
                out.put_u16(len_u16(hashes.len()));
                out.put_u16(len_u16(salt.len()));
                hashes.iter().for_each(|h| out.put_u16(*h));
                out.extend_from_slice(salt);
            }
            Self::Encryption { ciphers } => {
                out.put_u16(len_u16(ciphers.len()));
                ciphers.iter().for_each(|c| out.put_u16(*c));
            }
            Self::Signing { algorithms } => {
                out.put_u16(len_u16(algorithms.len()));
                algorithms.iter().for_each(|c| out.put_u16(*c));
            }
            Self::Other { data, .. } => out.extend_from_slice(data),
        }
    }
}

/// Decodes the negotiate context list at `offset` (from the header start) of `msg`.
fn decode_contexts(
    msg: &[u8],
    offset: usize,
    count: usize,
) -> Result<Vec<NegotiateContext>, ProtoError> {
    if count > MAX_NEGOTIATE_CONTEXTS {
        return Err(ProtoError::TooMany("negotiate contexts"));
    }
    let mut out = Vec::with_capacity(count);
    let mut pos = offset;
    for i in 0..count {
        let mut r = Reader::new(msg.get(pos..).ok_or(ProtoError::BadOffset)?);
        let kind = r.u16()?;
        let len = usize::from(r.u16()?);
        r.skip(4)?;
        let data = r.bytes(len)?;
        out.push(NegotiateContext::decode(kind, data)?);
        if i + 1 < count {
            pos = (pos + 8 + len).next_multiple_of(8);
        }
    }
    Ok(out)
}

/// Appends contexts (each 8-aligned) to `out`, which starts at the SMB2 header.
fn encode_contexts(out: &mut Vec<u8>, contexts: &[NegotiateContext]) {
    for (i, c) in contexts.iter().enumerate() {
        if i > 0 {
            out.pad_to(8);
        }
        out.put_u16(c.kind());
        let len_at = out.len();
        out.put_u16(0);
        out.put_u32(0);
        let start = out.len();
        c.encode_data(out);
        let len = out.len() - start;
        out.set_u16(len_at, len_u16(len));
    }
}

impl NegotiateRequest {
    /// Decodes a NEGOTIATE request; `msg` starts at the SMB2 header.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 36 {
            return Err(ProtoError::BadStructureSize("NEGOTIATE request"));
        }
        let count = usize::from(r.u16()?);
        if count == 0 || count > MAX_DIALECTS {
            return Err(ProtoError::TooMany("dialects"));
        }
        let security_mode = r.u16()?;
        r.skip(2)?;
        let capabilities = r.u32()?;
        let client_guid = r.array()?;
        let ctx_offset = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let ctx_count = usize::from(r.u16()?);
        r.skip(2)?;
        let dialects = (0..count).map(|_| r.u16()).collect::<Result<Vec<_>, _>>()?;
        let contexts = if dialects.contains(&DIALECT_311) && ctx_count > 0 {
            decode_contexts(msg, ctx_offset, ctx_count)?
        } else {
            Vec::new()
        };
        Ok(Self {
            security_mode,
            capabilities,
            client_guid,
            dialects,
            contexts,
        })
    }

    /// Appends the body (after a 64-byte header already in `out`); used by tests and fuzz seeds.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let base = out.len();
        out.put_u16(36);
        out.put_u16(len_u16(self.dialects.len()));
        out.put_u16(self.security_mode);
        out.put_u16(0);
        out.put_u32(self.capabilities);
        out.extend_from_slice(&self.client_guid);
        let off_at = out.len();
        out.put_u32(0);
        out.put_u16(len_u16(self.contexts.len()));
        out.put_u16(0);
        self.dialects.iter().for_each(|d| out.put_u16(*d));
        if !self.contexts.is_empty() {
            out.pad_to(8);
            out.set_u32(off_at, len_u32(HEADER_LEN + out.len() - base));
            encode_contexts(out, &self.contexts);
        }
    }
}

/// A NEGOTIATE response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NegotiateResponse {
    /// SecurityMode.
    pub security_mode: u16,
    /// DialectRevision.
    pub dialect: u16,
    /// ServerGuid.
    pub server_guid: [u8; 16],
    /// Capabilities.
    pub capabilities: u32,
    /// MaxTransactSize.
    pub max_transact_size: u32,
    /// MaxReadSize.
    pub max_read_size: u32,
    /// MaxWriteSize.
    pub max_write_size: u32,
    /// SystemTime (FILETIME).
    pub system_time: u64,
    /// ServerStartTime (FILETIME), 0.
    pub server_start_time: u64,
    /// The initial SPNEGO token (NegTokenInit hint).
    pub security_buffer: Vec<u8>,
    /// Negotiate contexts (3.1.1 only).
    pub contexts: Vec<NegotiateContext>,
}

impl NegotiateResponse {
    /// Appends the body to `out`, which holds the 64-byte header already.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let base = out.len();
        out.put_u16(65);
        out.put_u16(self.security_mode);
        out.put_u16(self.dialect);
        out.put_u16(if self.dialect == DIALECT_311 {
            len_u16(self.contexts.len())
        } else {
            0
        });
        out.extend_from_slice(&self.server_guid);
        out.put_u32(self.capabilities);
        out.put_u32(self.max_transact_size);
        out.put_u32(self.max_read_size);
        out.put_u32(self.max_write_size);
        out.put_u64(self.system_time);
        out.put_u64(self.server_start_time);
        let sec_off = HEADER_LEN + 64;
        out.put_u16(if self.security_buffer.is_empty() {
            0
        } else {
            len_u16(sec_off)
        });
        out.put_u16(len_u16(self.security_buffer.len()));
        let ctx_off_at = out.len();
        out.put_u32(0);
        out.extend_from_slice(&self.security_buffer);
        if self.dialect == DIALECT_311 && !self.contexts.is_empty() {
            out.pad_to(8);
            out.set_u32(ctx_off_at, len_u32(HEADER_LEN + out.len() - base));
            encode_contexts(out, &self.contexts);
        } else if self.security_buffer.is_empty() {
            // The fixed part is 65 bytes: one byte of the (empty) variable buffer.
            out.put_u8(0);
        }
    }

    /// Decodes a response (used by tests to check round trips).
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 65 {
            return Err(ProtoError::BadStructureSize("NEGOTIATE response"));
        }
        let security_mode = r.u16()?;
        let dialect = r.u16()?;
        let ctx_count = usize::from(r.u16()?);
        let server_guid = r.array()?;
        let capabilities = r.u32()?;
        let max_transact_size = r.u32()?;
        let max_read_size = r.u32()?;
        let max_write_size = r.u32()?;
        let system_time = r.u64()?;
        let server_start_time = r.u64()?;
        let sec_off = usize::from(r.u16()?);
        let sec_len = usize::from(r.u16()?);
        let ctx_off = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let security_buffer = slice_at(msg, sec_off, sec_len)?.to_vec();
        let contexts = if dialect == DIALECT_311 {
            decode_contexts(msg, ctx_off, ctx_count)?
        } else {
            Vec::new()
        };
        Ok(Self {
            security_mode,
            dialect,
            server_guid,
            capabilities,
            max_transact_size,
            max_read_size,
            max_write_size,
            system_time,
            server_start_time,
            security_buffer,
            contexts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NEGOTIATE request from the MS "SMB 3.1.1 pre-authentication integrity" blog.
    const BLOG_REQ: &str =
        "FE534D4240000100000000000000800000000000000000000100000000000000FFFE000000000000\
         00000000000000000000000000000000000000000000000024000500000000003F000000ECD86F32\
         6276024F9F7752B89BB33F3A70000000020000000202100200030203110300000100260000000000\
         010020000100FA49E6578F1F3A9F4CD3E9CC14A67AA884B3D05844E0E5A118225C15887F32FF0000\
         0200060000000000020002000100";

    /// The server's NEGOTIATE response from the same blog.
    const BLOG_RESP: &str =
        "FE534D4240000100000000000000010001000000000000000100000000000000FFFE000000000000\
         000000000000000000000000000000000000000000000000410001001103020039CBCAF329714942\
         BDCE5D60F09AB3FB2F000000000080000000800000008000D8DAE5ADCBAED00109094AB095AED001\
         80004001C00100006082013C06062B0601050502A08201303082012CA01A3018060A2B0601040182\
         3702021E060A2B06010401823702020AA282010C048201084E45474F455854530100000000000000\
         60000000700000007C7CC0FD06D6362D02DDE1CF343BFE292900F49750B4AA97934D9C4296B26E51\
         FD370471B235E15A50DAE15BD5489C87000000000000000060000000010000000000000000000000\
         5C33530DEAF90D4DB2EC4AE3786EC3084E45474F4558545303000000010000004000000098000000\
         7C7CC0FD06D6362D02DDE1CF343BFE295C33530DEAF90D4DB2EC4AE3786EC3084000000058000000\
         3056A05430523027802530233121301F06035504031318546F6B656E205369676E696E6720507562\
         6C6963204B65793027802530233121301F06035504031318546F6B656E205369676E696E67205075\
         626C6963204B6579010026000000000001002000010060A3C3B95C3C7CCD51EC536648D9B3AC74C4\
         83CA5B65385A251117BEB30712E50000020004000000000001000200";

    #[test]
    fn blog_request_decodes_and_reencodes() {
        let raw = hex::decode(BLOG_REQ).unwrap();
        let req = NegotiateRequest::decode(&raw).unwrap();
        assert_eq!(req.dialects, vec![0x0202, 0x0210, 0x0300, 0x0302, 0x0311]);
        assert_eq!(req.security_mode, 0);
        assert_eq!(req.capabilities, 0x3F);
        assert_eq!(req.contexts.len(), 2);
        assert!(
            matches!(&req.contexts[0], NegotiateContext::Preauth { hashes, salt } if hashes == &vec![1] && salt.len() == 32)
        );
        assert_eq!(
            req.contexts[1],
            NegotiateContext::Encryption {
                ciphers: vec![2, 1]
            }
        );
        let mut out = raw[..HEADER_LEN].to_vec();
        req.encode(&mut out);
        assert_eq!(hex::encode_upper(&out), hex::encode_upper(&raw));
    }

    #[test]
    fn blog_response_round_trips() {
        let raw = hex::decode(BLOG_RESP).unwrap();
        let resp = NegotiateResponse::decode(&raw).unwrap();
        assert_eq!(resp.dialect, DIALECT_311);
        assert_eq!(resp.max_read_size, 0x0080_0000);
        assert_eq!(
            resp.contexts[1],
            NegotiateContext::Encryption { ciphers: vec![2] }
        );
        let mut out = raw[..HEADER_LEN].to_vec();
        resp.encode(&mut out);
        assert_eq!(hex::encode_upper(&out), hex::encode_upper(&raw));
    }

    #[test]
    fn every_truncation_fails_cleanly() {
        let raw = hex::decode(BLOG_REQ).unwrap();
        for n in 0..raw.len() {
            let _ = NegotiateRequest::decode(&raw[..n]);
        }
        let mut bad = raw.clone();
        bad[HEADER_LEN + 2] = 0; // zero dialects
        assert!(NegotiateRequest::decode(&bad).is_err());
    }
}
