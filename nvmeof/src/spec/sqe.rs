//! Submission and completion queue entries (NVMe Base 2.0 sections 4.2 and 4.6).

/// Size of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Size of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// SGL descriptor identifier Linux uses for in-capsule data: Data Block, Offset subtype.
pub const SGL_ID_INCAPSULE: u8 = 0x01;
/// SGL descriptor identifier for data moved by the transport (R2T/C2HData):
/// Transport SGL Data Block, Transport specific subtype A.
pub const SGL_ID_TRANSPORT: u8 = 0x5a;
/// SGL descriptor type of a Keyed SGL Data Block (the high nibble of the identifier),
/// the descriptor NVMe/RDMA hosts use for data the controller moves with RDMA READ/WRITE.
pub const SGL_TYPE_KEYED: u8 = 0x4;
/// Keyed SGL subtype Address: the key stays valid after the command.
pub const SGL_SUBTYPE_ADDRESS: u8 = 0x0;
/// Keyed SGL subtype Invalidate Key: the host asks the controller to invalidate the key
/// (RDMA send with invalidate) when it sends the completion.
pub const SGL_SUBTYPE_INVALIDATE: u8 = 0xf;

/// A Keyed SGL Data Block descriptor: host memory the controller reads or writes with
/// RDMA operations (24-bit length, 32-bit remote key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedSgl {
    /// Remote virtual address.
    pub addr: u64,
    /// Length in bytes (at most 2^24 - 1).
    pub len: u32,
    /// Remote key (rkey) of the host's memory region.
    pub key: u32,
    /// Whether the host asked for the key to be invalidated with the completion.
    pub invalidate: bool,
}

/// A 64-byte SQE kept in wire form; accessors decode fields on demand so a command
/// is never copied into a bigger struct on the data path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe([u8; SQE_LEN]);

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqe")
            .field("opcode", &self.opcode())
            .field("cid", &self.cid())
            .field("nsid", &self.nsid())
            .field("sgl", &self.sgl())
            .finish()
    }
}

/// The first SGL descriptor (SGL1) of an SQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sgl {
    /// Address or offset.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// SGL identifier byte (type << 4 | subtype).
    pub id: u8,
}

impl Sqe {
    /// Wraps raw SQE bytes.
    pub fn from_bytes(b: [u8; SQE_LEN]) -> Self {
        Sqe(b)
    }

    /// A zeroed SQE with opcode and command identifier set (for initiators and tests).
    pub fn new(opcode: u8, cid: u16) -> Self {
        let mut s = Sqe([0; SQE_LEN]);
        s.0[0] = opcode;
        s.set_cid(cid);
        s
    }

    /// Raw bytes.
    pub fn as_bytes(&self) -> &[u8; SQE_LEN] {
        &self.0
    }

    /// Opcode (CDW0 bits 7:0).
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    /// CDW0 flags byte (FUSE, PSDT).
    pub fn flags(&self) -> u8 {
        self.0[1]
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, f: u8) {
        self.0[1] = f;
    }

    /// Command identifier.
    pub fn cid(&self) -> u16 {
        u16::from_le_bytes([self.0[2], self.0[3]])
    }

    /// Sets the command identifier.
    pub fn set_cid(&mut self, cid: u16) {
        self.0[2..4].copy_from_slice(&cid.to_le_bytes());
    }

    /// Namespace ID (for Fabrics commands, byte 4 is FCTYPE instead).
    pub fn nsid(&self) -> u32 {
        super::le32(&self.0, 4)
    }

    /// Sets the namespace ID.
    pub fn set_nsid(&mut self, nsid: u32) {
        self.0[4..8].copy_from_slice(&nsid.to_le_bytes());
    }

    /// Fabrics command type (byte 4 of a Fabrics command).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }

    /// Sets the Fabrics command type.
    pub fn set_fctype(&mut self, t: u8) {
        self.0[4] = t;
    }

