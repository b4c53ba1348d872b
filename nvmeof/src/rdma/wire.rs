//! NVMe/RDMA private data exchanged in the RDMA-CM connection handshake (NVMe over
//! Fabrics RDMA transport binding): the host's request (RECFMT, QID, HRQSIZE, HSQSIZE),
//! the controller's accept (RECFMT, CRQSIZE) and reject (RECFMT, STS).
//!
//! Sans-I/O: byte slices in, byte arrays out, every length and field checked.

use crate::target::limits::MAX_QUEUE_ENTRIES;

/// Length of the request, accept and reject private data this target reads and
/// writes (the request and accept are 32 bytes; the reject carries 4 meaningful bytes
/// and is padded to the same size).
pub const PRIVATE_DATA_LEN: usize = 32;
/// The only record format defined (RECFMT 0).
pub const RECFMT_V0: u16 = 0;
/// Admin queue entries a host may ask for (Linux uses 32).
pub const MAX_ADMIN_QUEUE_ENTRIES: u16 = 32;

/// Reject status codes (STS) of the RDMA_CM_REJECT private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum RejectStatus {
    /// The private data length is invalid.
    InvalidLength = 0x01,
    /// The record format is not supported.
    InvalidRecfmt = 0x02,
    /// The queue ID is invalid.
    InvalidQid = 0x03,
    /// The host send queue size is invalid.
    InvalidHsqsize = 0x04,
    /// The host receive queue size is invalid.
    InvalidHrqsize = 0x05,
    /// The controller has no resources for the queue.
    NoResources = 0x06,
    /// The IRD value is invalid.
    InvalidIrd = 0x07,
    /// The ORD value is invalid.
    InvalidOrd = 0x08,
}

/// The host's RDMA_CM_REQUEST private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue ID the queue pair will carry (0: admin).
    pub qid: u16,
    /// Host receive queue size: completions the host can take at once.
    pub hrqsize: u16,
    /// Host send queue size, 0's based: commands the host may have outstanding - 1.
    pub hsqsize: u16,
    /// Controller ID (newer hosts; 0 or 0xFFFF otherwise).
    pub cntlid: u16,
}

impl CmRequest {
    /// Parses the request private data. RDMA-CM may pad private data, so longer
    /// buffers are accepted; shorter ones are refused.
    pub fn parse(b: &[u8]) -> Result<Self, RejectStatus> {
        let b: &[u8; PRIVATE_DATA_LEN] = b.first_chunk().ok_or(RejectStatus::InvalidLength)?;
        Ok(CmRequest {
            recfmt: u16::from_le_bytes([b[0], b[1]]),
            qid: u16::from_le_bytes([b[2], b[3]]),
            hrqsize: u16::from_le_bytes([b[4], b[5]]),
            hsqsize: u16::from_le_bytes([b[6], b[7]]),
            cntlid: u16::from_le_bytes([b[8], b[9]]),
        })
    }

    /// Encodes the request (for tests and initiators).
    pub fn encode(&self) -> [u8; PRIVATE_DATA_LEN] {
        let mut b = [0u8; PRIVATE_DATA_LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.qid.to_le_bytes());
        b[4..6].copy_from_slice(&self.hrqsize.to_le_bytes());
        b[6..8].copy_from_slice(&self.hsqsize.to_le_bytes());
        b[8..10].copy_from_slice(&self.cntlid.to_le_bytes());
        b
    }

    /// Checks the request against this target's limits and returns the queue sizes to
    /// provision, or the reject status to answer with.
    pub fn validate(&self) -> Result<QueueSizes, RejectStatus> {
        if self.recfmt != RECFMT_V0 {
            return Err(RejectStatus::InvalidRecfmt);
        }
        if self.qid > crate::target::limits::MAX_IO_QUEUES {
            return Err(RejectStatus::InvalidQid);
        }
        let max_entries = if self.qid == 0 {
            MAX_ADMIN_QUEUE_ENTRIES
        } else {
            MAX_QUEUE_ENTRIES
        };
        // HSQSIZE is 0's based; a queue holds at least two entries.
        let sq_entries = u32::from(self.hsqsize) + 1;
        if sq_entries < 2 || sq_entries > u32::from(max_entries) {
            return Err(RejectStatus::InvalidHsqsize);
        }
        // The host must be able to take a completion for every command it may send.
        if self.hrqsize == 0 || self.hrqsize > max_entries {
            return Err(RejectStatus::InvalidHrqsize);
        }
        Ok(QueueSizes {
            recv_entries: sq_entries as u16,
            send_entries: self.hrqsize,
        })
    }
}

/// Queue sizes derived from a valid [`CmRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSizes {
    /// Receive buffers to post for command capsules (HSQSIZE + 1).
    pub recv_entries: u16,
    /// Completions the host can receive at once (HRQSIZE).
    pub send_entries: u16,
}

/// The controller's RDMA_CM_ACCEPT private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmAccept {
    /// Record format (0).
    pub recfmt: u16,
    /// Controller receive queue size: capsules the controller can take at once.
    pub crqsize: u16,
}

