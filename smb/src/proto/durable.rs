//! Durable-handle create contexts (MS-SMB2 2.2.13.2.3–2.2.13.2.12, 2.2.14.2.3–2.2.14.2.12):
//! the requests that make an open survive a lost connection, and the reconnects that
//! reclaim it on a new one.

use super::wire::{Put, Reader};
use super::{FileId, ProtoError};

/// Create context name: durable handle request (v1).
pub const CTX_DURABLE_REQUEST: &[u8] = b"DHnQ";
/// Create context name: durable handle reconnect (v1).
pub const CTX_DURABLE_RECONNECT: &[u8] = b"DHnC";
/// Create context name: durable handle request v2.
pub const CTX_DURABLE_REQUEST_V2: &[u8] = b"DH2Q";
/// Create context name: durable handle reconnect v2.
pub const CTX_DURABLE_RECONNECT_V2: &[u8] = b"DH2C";
/// DH2Q / DH2C flag: a persistent handle (continuously available shares only).
pub const DURABLE_FLAG_PERSISTENT: u32 = 0x0000_0002;

/// SMB2_CREATE_DURABLE_HANDLE_REQUEST_V2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableRequestV2 {
    /// Requested timeout in milliseconds (0: the server's default).
    pub timeout_ms: u32,
    /// Flags (persistent).
    pub flags: u32,
    /// The client's id for this create (replays and reconnects name it).
    pub create_guid: [u8; 16],
}

impl DurableRequestV2 {
    /// Decodes the 32-byte context data.
    pub fn decode(data: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(data);
        let timeout_ms = r.u32()?;
        let flags = r.u32()?;
        r.skip(8)?;
        let create_guid = r.array::<16>()?;
        Ok(Self {
            timeout_ms,
            flags,
            create_guid,
        })
    }
}

/// SMB2_CREATE_DURABLE_HANDLE_RECONNECT (v1): the FileId of the open to reclaim.
pub fn decode_reconnect(data: &[u8]) -> Result<FileId, ProtoError> {
    FileId::decode(&mut Reader::new(data))
}

/// SMB2_CREATE_DURABLE_HANDLE_RECONNECT_V2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableReconnectV2 {
    /// The open to reclaim.
    pub file_id: FileId,
    /// The CreateGuid of its create.
    pub create_guid: [u8; 16],
    /// Flags (persistent).
    pub flags: u32,
}

impl DurableReconnectV2 {
    /// Decodes the 36-byte context data.
    pub fn decode(data: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(data);
        let file_id = FileId::decode(&mut r)?;
        let create_guid = r.array::<16>()?;
        let flags = r.u32()?;
        Ok(Self {
            file_id,
            create_guid,
            flags,
        })
    }
}

/// SMB2_CREATE_DURABLE_HANDLE_RESPONSE (v1): 8 reserved bytes.
pub fn durable_response() -> Vec<u8> {
    vec![0; 8]
}

/// SMB2_CREATE_DURABLE_HANDLE_RESPONSE_V2: the timeout granted and the flags.
pub fn durable_response_v2(timeout_ms: u32, flags: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(8);
    v.put_u32(timeout_ms);
    v.put_u32(flags);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_decode_and_short_ones_fail() {
        let mut d = Vec::new();
        d.put_u32(60_000);
        d.put_u32(0);
        d.extend_from_slice(&[0; 8]);
        d.extend_from_slice(&[7; 16]);
        let q = DurableRequestV2::decode(&d).unwrap();
        assert_eq!((q.timeout_ms, q.create_guid), (60_000, [7; 16]));
        assert!(DurableRequestV2::decode(&d[..31]).is_err());
        let mut c = Vec::new();
        c.put_u64(5);
        c.put_u64(6);
        c.extend_from_slice(&[9; 16]);
        c.put_u32(0);
        let r = DurableReconnectV2::decode(&c).unwrap();
        assert_eq!(r.file_id.persistent, 5);
        assert_eq!(r.create_guid, [9; 16]);
        assert_eq!(decode_reconnect(&c[..16]).unwrap().volatile, 6);
        assert!(decode_reconnect(&c[..15]).is_err());
        assert_eq!(durable_response_v2(1, 2).len(), 8);
    }
}
