//! Identify data structures (NVMe Base 2.0 section 5.17.2; NVMe over Fabrics fields).

use super::{put_ascii_nul, put_ascii_space};

/// Size of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;
/// CNS: Identify Namespace.
pub const CNS_NAMESPACE: u8 = 0x00;
/// CNS: Identify Controller.
pub const CNS_CONTROLLER: u8 = 0x01;
/// CNS: Active Namespace ID list.
pub const CNS_ACTIVE_NS_LIST: u8 = 0x02;
/// CNS: Namespace Identification Descriptor list.
pub const CNS_NS_DESC_LIST: u8 = 0x03;
/// CNS: I/O command set specific Identify Controller.
pub const CNS_CS_CONTROLLER: u8 = 0x06;
/// Most NSIDs an active namespace list holds.
pub const MAX_NS_LIST: usize = 1024;

/// Controller type: I/O controller.
pub const CNTRLTYPE_IO: u8 = 1;
/// Controller type: discovery controller.
pub const CNTRLTYPE_DISCOVERY: u8 = 2;

/// The values a target reports in Identify Controller; why a struct: the controller
/// fills it from its configuration and limits, the encoder owns the byte layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerInfo {
    /// PCI vendor ID (0 for a software target without one).
    pub vid: u16,
    /// Serial number (20 ASCII chars).
    pub serial: String,
    /// Model number (40 ASCII chars).
    pub model: String,
    /// Firmware revision (8 ASCII chars).
    pub firmware: String,
    /// Max data transfer size as a power of two of 4 KiB pages.
    pub mdts: u8,
    /// Controller ID.
    pub cntlid: u16,
    /// Version (VS register value).
    pub version: u32,
    /// Optional async events supported (bit 8: namespace attribute notices).
    pub oaes: u32,
    /// Controller attributes.
    pub ctratt: u32,
    /// Controller type.
    pub cntrltype: u8,
    /// AERL, 0's based.
    pub aerl: u8,
    /// Error log page entries, 0's based.
    pub elpe: u8,
    /// Keep alive granularity in 100 ms units (0 = keep alive unsupported).
    pub kas: u16,
    /// Max outstanding commands per queue.
    pub maxcmd: u16,
    /// Number of namespaces (highest NSID allowed).
    pub nn: u32,
    /// Optional NVM commands supported.
    pub oncs: u16,
    /// Volatile write cache present.
    pub vwc: bool,
    /// SGL support bits.
    pub sgls: u32,
    /// Subsystem NQN.
    pub subnqn: String,
    /// I/O command capsule size in 16-byte units.
    pub ioccsz: u32,
    /// I/O response capsule size in 16-byte units.
    pub iorcsz: u32,
    /// Multi-controller capability (CMIC).
    pub cmic: u8,
    /// Log page attributes (bit 2: extended data for Get Log Page).
    pub lpa: u8,
}

/// ONCS bit: Dataset Management.
pub const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit: Write Zeroes.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
/// OAES bit: Namespace Attribute Notices.
pub const OAES_NS_ATTR: u32 = 1 << 8;

impl ControllerInfo {
    /// Encodes the 4096-byte Identify Controller structure.
    pub fn encode(&self) -> Vec<u8> {
        // An array, so every constant offset below is checked at compile time.
        let mut b = [0u8; IDENTIFY_LEN];
        b[0..2].copy_from_slice(&self.vid.to_le_bytes());
        b[2..4].copy_from_slice(&self.vid.to_le_bytes());
        put_ascii_space(&mut b[4..24], &self.serial);
        put_ascii_space(&mut b[24..64], &self.model);
        put_ascii_space(&mut b[64..72], &self.firmware);
        b[72] = 6; // RAB: recommended arbitration burst
        b[76] = self.cmic;
        b[77] = self.mdts;
        b[78..80].copy_from_slice(&self.cntlid.to_le_bytes());
        b[80..84].copy_from_slice(&self.version.to_le_bytes());
        b[92..96].copy_from_slice(&self.oaes.to_le_bytes());
        b[96..100].copy_from_slice(&self.ctratt.to_le_bytes());
        b[111] = self.cntrltype;
        b[258] = 3; // ACL: abort command limit, 0's based
        b[259] = self.aerl;
        b[260] = 0x03; // FRMW: slot 1 read-only, one slot
        b[261] = self.lpa;
        b[262] = self.elpe;
        b[320..322].copy_from_slice(&self.kas.to_le_bytes());
        b[512] = 0x66; // SQES: 64-byte entries
        b[513] = 0x44; // CQES: 16-byte entries
        b[514..516].copy_from_slice(&self.maxcmd.to_le_bytes());
        b[516..520].copy_from_slice(&self.nn.to_le_bytes());
        b[520..522].copy_from_slice(&self.oncs.to_le_bytes());
        b[525] = u8::from(self.vwc);
        b[536..540].copy_from_slice(&self.sgls.to_le_bytes());
        put_ascii_nul(&mut b[768..768 + 255], &self.subnqn);
        b[1792..1796].copy_from_slice(&self.ioccsz.to_le_bytes());
        b[1796..1800].copy_from_slice(&self.iorcsz.to_le_bytes());
        // ICDOFF 0, FCATT 0 (dynamic controller model), MSDBD 1, OFCS bit 0 (Disconnect).
        b[1803] = 1;
        b[1804..1806].copy_from_slice(&1u16.to_le_bytes());
        // Power state 0: max power 0 (not reported), entry/exit latency 0.
        Vec::from(b)
    }
}