    /// Command dword `n` (0..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        if n >= 16 {
            return 0;
        }
        super::le32(&self.0, n * 4)
    }

    /// Sets command dword `n` (10..=15 typically); ignored when out of range.
    pub fn set_cdw(&mut self, n: usize, v: u32) {
        if n >= 16 {
            return;
        }
        if let Some(w) = self.0.get_mut(n * 4..).and_then(<[u8]>::first_chunk_mut) {
            *w = v.to_le_bytes();
        }
    }

    /// SGL1 from DPTR (bytes 24..40). For a keyed descriptor the length is its 24-bit
    /// length field (the key is in [`Sqe::keyed_sgl`]).
    pub fn sgl(&self) -> Sgl {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.0[24..32]);
        let id = self.0[39];
        let len = if id >> 4 == SGL_TYPE_KEYED {
            super::le32(&self.0, 32) & 0x00ff_ffff
        } else {
            super::le32(&self.0, 32)
        };
        Sgl {
            addr: u64::from_le_bytes(a),
            len,
            id,
        }
    }

    /// SGL1 as a Keyed SGL Data Block, when it is one (subtype Address or Invalidate
    /// Key; other subtypes are not keyed data blocks this target understands).
    pub fn keyed_sgl(&self) -> Option<KeyedSgl> {
        let id = self.0[39];
        if id >> 4 != SGL_TYPE_KEYED {
            return None;
        }
        let invalidate = match id & 0xf {
            SGL_SUBTYPE_ADDRESS => false,
            SGL_SUBTYPE_INVALIDATE => true,
            _ => return None,
        };
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.0[24..32]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&self.0[35..39]);
        Some(KeyedSgl {
            addr: u64::from_le_bytes(a),
            len: super::le32(&self.0, 32) & 0x00ff_ffff,
            key: u32::from_le_bytes(k),
            invalidate,
        })
    }

    /// Sets SGL1 to a Keyed SGL Data Block.
    pub fn set_keyed_sgl(&mut self, sgl: KeyedSgl) {
        self.0[24..32].copy_from_slice(&sgl.addr.to_le_bytes());
        self.0[32..35].copy_from_slice(&sgl.len.to_le_bytes()[..3]);
        self.0[35..39].copy_from_slice(&sgl.key.to_le_bytes());
        let sub = if sgl.invalidate {
            SGL_SUBTYPE_INVALIDATE
        } else {
            SGL_SUBTYPE_ADDRESS
        };
        self.0[39] = (SGL_TYPE_KEYED << 4) | sub;
    }

    /// Sets SGL1.
    pub fn set_sgl(&mut self, sgl: Sgl) {
        self.0[24..32].copy_from_slice(&sgl.addr.to_le_bytes());
        self.0[32..36].copy_from_slice(&sgl.len.to_le_bytes());
        self.0[36..39].fill(0);
        self.0[39] = sgl.id;
    }

    /// Byte `i` of the SQE (0 when out of range); Fabrics commands pack fields bytewise.
    pub fn byte(&self, i: usize) -> u8 {
        self.0.get(i).copied().unwrap_or(0)
    }

    /// Little-endian u16 at byte `i`.
    pub fn u16_at(&self, i: usize) -> u16 {
        u16::from_le_bytes([self.byte(i), self.byte(i + 1)])
    }

    /// Sets a byte (ignored when out of range).
    pub fn set_byte(&mut self, i: usize, v: u8) {
        if let Some(b) = self.0.get_mut(i) {
            *b = v;
        }
    }

    /// Sets a little-endian u16 at byte `i`.
    pub fn set_u16_at(&mut self, i: usize, v: u16) {
        let [a, b] = v.to_le_bytes();
        self.set_byte(i, a);
        self.set_byte(i + 1, b);
    }
}

