//! The SMB2 TRANSFORM_HEADER (MS-SMB2 2.2.41) in front of every encrypted message. The
//! server only needs its SessionId to pick keys before handing the whole buffer to
//! [`crate::crypto`]; this decoder gives it that without trusting anything else.

use super::wire::Reader;
use super::ProtoError;

/// ProtocolId of a transform header.
pub const TRANSFORM_MAGIC: [u8; 4] = [0xFD, b'S', b'M', b'B'];
/// Transform header length.
pub const TRANSFORM_LEN: usize = 52;

/// The fields of a transform header the server routes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformHeader {
    /// OriginalMessageSize.
    pub original_size: u32,
    /// Flags (3.1.1) / EncryptionAlgorithm (3.0).
    pub flags: u16,
    /// SessionId whose keys decrypt the message.
    pub session_id: u64,
}

/// True when `msg` starts with the transform protocol id.
pub fn is_transform(msg: &[u8]) -> bool {
    msg.get(..4) == Some(&TRANSFORM_MAGIC[..])
}

impl TransformHeader {
    /// Decodes the header and checks OriginalMessageSize against the bytes present.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg);
        if r.array::<4>()? != TRANSFORM_MAGIC {
            return Err(ProtoError::BadMagic);
        }
        r.skip(32)?;
        let original_size = r.u32()?;
        r.skip(2)?;
        let flags = r.u16()?;
        let session_id = r.u64()?;
        let body = msg.len().saturating_sub(TRANSFORM_LEN);
        if usize::try_from(original_size).ok() != Some(body) {
            return Err(ProtoError::Invalid("transform OriginalMessageSize"));
        }
        Ok(Self {
            original_size,
            flags,
            session_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_session_and_size() {
        let mut m = Vec::new();
        m.extend_from_slice(&TRANSFORM_MAGIC);
        m.extend_from_slice(&[0u8; 32]);
        m.extend_from_slice(&3u32.to_le_bytes());
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(&0x55u64.to_le_bytes());
        m.extend_from_slice(b"abc");
        let t = TransformHeader::decode(&m).unwrap();
        assert_eq!((t.original_size, t.flags, t.session_id), (3, 1, 0x55));
        m.push(0);
        assert!(TransformHeader::decode(&m).is_err());
        assert!(TransformHeader::decode(&m[..20]).is_err());
    }
}
