//! Every limit the target enforces or advertises, in one place.

/// Max data transfer of one command (MDTS = 8 with 4 KiB pages = 1 MiB). Bounds the
/// buffer one command can make us allocate.
pub const MAX_TRANSFER: u32 = 1 << 20;
/// MDTS as advertised in Identify Controller (2^MDTS 4 KiB pages).
pub const MDTS: u8 = 8;
/// MAXH2CDATA advertised in ICResp: one R2T covers a whole command.
pub const MAX_H2C_DATA: u32 = MAX_TRANSFER;
/// In-capsule data accepted on NVMe/TCP queues: a 128 KiB write (the block layer's
/// usual largest) arrives with its command, so it needs no R2T round trip. Bounds a
/// queue's capsule buffering to [`MAX_QUEUE_ENTRIES`] times this (16 MiB), the same as
/// its R2T buffering ([`MAX_ACTIVE_R2T`] times [`MAX_TRANSFER`]).
pub const MAX_INCAPSULE_DATA_TCP: u32 = 128 * 1024;
/// In-capsule data accepted on NVMe/RDMA queues: every capsule receive buffer is this
/// large and registered up front, so it stays small; larger writes are RDMA READs.
pub const MAX_INCAPSULE_DATA_RDMA: u32 = 16 * 1024;

/// In-capsule data accepted on a queue of transport `trtype` (NVMe-oF TRTYPE).
pub fn max_incapsule_data(trtype: u8) -> u32 {
    if trtype == crate::spec::log::TRTYPE_RDMA {
        MAX_INCAPSULE_DATA_RDMA
    } else {
        MAX_INCAPSULE_DATA_TCP
    }
}
/// Max queue entries (CAP.MQES + 1) for admin and I/O queues.
pub const MAX_QUEUE_ENTRIES: u16 = 128;
/// I/O queues a controller may have.
pub const MAX_IO_QUEUES: u16 = 64;
/// Write commands per queue that may hold an R2T buffer at once; the rest wait.
/// Bounds a queue's write buffering to this many times [`MAX_TRANSFER`].
pub const MAX_ACTIVE_R2T: usize = 16;
/// Read/write buffer bytes a queue may have at the storage layer at once; further
/// commands wait in order. With [`MAX_ACTIVE_R2T`] this bounds a queue's memory.
pub const MAX_INFLIGHT_IO_BYTES: u64 = 16 * MAX_TRANSFER as u64;
/// Outstanding AER commands (AERL + 1).
pub const MAX_AER: usize = 4;
/// Events queued before AERs collect them.
pub const MAX_PENDING_EVENTS: usize = 16;
/// Error Information log entries a controller keeps (ELPE + 1); older ones drop.
pub const ERROR_LOG_ENTRIES: usize = 64;
/// Live controllers per target.
pub const MAX_CONTROLLERS: usize = 1024;
/// Highest controller ID allocated (0xFFF0.. are reserved).
pub const MAX_CNTLID: u16 = 0xffef;
/// Connect data CNTLID meaning "any controller" (dynamic model).
pub const DYNAMIC_CNTLID: u16 = 0xffff;
/// Extra time past KATO before a controller is torn down.
pub const KATO_GRACE_MS: u64 = 5_000;
/// Keep-alive granularity advertised (KAS, 100 ms units).
pub const KAS_100MS: u16 = 10;
/// Largest HPDA (0's based dwords) a host may ask for; keeps PDO within a byte.
pub const MAX_HPDA: u8 = 31;
/// Max DSM ranges (NR is 0's based 8 bits).
pub const MAX_DSM_RANGES: usize = 256;
/// Size of one DSM range.
pub const DSM_RANGE_LEN: usize = 16;
/// Largest log page transfer (NUMD) served.
pub const MAX_LOG_TRANSFER: u32 = 1 << 20;
/// NVMe version reported (1.3.0).
pub const NVME_VERSION: u32 = 0x0001_0300;
/// Most discovery log entries served (subsystems x ports): keeps the log inside
/// [`MAX_LOG_TRANSFER`] with its 1 KiB header.
pub const MAX_DISCOVERY_ENTRIES: usize = (MAX_LOG_TRANSFER as usize / 1024) - 1;