/// Completion status (SCT, SC, DNR) as carried in CQE DW3 bits 31:17.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Status code type.
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do not retry.
    pub dnr: bool,
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status {
        sct: 0,
        sc: 0,
        dnr: false,
    };

    /// Generic command status (SCT 0) with DNR set.
    pub const fn generic(sc: u8) -> Status {
        Status {
            sct: 0,
            sc,
            dnr: true,
        }
    }

    /// Command specific status (SCT 1) with DNR set.
    pub const fn specific(sc: u8) -> Status {
        Status {
            sct: 1,
            sc,
            dnr: true,
        }
    }

    /// Whether this is a success.
    pub fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// Encodes the 16-bit status field (phase tag 0, as fabrics uses).
    pub fn to_u16(self) -> u16 {
        (u16::from(self.sc) << 1) | (u16::from(self.sct & 0x7) << 9) | (u16::from(self.dnr) << 15)
    }

    /// Decodes the 16-bit status field.
    pub fn from_u16(v: u16) -> Self {
        Status {
            sc: ((v >> 1) & 0xff) as u8,
            sct: ((v >> 9) & 0x7) as u8,
            dnr: v & 0x8000 != 0,
        }
    }
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cqe {
    /// Command specific DW0.
    pub dw0: u32,
    /// Command specific DW1.
    pub dw1: u32,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue identifier.
    pub sqid: u16,
    /// Command identifier.
    pub cid: u16,
    /// Status field (see [`Status`]).
    pub status: u16,
}

impl Cqe {
    /// Encodes to wire form.
    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status.to_le_bytes());
        b
    }

    /// Decodes from wire form.
    pub fn from_bytes(b: &[u8; CQE_LEN]) -> Self {
        Cqe {
            dw0: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            dw1: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            sqhd: u16::from_le_bytes([b[8], b[9]]),
            sqid: u16::from_le_bytes([b[10], b[11]]),
            cid: u16::from_le_bytes([b[12], b[13]]),
            status: u16::from_le_bytes([b[14], b[15]]),
        }
    }

    /// Decoded status.
    pub fn status(&self) -> Status {
        Status::from_u16(self.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trip() {
        let s = Status::specific(0x84);
        assert_eq!(s.to_u16(), (0x84 << 1) | (1 << 9) | 0x8000);
        assert_eq!(Status::from_u16(s.to_u16()), s);
    }

    #[test]
    fn keyed_sgl_round_trip_and_length_is_24_bits() {
        let mut s = Sqe::from_bytes([0; SQE_LEN]);
        let k = KeyedSgl {
            addr: 0x1122_3344_5566_7788,
            len: 0x02_0000,
            key: 0xdead_beef,
            invalidate: true,
        };
        s.set_keyed_sgl(k);
        assert_eq!(s.keyed_sgl(), Some(k));
        assert_eq!(s.sgl().len, 0x02_0000);
        assert_eq!(s.sgl().id, 0x4f);
        // Linux's keyed descriptor bytes: addr, 3-byte length, key, type 0x4f.
        assert_eq!(
            &s.as_bytes()[32..40],
            &[0, 0, 2, 0xef, 0xbe, 0xad, 0xde, 0x4f]
        );
        let mut plain = Sqe::from_bytes([0; SQE_LEN]);
        plain.set_sgl(Sgl {
            addr: 0,
            len: 4096,
            id: SGL_ID_INCAPSULE,
        });
        assert_eq!(plain.keyed_sgl(), None);
        // A keyed type with an unknown subtype is not a keyed data block.
        let mut b = *s.as_bytes();
        b[39] = 0x41;
        let odd = Sqe::from_bytes(b);
        assert_eq!(odd.keyed_sgl(), None);
    }

    #[test]
    fn sgl_round_trip() {
        let mut s = Sqe::new(0x01, 7);
        let sgl = Sgl {
            addr: 0,
            len: 4096,
            id: SGL_ID_TRANSPORT,
        };
        s.set_sgl(sgl);
        assert_eq!(s.sgl(), sgl);
        assert_eq!(s.cid(), 7);
        s.set_cdw(12, 0xdead_beef);
        assert_eq!(s.cdw(12), 0xdead_beef);
        assert_eq!(s.cdw(16), 0);
    }
}
