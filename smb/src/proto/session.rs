//! SESSION_SETUP, LOGOFF, TREE_CONNECT and TREE_DISCONNECT (MS-SMB2 2.2.5 – 2.2.12).

use super::header::HEADER_LEN;
use super::wire::{len_u16, slice_at, utf16le, Put, Reader};
use super::ProtoError;

/// SESSION_SETUP request flag: bind an existing session to this connection (multichannel).
pub const SESSION_FLAG_BINDING: u8 = 0x01;
/// SESSION_SETUP response flag: the session is a guest session.
pub const SESSION_FLAG_IS_GUEST: u16 = 0x0001;
/// SESSION_SETUP response flag: anonymous session.
pub const SESSION_FLAG_IS_NULL: u16 = 0x0002;
/// SESSION_SETUP response flag: the server requires encryption on this session.
pub const SESSION_FLAG_ENCRYPT_DATA: u16 = 0x0004;

/// TREE_CONNECT response share type: disk.
pub const SHARE_TYPE_DISK: u8 = 0x01;
/// TREE_CONNECT response share type: named pipe (IPC$).
pub const SHARE_TYPE_PIPE: u8 = 0x02;
/// Share flag: the client must encrypt every message to this share.
pub const SHAREFLAG_ENCRYPT_DATA: u32 = 0x0000_8000;
/// Share flag: no client-side caching.
pub const SHAREFLAG_NO_CACHING: u32 = 0x0000_0030;
/// SMB2_SHARE_CAP_CONTINUOUS_AVAILABILITY: the share grants persistent handles.
pub const SHARE_CAP_CONTINUOUS_AVAILABILITY: u32 = 0x0000_0010;
/// Tree connect flag (3.1.1): the request carries a TREE_CONNECT_REQUEST_EXTENSION.
pub const TREE_CONNECT_FLAG_EXTENSION_PRESENT: u16 = 0x0004;
/// Longest share path (\\server\share) we accept, in bytes of UTF-16.
pub const MAX_TREE_PATH_BYTES: usize = 1024;

/// A SESSION_SETUP request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionSetupRequest<'a> {
    /// Flags (`SESSION_FLAG_BINDING`).
    pub flags: u8,
    /// SecurityMode.
    pub security_mode: u8,
    /// Capabilities.
    pub capabilities: u32,
    /// PreviousSessionId.
    pub previous_session_id: u64,
    /// The SPNEGO/NTLMSSP token.
    pub security_buffer: &'a [u8],
}

impl<'a> SessionSetupRequest<'a> {
    /// Decodes a SESSION_SETUP request; `msg` starts at the SMB2 header.
    pub fn decode(msg: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 25 {
            return Err(ProtoError::BadStructureSize("SESSION_SETUP request"));
        }
        let flags = r.u8()?;
        let security_mode = r.u8()?;
        let capabilities = r.u32()?;
        let _channel = r.u32()?;
        let off = usize::from(r.u16()?);
        let len = usize::from(r.u16()?);
        let previous_session_id = r.u64()?;
        let security_buffer = slice_at(msg, off, len)?;
        Ok(Self {
            flags,
            security_mode,
            capabilities,
            previous_session_id,
            security_buffer,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(25);
        out.put_u8(self.flags);
        out.put_u8(self.security_mode);
        out.put_u32(self.capabilities);
        out.put_u32(0);
        out.put_u16(len_u16(HEADER_LEN + 24));
        out.put_u16(len_u16(self.security_buffer.len()));
        out.put_u64(self.previous_session_id);
        out.extend_from_slice(self.security_buffer);
    }
}

/// Appends a SESSION_SETUP response body.
pub fn encode_session_setup_response(out: &mut Vec<u8>, session_flags: u16, token: &[u8]) {
    out.put_u16(9);
    out.put_u16(session_flags);
    out.put_u16(if token.is_empty() {
        0
    } else {
        len_u16(HEADER_LEN + 8)
    });
    out.put_u16(len_u16(token.len()));
    if token.is_empty() {
        out.put_u8(0);
    } else {
        out.extend_from_slice(token);
    }
}

/// Checks the 4-byte body shared by LOGOFF, TREE_DISCONNECT and ECHO requests.
pub fn decode_empty_request(msg: &[u8], what: &'static str) -> Result<(), ProtoError> {
    let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
    if r.u16()? != 4 {
        return Err(ProtoError::BadStructureSize(what));
    }
    Ok(())
}

/// Appends the 4-byte body of LOGOFF, TREE_DISCONNECT, ECHO and FLUSH... responses.
pub fn encode_empty_response(out: &mut Vec<u8>) {
    out.put_u16(4);
    out.put_u16(0);
}

/// A TREE_CONNECT request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeConnectRequest {
    /// Flags.
    pub flags: u16,
    /// The UNC path, `\\server\share`.
    pub path: String,
}

impl TreeConnectRequest {
    /// Decodes a TREE_CONNECT request; `msg` starts at the SMB2 header.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 9 {
            return Err(ProtoError::BadStructureSize("TREE_CONNECT request"));
        }
        let flags = r.u16()?;
        let off = usize::from(r.u16()?);
        let len = usize::from(r.u16()?);
        if len > MAX_TREE_PATH_BYTES {
            return Err(ProtoError::TooMany("tree path bytes"));
        }
        let path = utf16le(slice_at(msg, off, len)?)?;
        Ok(Self { flags, path })
    }

    /// The share component of the path (`share` of `\\server\share`), without trailing
    /// separators.
    pub fn share_name(&self) -> &str {
        let p = self.path.trim_end_matches('\\');
        p.rsplit('\\').next().unwrap_or(p)
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(9);
        out.put_u16(self.flags);
        out.put_u16(len_u16(HEADER_LEN + 8));
        out.put_u16(len_u16(super::wire::utf16_len(&self.path)));
        out.put_utf16(&self.path);
    }
}

