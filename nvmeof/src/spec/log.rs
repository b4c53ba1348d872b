//! Log page layouts: SMART/health, firmware slot, changed namespace list, discovery log.

use super::{get_ascii, put_ascii_nul};

/// SMART / Health log size.
pub const SMART_LEN: usize = 512;
/// Firmware slot log size.
pub const FW_SLOT_LEN: usize = 512;
/// Changed namespace list size (1024 NSIDs).
pub const CHANGED_NS_LEN: usize = 4096;
/// Size of one error information entry.
pub const ERROR_ENTRY_LEN: usize = 64;
/// Discovery log header size.
pub const DISC_HEADER_LEN: usize = 1024;
/// Discovery log entry size.
pub const DISC_ENTRY_LEN: usize = 1024;

/// Counters reported in the SMART log; why: the target keeps these per namespace with
/// atomics and sums them here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmartCounters {
    /// Bytes read by hosts.
    pub bytes_read: u64,
    /// Bytes written by hosts.
    pub bytes_written: u64,
    /// Read commands completed.
    pub read_commands: u64,
    /// Write commands completed.
    pub write_commands: u64,
    /// Media and data integrity errors (failed backing I/O).
    pub media_errors: u64,
    /// Power-on hours of the target process.
    pub power_on_hours: u64,
    /// Percentage of capacity in use, 0..=100 (reported as "percentage used").
    pub percent_used: u8,
    /// Error information log entries over the controller's life.
    pub error_entries: u64,
}

/// Data units are thousands of 512-byte units, rounded up (NVMe Base 2.0 figure 207).
fn data_units(bytes: u64) -> u128 {
    u128::from(bytes).div_ceil(512_000)
}

impl SmartCounters {
    /// Encodes the 512-byte SMART / Health log page.
    pub fn encode(&self) -> Vec<u8> {
        // An array, so every constant offset below is checked at compile time.
        let mut b = [0u8; SMART_LEN];
        b[3] = 100; // available spare: no spare concept, report full
        b[4] = 10; // available spare threshold
        b[5] = self.percent_used.min(100);
        b[32..48].copy_from_slice(&data_units(self.bytes_read).to_le_bytes());
        b[48..64].copy_from_slice(&data_units(self.bytes_written).to_le_bytes());
        b[64..80].copy_from_slice(&u128::from(self.read_commands).to_le_bytes());
        b[80..96].copy_from_slice(&u128::from(self.write_commands).to_le_bytes());
        b[128..144].copy_from_slice(&u128::from(self.power_on_hours).to_le_bytes());
        b[160..176].copy_from_slice(&u128::from(self.media_errors).to_le_bytes());
        b[176..192].copy_from_slice(&u128::from(self.error_entries).to_le_bytes());
        Vec::from(b)
    }
}

/// Encodes the firmware slot log with `revision` active in slot 1.
pub fn encode_fw_slot(revision: &str) -> Vec<u8> {
    let mut b = [0u8; FW_SLOT_LEN];
    b[0] = 0x01; // AFI: slot 1 active
    super::put_ascii_space(&mut b[8..16], revision);
    Vec::from(b)
}

/// Encodes a changed namespace list; more than 1024 changes report 0xFFFFFFFF first.
pub fn encode_changed_ns(nsids: &[u32]) -> Vec<u8> {
    let mut b = [0u8; CHANGED_NS_LEN];
    if nsids.len() > CHANGED_NS_LEN / 4 {
        b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    } else {
        for (slot, id) in b.chunks_exact_mut(4).zip(nsids) {
            slot.copy_from_slice(&id.to_le_bytes());
        }
    }
    Vec::from(b)
}

/// One Error Information log entry (NVMe Base 2.0 figure 204).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorEntry {
    /// Unique, increasing error count (1-based).
    pub error_count: u64,
    /// Submission queue of the failed command.
    pub sqid: u16,
    /// Its command identifier.
    pub cid: u16,
    /// Status field as in the CQE (phase bit 0).
    pub status: u16,
    /// First LBA of the command, when it had one.
    pub lba: u64,
    /// Namespace of the command.
    pub nsid: u32,
}

impl ErrorEntry {
    /// Encodes the 64-byte entry (transport type TCP, no parameter location).
    pub fn encode(&self) -> [u8; ERROR_ENTRY_LEN] {
        let mut out = [0u8; ERROR_ENTRY_LEN];
        out[0..8].copy_from_slice(&self.error_count.to_le_bytes());
        out[8..10].copy_from_slice(&self.sqid.to_le_bytes());
        out[10..12].copy_from_slice(&self.cid.to_le_bytes());
        out[12..14].copy_from_slice(&self.status.to_le_bytes());
        out[14..16].copy_from_slice(&0xffffu16.to_le_bytes());
        out[16..24].copy_from_slice(&self.lba.to_le_bytes());
        out[24..28].copy_from_slice(&self.nsid.to_le_bytes());
        out[29] = TRTYPE_TCP;
        out
    }
}

/// Transport type TCP.
pub const TRTYPE_TCP: u8 = 3;
/// Transport type RDMA.
pub const TRTYPE_RDMA: u8 = 1;
/// RDMA TSAS: QP service type reliable connected.
pub const RDMA_QPTYPE_CONNECTED: u8 = 1;
/// RDMA TSAS: provider type not specified.
pub const RDMA_PRTYPE_NOT_SPECIFIED: u8 = 1;
/// RDMA TSAS: connection management service RDMA_CM.
pub const RDMA_CMS_RDMA_CM: u8 = 1;
/// Address family IPv4.
pub const ADRFAM_IPV4: u8 = 1;
/// Address family IPv6.
pub const ADRFAM_IPV6: u8 = 2;
/// Subsystem type: NVM subsystem.
pub const SUBTYPE_NVM: u8 = 2;

