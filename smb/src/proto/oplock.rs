//! Oplocks and leases on the wire: the lease create context (MS-SMB2 2.2.13.2.8/10,
//! 2.2.14.2.10/11), OPLOCK_BREAK acknowledgments (2.2.24), and the server's break
//! notifications and break responses (2.2.23, 2.2.25).

use super::header::HEADER_LEN;
use super::wire::{Put, Reader};
use super::{FileId, ProtoError};

/// RequestedOplockLevel / OplockLevel: none.
pub const OPLOCK_LEVEL_NONE: u8 = 0x00;
/// Level II (shared read caching).
pub const OPLOCK_LEVEL_II: u8 = 0x01;
/// Exclusive (read and write caching).
pub const OPLOCK_LEVEL_EXCLUSIVE: u8 = 0x08;
/// Batch (read, write and handle caching).
pub const OPLOCK_LEVEL_BATCH: u8 = 0x09;
/// A lease is requested in the create context instead.
pub const OPLOCK_LEVEL_LEASE: u8 = 0xFF;

/// Lease state bit: read caching.
pub const LEASE_READ: u32 = 0x01;
/// Lease state bit: handle caching.
pub const LEASE_HANDLE: u32 = 0x02;
/// Lease state bit: write caching.
pub const LEASE_WRITE: u32 = 0x04;

/// Create context name of a lease request or response.
pub const CTX_LEASE: &[u8] = b"RqLs";
/// Lease context flag (v2): ParentLeaseKey is set.
pub const LEASE_FLAG_PARENT_KEY_SET: u32 = 0x04;
/// Lease flag of a CREATE response: a break of the lease is in progress (the state given
/// is the one before the break).
pub const LEASE_FLAG_BREAK_IN_PROGRESS: u32 = 0x02;
/// Lease break notification flag: the client must acknowledge.
pub const LEASE_BREAK_ACK_REQUIRED: u32 = 0x01;

/// A lease request create context (v1: 32 bytes, v2: 52 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRequest {
    /// Client-chosen lease key.
    pub key: [u8; 16],
    /// Requested state (`LEASE_*` bits).
    pub state: u32,
    /// 1 or 2.
    pub version: u8,
    /// v2: the parent directory's lease key, when flagged.
    pub parent_key: Option<[u8; 16]>,
    /// v2: the client's epoch.
    pub epoch: u16,
}

fn key16(r: &mut Reader<'_>) -> Result<[u8; 16], ProtoError> {
    let b = r.bytes(16)?;
    let mut k = [0u8; 16];
    k.copy_from_slice(b);
    Ok(k)
}

impl LeaseRequest {
    /// Decodes a lease request context's data.
    pub fn decode(data: &[u8]) -> Result<LeaseRequest, ProtoError> {
        let version = match data.len() {
            32..=51 => 1,
            52.. => 2,
            _ => return Err(ProtoError::Truncated),
        };
        let mut r = Reader::new(data);
        let key = key16(&mut r)?;
        let state = r.u32()?;
        let flags = r.u32()?;
        r.skip(8)?; // LeaseDuration
        let (parent_key, epoch) = if version == 2 {
            let parent = key16(&mut r)?;
            let epoch = r.u16()?;
            (
                (flags & LEASE_FLAG_PARENT_KEY_SET != 0).then_some(parent),
                epoch,
            )
        } else {
            (None, 0)
        };
        Ok(LeaseRequest {
            key,
            state,
            version,
            parent_key,
            epoch,
        })
    }

    /// Appends the context data (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.key);
        out.put_u32(self.state);
        out.put_u32(if self.parent_key.is_some() {
            LEASE_FLAG_PARENT_KEY_SET
        } else {
            0
        });
        out.put_u64(0);
        if self.version == 2 {
            out.extend_from_slice(&self.parent_key.unwrap_or_default());
            out.put_u16(self.epoch);
            out.put_u16(0);
        }
    }
}

/// The lease response create context's data for `req` granted `state` at `epoch`.
pub fn lease_response(req: &LeaseRequest, state: u32, epoch: u16, breaking: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(52);
    out.extend_from_slice(&req.key);
    out.put_u32(state);
    let parent = if req.version == 2 && req.parent_key.is_some() {
        LEASE_FLAG_PARENT_KEY_SET
    } else {
        0
    };
    let breaking = if breaking {
        LEASE_FLAG_BREAK_IN_PROGRESS
    } else {
        0
    };
    out.put_u32(parent | breaking);
    out.put_u64(0);
    if req.version == 2 {
        out.extend_from_slice(&req.parent_key.unwrap_or_default());
        out.put_u16(epoch);
        out.put_u16(0);
    }
    out
}

/// An OPLOCK_BREAK request: the client acknowledging a break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakAck {
    /// Oplock break acknowledgment (StructureSize 24).
    Oplock {
        /// The level the client lowered to.
        level: u8,
        /// The open.
        file_id: FileId,
    },
    /// Lease break acknowledgment (StructureSize 36).
    Lease {
        /// The lease.
        key: [u8; 16],
        /// The state the client lowered to.
        state: u32,
    },
}

