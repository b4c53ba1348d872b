//! Fabrics commands: Connect, Property Get/Set, Disconnect (NVMe over Fabrics 1.1 ch. 3).

use super::{get_ascii, put_ascii_nul, Sqe};

/// FCTYPE Property Set.
pub const FCTYPE_PROPERTY_SET: u8 = 0x00;
/// FCTYPE Connect.
pub const FCTYPE_CONNECT: u8 = 0x01;
/// FCTYPE Property Get.
pub const FCTYPE_PROPERTY_GET: u8 = 0x04;
/// FCTYPE Disconnect.
pub const FCTYPE_DISCONNECT: u8 = 0x08;

/// Size of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// Size of an NQN field.
pub const NQN_FIELD_LEN: usize = 256;

/// Property offsets (controller registers).
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1c;
    /// NVM Subsystem Reset.
    pub const NSSR: u32 = 0x20;
}

/// Fields of a Connect command SQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue ID (0 = admin).
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes.
    pub cattr: u8,
    /// Keep alive timeout in ms (admin queue only).
    pub kato: u32,
}

impl ConnectCmd {
    /// Reads the Connect fields from a Fabrics SQE (bytes 40..52).
    pub fn parse(sqe: &Sqe) -> Self {
        ConnectCmd {
            recfmt: sqe.u16_at(40),
            qid: sqe.u16_at(42),
            sqsize: sqe.u16_at(44),
            cattr: sqe.byte(46),
            kato: sqe.cdw(12),
        }
    }

    /// Writes the Connect fields into a Fabrics SQE.
    pub fn write(&self, sqe: &mut Sqe) {
        sqe.set_u16_at(40, self.recfmt);
        sqe.set_u16_at(42, self.qid);
        sqe.set_u16_at(44, self.sqsize);
        sqe.set_byte(46, self.cattr);
        sqe.set_cdw(12, self.kato);
    }
}

/// The 1024-byte Connect data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Requested controller ID (0xFFFF = any, for the dynamic model).
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
}

/// Why Connect data was rejected; carries the byte offset for the IPO field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid Connect data at byte {offset}")]
pub struct ConnectDataError {
    /// Offset of the bad field within the Connect data.
    pub offset: u16,
}

impl ConnectData {
    /// Parses Connect data; NQNs must be NUL-terminated, non-empty UTF-8.
    pub fn parse(b: &[u8]) -> Result<Self, ConnectDataError> {
        let b: &[u8; CONNECT_DATA_LEN] = b.first_chunk().ok_or(ConnectDataError { offset: 0 })?;
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[0..16]);
        // `f`: the NQN field at byte `offset`.
        let nqn = |f: &[u8], offset: u16| -> Result<String, ConnectDataError> {
            if !f.contains(&0) {
                return Err(ConnectDataError { offset });
            }
            let s = get_ascii(f);
            if s.is_empty() || !s.is_ascii() {
                return Err(ConnectDataError { offset });
            }
            Ok(s)
        };
        Ok(ConnectData {
            hostid,
            cntlid: u16::from_le_bytes([b[16], b[17]]),
            subnqn: nqn(&b[256..256 + NQN_FIELD_LEN], 256)?,
            hostnqn: nqn(&b[512..512 + NQN_FIELD_LEN], 512)?,
        })
    }

    /// Encodes Connect data (for initiators).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[0..16].copy_from_slice(&self.hostid);
        b[16..18].copy_from_slice(&self.cntlid.to_le_bytes());
        put_ascii_nul(&mut b[256..256 + NQN_FIELD_LEN - 1], &self.subnqn);
        put_ascii_nul(&mut b[512..512 + NQN_FIELD_LEN - 1], &self.hostnqn);
        Vec::from(b)
    }
}