/// A TREE_CONNECT response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeConnectResponse {
    /// ShareType (`SHARE_TYPE_*`).
    pub share_type: u8,
    /// ShareFlags.
    pub share_flags: u32,
    /// Capabilities.
    pub capabilities: u32,
    /// MaximalAccess.
    pub maximal_access: u32,
}

impl TreeConnectResponse {
    /// Appends the body.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(16);
        out.put_u8(self.share_type);
        out.put_u8(0);
        out.put_u32(self.share_flags);
        out.put_u32(self.capabilities);
        out.put_u32(self.maximal_access);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SESSION_SETUP request (NTLMSSP NEGOTIATE inside SPNEGO) from the MS preauth blog.
    const BLOG_SS1: &str =
        "FE534D4240000100000000000100800000000000000000000200000000000000FFFE000000000000\
         00000000000000000000000000000000000000000000000019000001010000000000000058004A00\
         0000000000000000604806062B0601050502A03E303CA00E300C060A2B06010401823702020AA22A\
         04284E544C4D5353500001000000978208E200000000000000000000000000000000060380250000\
         000F";

    /// Its response (NTLMSSP CHALLENGE), same blog.
    const BLOG_SS1_RESP: &str =
        "FE534D4240000100160000C00100010001000000000000000200000000000000FFFE000000000000\
         190000000010000000000000000000000000000000000000090000004800B300A181B03081ADA003\
         0A0101A10C060A2B06010401823702020AA281970481944E544C4D53535000020000000C000C0038\
         00000015828AE20D1D8BA31179D008000000000000000050005000440000000A0092270000000F53\
         005500540033003100310002000C0053005500540033003100310001000C00530055005400330031\
         00310004000C0053005500540033003100310003000C0053005500540033003100310007000800A1\
         A1F5ADCBAED00100000000";

    #[test]
    fn blog_session_setup_round_trip() {
        let raw = hex::decode(BLOG_SS1).unwrap();
        let req = SessionSetupRequest::decode(&raw).unwrap();
        assert_eq!(req.security_mode, 1);
        assert_eq!(req.capabilities, 1);
        assert_eq!(req.security_buffer.len(), 0x4A);
        let mut out = raw[..HEADER_LEN].to_vec();
        req.encode(&mut out);
        assert_eq!(out, raw);

        let raw = hex::decode(BLOG_SS1_RESP).unwrap();
        let token = &raw[HEADER_LEN + 8..];
        let mut out = raw[..HEADER_LEN].to_vec();
        encode_session_setup_response(&mut out, 0, token);
        assert_eq!(out, raw);
    }

    #[test]
    fn tree_connect_round_trip() {
        let req = TreeConnectRequest {
            flags: 0,
            path: "\\\\127.0.0.1\\Data".into(),
        };
        let mut out = vec![0u8; HEADER_LEN];
        req.encode(&mut out);
        let back = TreeConnectRequest::decode(&out).unwrap();
        assert_eq!(back, req);
        assert_eq!(back.share_name(), "Data");
        out[HEADER_LEN + 4] = 0xFF; // offset outside
        assert!(TreeConnectRequest::decode(&out).is_err());
    }

    #[test]
    fn tree_connect_response_bytes() {
        let mut out = Vec::new();
        TreeConnectResponse {
            share_type: 1,
            share_flags: SHAREFLAG_ENCRYPT_DATA,
            capabilities: 0,
            maximal_access: 0x001F01FF,
        }
        .encode(&mut out);
        assert_eq!(hex::encode(out), "100001000080000000000000ff011f00");
    }
}