/// One discovery log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport type.
    pub trtype: u8,
    /// Address family.
    pub adrfam: u8,
    /// Subsystem type.
    pub subtype: u8,
    /// Transport requirements (bit 2: SQ flow control disable supported; 0 = none).
    pub treq: u8,
    /// Port ID.
    pub portid: u16,
    /// Controller ID (0xFFFF: dynamic).
    pub cntlid: u16,
    /// Admin max SQ size.
    pub asqsz: u16,
    /// Transport service ID (TCP port as text).
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Transport address (IP as text).
    pub traddr: String,
}

impl DiscoveryEntry {
    /// Encodes the 1024-byte entry.
    fn encode(&self) -> [u8; DISC_ENTRY_LEN] {
        let mut e = [0u8; DISC_ENTRY_LEN];
        e[0] = self.trtype;
        e[1] = self.adrfam;
        e[2] = self.subtype;
        e[3] = self.treq;
        e[4..6].copy_from_slice(&self.portid.to_le_bytes());
        e[6..8].copy_from_slice(&self.cntlid.to_le_bytes());
        e[8..10].copy_from_slice(&self.asqsz.to_le_bytes());
        put_ascii_nul(&mut e[32..64], &self.trsvcid);
        put_ascii_nul(&mut e[256..512 - 1], &self.subnqn);
        put_ascii_nul(&mut e[512..768 - 1], &self.traddr);
        // TSAS for TCP: SECTYPE 0 (no security). For RDMA: reliable connected QPs,
        // any provider, RDMA_CM connection management, no P_Key.
        if self.trtype == TRTYPE_RDMA {
            e[768] = RDMA_QPTYPE_CONNECTED;
            e[769] = RDMA_PRTYPE_NOT_SPECIFIED;
            e[770] = RDMA_CMS_RDMA_CM;
        }
        e
    }

    /// Decodes an entry (for initiators and tests).
    pub fn parse(e: &[u8]) -> Option<Self> {
        let e: &[u8; DISC_ENTRY_LEN] = e.first_chunk()?;
        Some(DiscoveryEntry {
            trtype: e[0],
            adrfam: e[1],
            subtype: e[2],
            treq: e[3],
            portid: u16::from_le_bytes([e[4], e[5]]),
            cntlid: u16::from_le_bytes([e[6], e[7]]),
            asqsz: u16::from_le_bytes([e[8], e[9]]),
            trsvcid: get_ascii(&e[32..64]),
            subnqn: get_ascii(&e[256..512]),
            traddr: get_ascii(&e[512..768]),
        })
    }
}

/// Encodes a full discovery log page (header + entries).
pub fn encode_discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut header = [0u8; DISC_HEADER_LEN];
    header[0..8].copy_from_slice(&genctr.to_le_bytes());
    header[8..16].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    let mut b = Vec::with_capacity(DISC_HEADER_LEN + entries.len() * DISC_ENTRY_LEN);
    b.extend_from_slice(&header);
    for e in entries {
        b.extend_from_slice(&e.encode());
    }
    b
}

/// Decodes a discovery log page into (genctr, entries) (for initiators and tests).
pub fn decode_discovery_log(b: &[u8]) -> Option<(u64, Vec<DiscoveryEntry>)> {
    let (g, rest) = b.split_first_chunk::<8>()?;
    let numrec = u64::from_le_bytes(*rest.first_chunk::<8>()?);
    let entries = b
        .get(DISC_HEADER_LEN..)?
        .chunks_exact(DISC_ENTRY_LEN)
        .take(usize::try_from(numrec).ok()?)
        .filter_map(DiscoveryEntry::parse)
        .collect();
    Some((u64::from_le_bytes(*g), entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_round_trip() {
        let e = DiscoveryEntry {
            trtype: TRTYPE_TCP,
            adrfam: ADRFAM_IPV4,
            subtype: SUBTYPE_NVM,
            treq: 0,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            trsvcid: "4420".into(),
            subnqn: "nqn.2024-01.io.quarry:a".into(),
            traddr: "127.0.0.1".into(),
        };
        let b = encode_discovery_log(3, std::slice::from_ref(&e));
        assert_eq!(b.len(), 2048);
        let (g, es) = decode_discovery_log(&b).unwrap();
        assert_eq!(g, 3);
        assert_eq!(es, vec![e]);
    }

    #[test]
    fn error_entry_layout() {
        let b = ErrorEntry {
            error_count: 2,
            sqid: 1,
            cid: 9,
            status: 0x8101,
            lba: 77,
            nsid: 3,
        }
        .encode();
        assert_eq!(&b[0..8], &2u64.to_le_bytes());
        assert_eq!(&b[8..16], &[1, 0, 9, 0, 0x01, 0x81, 0xff, 0xff]);
        assert_eq!(&b[16..24], &77u64.to_le_bytes());
        assert_eq!(&b[24..28], &3u32.to_le_bytes());
        assert_eq!(b[29], TRTYPE_TCP);
    }

    #[test]
    fn changed_ns_overflow_reports_all_ones_first() {
        let ids: Vec<u32> = (1..=1025).collect();
        let b = encode_changed_ns(&ids);
        assert_eq!(b.len(), CHANGED_NS_LEN);
        assert_eq!(&b[0..4], &u32::MAX.to_le_bytes());
        assert!(b[4..].iter().all(|&x| x == 0));
        assert_eq!(&encode_changed_ns(&[5])[0..8], &[5, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn smart_units_round_up() {
        let b = SmartCounters {
            bytes_written: 512_001,
            read_commands: 9,
            ..Default::default()
        }
        .encode();
        assert_eq!(b[48], 2);
        assert_eq!(b[64], 9);
    }
}