impl BreakAck {
    /// Decodes the body of an OPLOCK_BREAK request.
    pub fn decode(msg: &[u8]) -> Result<BreakAck, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        match r.u16()? {
            24 => {
                let level = r.u8()?;
                r.skip(5)?;
                let file_id = FileId::decode(&mut r)?;
                Ok(BreakAck::Oplock { level, file_id })
            }
            36 => {
                r.skip(6)?;
                let key = key16(&mut r)?;
                let state = r.u32()?;
                r.skip(8)?;
                Ok(BreakAck::Lease { key, state })
            }
            _ => Err(ProtoError::BadStructureSize("OPLOCK_BREAK acknowledgment")),
        }
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            BreakAck::Oplock { level, file_id } => encode_oplock_break(out, *level, *file_id),
            BreakAck::Lease { key, state } => encode_lease_break_response(out, key, *state),
        }
    }
}

/// Appends an oplock break notification or response body (24 bytes: the same layout).
pub fn encode_oplock_break(out: &mut Vec<u8>, level: u8, file_id: FileId) {
    out.put_u16(24);
    out.put_u8(level);
    out.put_u8(0);
    out.put_u32(0);
    file_id.encode(out);
}

/// Appends a lease break notification body (44 bytes).
pub fn encode_lease_break_notification(
    out: &mut Vec<u8>,
    key: &[u8; 16],
    epoch: u16,
    ack_required: bool,
    current: u32,
    new: u32,
) {
    out.put_u16(44);
    out.put_u16(epoch);
    out.put_u32(if ack_required {
        LEASE_BREAK_ACK_REQUIRED
    } else {
        0
    });
    out.extend_from_slice(key);
    out.put_u32(current);
    out.put_u32(new);
    out.put_u32(0); // BreakReason
    out.put_u32(0); // AccessMaskHint
    out.put_u32(0); // ShareMaskHint
}

/// Appends a lease break response (and acknowledgment) body (36 bytes).
pub fn encode_lease_break_response(out: &mut Vec<u8>, key: &[u8; 16], state: u32) {
    out.put_u16(36);
    out.put_u16(0);
    out.put_u32(0);
    out.extend_from_slice(key);
    out.put_u32(state);
    out.put_u64(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_contexts_round_trip_both_versions() {
        for req in [
            LeaseRequest {
                key: [7; 16],
                state: LEASE_READ | LEASE_HANDLE,
                version: 1,
                parent_key: None,
                epoch: 0,
            },
            LeaseRequest {
                key: [9; 16],
                state: LEASE_READ | LEASE_WRITE | LEASE_HANDLE,
                version: 2,
                parent_key: Some([3; 16]),
                epoch: 5,
            },
        ] {
            let mut b = Vec::new();
            req.encode(&mut b);
            assert_eq!(b.len(), if req.version == 1 { 32 } else { 52 });
            assert_eq!(LeaseRequest::decode(&b).unwrap(), req);
            let resp = lease_response(&req, LEASE_READ, 6, false);
            assert_eq!(resp.len(), b.len());
            assert_eq!(&resp[..16], &req.key);
            assert_eq!(
                u32::from_le_bytes(resp[16..20].try_into().unwrap()),
                LEASE_READ
            );
        }
        assert!(LeaseRequest::decode(&[0; 31]).is_err());
    }

    #[test]
    fn acknowledgments_decode_by_structure_size() {
        for ack in [
            BreakAck::Oplock {
                level: OPLOCK_LEVEL_II,
                file_id: FileId {
                    persistent: 1,
                    volatile: 2,
                },
            },
            BreakAck::Lease {
                key: [4; 16],
                state: LEASE_READ,
            },
        ] {
            let mut msg = vec![0u8; HEADER_LEN];
            ack.encode(&mut msg);
            assert_eq!(BreakAck::decode(&msg).unwrap(), ack);
        }
        let mut bad = vec![0u8; HEADER_LEN];
        bad.extend_from_slice(&[25, 0, 0, 0]);
        assert!(BreakAck::decode(&bad).is_err());
        assert!(BreakAck::decode(&[0; 10]).is_err());
    }

    #[test]
    fn notification_sizes_match_the_spec() {
        let mut b = Vec::new();
        encode_lease_break_notification(&mut b, &[1; 16], 2, true, 7, 3);
        assert_eq!(b.len(), 44);
        let mut b = Vec::new();
        encode_oplock_break(&mut b, OPLOCK_LEVEL_II, FileId::ALL_ONES);
        assert_eq!(b.len(), 24);
        let mut b = Vec::new();
        encode_lease_break_response(&mut b, &[1; 16], 1);
        assert_eq!(b.len(), 36);
    }
}