/// The values reported in Identify Namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Size in logical blocks.
    pub nsze: u64,
    /// Capacity in logical blocks.
    pub ncap: u64,
    /// Blocks in use (thin provisioning).
    pub nuse: u64,
    /// log2 of the logical block size.
    pub lbads: u8,
    /// Namespace shared by several controllers.
    pub shared: bool,
    /// Namespace GUID.
    pub nguid: [u8; 16],
}

impl NamespaceInfo {
    /// Encodes the 4096-byte Identify Namespace structure.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = [0u8; IDENTIFY_LEN];
        b[0..8].copy_from_slice(&self.nsze.to_le_bytes());
        b[8..16].copy_from_slice(&self.ncap.to_le_bytes());
        b[16..24].copy_from_slice(&self.nuse.to_le_bytes());
        b[24] = 0x01; // NSFEAT: thin provisioning
        b[25] = 0; // NLBAF: one format
        b[26] = 0; // FLBAS: format 0
        b[30] = u8::from(self.shared); // NMIC
        b[33] = 0x01 | 0x08; // DLFEAT: deallocated reads zeroes, Write Zeroes may deallocate
        b[104..120].copy_from_slice(&self.nguid);
        // LBAF0: no metadata, LBADS, relative performance best.
        b[130] = self.lbads;
        Vec::from(b)
    }
}

/// Encodes the Namespace Identification Descriptor list (NGUID and UUID).
pub fn encode_ns_descriptors(nguid: &[u8; 16], uuid: &[u8; 16]) -> Vec<u8> {
    let mut b = [0u8; IDENTIFY_LEN];
    // NIDT 2 = NGUID, NIDL 16.
    b[0] = 0x02;
    b[1] = 16;
    b[4..20].copy_from_slice(nguid);
    // NIDT 3 = UUID, NIDL 16.
    b[20] = 0x03;
    b[21] = 16;
    b[24..40].copy_from_slice(uuid);
    // NIDT 4 = Command Set Identifier, NIDL 1, CSI 0 (NVM).
    b[40] = 0x04;
    b[41] = 1;
    Vec::from(b)
}

/// Encodes an active namespace ID list of the NSIDs greater than `after`, ascending.
pub fn encode_ns_list(nsids: impl IntoIterator<Item = u32>, after: u32) -> Vec<u8> {
    let mut ids: Vec<u32> = nsids.into_iter().filter(|&n| n > after).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut b = vec![0u8; IDENTIFY_LEN];
    for (slot, id) in b.chunks_exact_mut(4).zip(ids.iter().take(MAX_NS_LIST)) {
        slot.copy_from_slice(&id.to_le_bytes());
    }
    b
}

/// Decodes an active namespace ID list (for initiators).
pub fn decode_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map_while(|c| <[u8; 4]>::try_from(c).ok())
        .map(u32::from_le_bytes)
        .take_while(|&n| n != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ns_list_sorted_and_filtered() {
        let b = encode_ns_list([5, 1, 3, 3], 1);
        assert_eq!(decode_ns_list(&b), vec![3, 5]);
    }

    #[test]
    fn namespace_layout() {
        let b = NamespaceInfo {
            nsze: 256,
            ncap: 256,
            nuse: 10,
            lbads: 12,
            shared: true,
            nguid: [7; 16],
        }
        .encode();
        assert_eq!(&b[0..8], &256u64.to_le_bytes());
        assert_eq!(b[130], 12);
        assert_eq!(b[30], 1);
        assert_eq!(&b[104..120], &[7; 16]);
    }
}