impl CmAccept {
    /// Encodes the accept private data.
    pub fn encode(&self) -> [u8; PRIVATE_DATA_LEN] {
        let mut b = [0u8; PRIVATE_DATA_LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.crqsize.to_le_bytes());
        b
    }

    /// Parses accept private data (for tests and initiators).
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b: &[u8; 4] = b.first_chunk()?;
        Some(CmAccept {
            recfmt: u16::from_le_bytes([b[0], b[1]]),
            crqsize: u16::from_le_bytes([b[2], b[3]]),
        })
    }
}

/// Encodes RDMA_CM_REJECT private data with status `sts`.
pub fn encode_reject(sts: RejectStatus) -> [u8; PRIVATE_DATA_LEN] {
    let mut b = [0u8; PRIVATE_DATA_LEN];
    b[0..2].copy_from_slice(&RECFMT_V0.to_le_bytes());
    b[2..4].copy_from_slice(&(sts as u16).to_le_bytes());
    b
}

/// Decodes reject private data into (RECFMT, STS) (for tests and initiators).
pub fn parse_reject(b: &[u8]) -> Option<(u16, u16)> {
    let b: &[u8; 4] = b.first_chunk()?;
    Some((
        u16::from_le_bytes([b[0], b[1]]),
        u16::from_le_bytes([b[2], b[3]]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request Linux's nvme-rdma sends for an I/O queue of 128 entries, qid 1.
    const LINUX_IO_REQ: [u8; 32] = [
        0, 0, 1, 0, 0x80, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0,
    ];

    #[test]
    fn linux_io_queue_request_is_accepted() {
        let r = CmRequest::parse(&LINUX_IO_REQ).unwrap();
        assert_eq!(
            r,
            CmRequest {
                recfmt: 0,
                qid: 1,
                hrqsize: 128,
                hsqsize: 127,
                cntlid: 0
            }
        );
        assert_eq!(r.encode(), LINUX_IO_REQ);
        assert_eq!(
            r.validate(),
            Ok(QueueSizes {
                recv_entries: 128,
                send_entries: 128
            })
        );
    }

    #[test]
    fn admin_queue_is_bounded_to_32_entries() {
        let ok = CmRequest {
            recfmt: 0,
            qid: 0,
            hrqsize: 32,
            hsqsize: 31,
            cntlid: 0xffff,
        };
        assert_eq!(ok.validate().unwrap().recv_entries, 32);
        let big = CmRequest { hsqsize: 32, ..ok };
        assert_eq!(big.validate(), Err(RejectStatus::InvalidHsqsize));
        let rq = CmRequest { hrqsize: 33, ..ok };
        assert_eq!(rq.validate(), Err(RejectStatus::InvalidHrqsize));
    }

    #[test]
    fn bad_requests_get_their_reject_status() {
        assert_eq!(
            CmRequest::parse(&LINUX_IO_REQ[..31]),
            Err(RejectStatus::InvalidLength)
        );
        assert_eq!(CmRequest::parse(&[]), Err(RejectStatus::InvalidLength));
        let base = CmRequest::parse(&LINUX_IO_REQ).unwrap();
        let cases = [
            (CmRequest { recfmt: 1, ..base }, RejectStatus::InvalidRecfmt),
            (CmRequest { qid: 65, ..base }, RejectStatus::InvalidQid),
            (
                CmRequest { hsqsize: 0, ..base },
                RejectStatus::InvalidHsqsize,
            ),
            (
                CmRequest {
                    hsqsize: 128,
                    ..base
                },
                RejectStatus::InvalidHsqsize,
            ),
            (
                CmRequest {
                    hsqsize: 0xffff,
                    ..base
                },
                RejectStatus::InvalidHsqsize,
            ),
            (
                CmRequest { hrqsize: 0, ..base },
                RejectStatus::InvalidHrqsize,
            ),
            (
                CmRequest {
                    hrqsize: 129,
                    ..base
                },
                RejectStatus::InvalidHrqsize,
            ),
        ];
        for (req, want) in cases {
            assert_eq!(req.validate(), Err(want), "{req:?}");
        }
        // Padding beyond 32 bytes is ignored.
        let mut long = LINUX_IO_REQ.to_vec();
        long.extend_from_slice(&[0xaa; 24]);
        assert_eq!(CmRequest::parse(&long), Ok(base));
    }

    #[test]
    fn accept_and_reject_encode() {
        let a = CmAccept {
            recfmt: 0,
            crqsize: 128,
        }
        .encode();
        assert_eq!(&a[..4], &[0, 0, 0x80, 0]);
        assert!(a[4..].iter().all(|&b| b == 0));
        assert_eq!(
            CmAccept::parse(&a),
            Some(CmAccept {
                recfmt: 0,
                crqsize: 128
            })
        );
        assert_eq!(CmAccept::parse(&a[..3]), None);
        let r = encode_reject(RejectStatus::NoResources);
        assert_eq!(&r[..4], &[0, 0, 6, 0]);
        assert_eq!(parse_reject(&r), Some((0, 6)));
        assert_eq!(parse_reject(&r[..2]), None);
    }
}
