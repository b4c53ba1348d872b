//! NVM command set I/O commands: validation into a [`BlockOp`], and its execution
//! against a [`BlockDevice`] (blocking; the transport runs it on a blocking pool).

use std::io;
use std::sync::Arc;

use super::config::{BlockDevice, IoCounters, NamespaceConfig};
use super::iobuf::IoBuf;
use super::limits::*;
use crate::spec::{io_opc, sc, Sqe, Status};

/// A storage operation the queue asks the transport to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockOp {
    /// Read `len` bytes at `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u32,
    },
    /// Write `data` at `offset`.
    Write {
        /// Byte offset.
        offset: u64,
        /// The data (aligned, so a backend may write it in place).
        data: IoBuf,
        /// Force unit access.
        fua: bool,
    },
    /// Make written data durable.
    Flush,
    /// Zero a range (deallocating it when `deallocate`).
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u64,
        /// Whether the host allowed deallocation.
        deallocate: bool,
    },
    /// Deallocate (punch) byte ranges.
    Deallocate {
        /// (offset, len) pairs, already range-checked.
        ranges: Vec<(u64, u64)>,
    },
}

/// A storage request with everything needed to run it off the queue's task.
#[derive(Clone)]
pub struct IoRequest {
    /// Command identifier it completes.
    pub cid: u16,
    /// The device.
    pub device: Arc<dyn BlockDevice>,
    /// The namespace's counters.
    pub counters: Arc<IoCounters>,
    /// The operation.
    pub op: BlockOp,
    /// When the command became ready to run (all its data received), for the latency
    /// the session observer is told: the start of the transport's turn that dispatched
    /// it ([`super::queue::Queue::begin_turn`]).
    pub started: std::time::Instant,
}

impl std::fmt::Debug for IoRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoRequest")
            .field("cid", &self.cid)
            .field("op", &self.op)
            .finish()
    }
}

/// What a finished storage operation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoOutcome {
    /// Data read.
    Read(IoBuf),
    /// The operation completed.
    Done,
}

impl IoRequest {
    /// Runs the operation (blocking). Why here: one implementation for the tokio
    /// transport and the in-memory tests.
    pub fn execute(&self) -> io::Result<IoOutcome> {
        let d = &self.device;
        match &self.op {
            BlockOp::Read { offset, len } => {
                // `read_at` fills all of it or fails (the buffer is then dropped unseen).
                let mut buf = IoBuf::for_overwrite(*len as usize);
                d.read_at(*offset, &mut buf)?;
                Ok(IoOutcome::Read(buf))
            }
            BlockOp::Write { offset, data, fua } => {
                d.write_at(*offset, data, *fua)?;
                Ok(IoOutcome::Done)
            }
            BlockOp::Flush => {
                d.flush()?;
                Ok(IoOutcome::Done)
            }
            BlockOp::WriteZeroes {
                offset,
                len,
                deallocate,
            } => {
                if *deallocate {
                    d.deallocate(*offset, *len)?;
                } else {
                    d.write_zeroes(*offset, *len)?;
                }
                Ok(IoOutcome::Done)
            }
            BlockOp::Deallocate { ranges } => {
                for (o, l) in ranges {
                    d.deallocate(*o, *l)?;
                }
                Ok(IoOutcome::Done)
            }
        }
    }
}

/// Result of validating an I/O command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoPlan {
    /// Needs `len` bytes of host data first (Write, DSM), then [`build_with_data`].
    NeedsData {
        /// Bytes expected.
        len: u32,
    },
    /// Ready to run.
    Run(BlockOp),
    /// Complete immediately with this status (including success for no-ops).
    Complete(Status),
}

fn lba_range(ns: &NamespaceConfig, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
    let end = slba
        .checked_add(nlb)
        .ok_or(Status::generic(sc::LBA_OUT_OF_RANGE))?;
    if end > ns.blocks() {
        return Err(Status::generic(sc::LBA_OUT_OF_RANGE));
    }
    Ok((slba << ns.lba_shift, nlb << ns.lba_shift))
}

fn slba(sqe: &Sqe) -> u64 {
    u64::from(sqe.cdw(10)) | (u64::from(sqe.cdw(11)) << 32)
}

/// Validates an I/O command against its namespace; `sgl_len` is the host buffer size.
pub fn plan(ns: &NamespaceConfig, sqe: &Sqe, sgl_len: u32) -> IoPlan {
    match plan_inner(ns, sqe, sgl_len) {
        Ok(p) => p,
        Err(s) => IoPlan::Complete(s),
    }
}

fn plan_inner(ns: &NamespaceConfig, sqe: &Sqe, sgl_len: u32) -> Result<IoPlan, Status> {
    match sqe.opcode() {
        io_opc::READ | io_opc::WRITE => {
            let nlb = u64::from(sqe.cdw(12) & 0xffff) + 1;
            let (offset, len) = lba_range(ns, slba(sqe), nlb)?;
            if len > u64::from(MAX_TRANSFER) {
                return Err(Status::generic(sc::INVALID_FIELD));
            }
            let len = u32::try_from(len).map_err(|_| Status::generic(sc::INVALID_FIELD))?;
            if len != sgl_len {
                return Err(Status::generic(sc::SGL_LENGTH_INVALID));
            }
            if sqe.opcode() == io_opc::READ {
                Ok(IoPlan::Run(BlockOp::Read { offset, len }))
            } else {
                Ok(IoPlan::NeedsData { len })
            }
        }
        io_opc::FLUSH => Ok(IoPlan::Run(BlockOp::Flush)),
        io_opc::WRITE_ZEROES => {
            let nlb = u64::from(sqe.cdw(12) & 0xffff) + 1;
            let (offset, len) = lba_range(ns, slba(sqe), nlb)?;
            let deallocate = sqe.cdw(12) & (1 << 25) != 0;
            Ok(IoPlan::Run(BlockOp::WriteZeroes {
                offset,
                len,
                deallocate,
            }))
        }
        io_opc::DSM => {
            let nr = (sqe.cdw(10) & 0xff) as usize + 1;
            let need = nr * DSM_RANGE_LEN;
            if (sgl_len as usize) < need {
                return Err(Status::generic(sc::SGL_LENGTH_INVALID));
            }
            // The whole buffer is transferred; only `need` bytes are ranges.
            Ok(IoPlan::NeedsData { len: sgl_len })
        }
        _ => Err(Status::generic(sc::INVALID_OPCODE)),
    }
}

/// Builds the operation of a command that carried data (Write, DSM).
pub fn build_with_data(ns: &NamespaceConfig, sqe: &Sqe, data: IoBuf) -> IoPlan {
    match sqe.opcode() {
        io_opc::WRITE => {
            let nlb = u64::from(sqe.cdw(12) & 0xffff) + 1;
            match lba_range(ns, slba(sqe), nlb) {
                Ok((offset, _)) => IoPlan::Run(BlockOp::Write {
                    offset,
                    data,
                    fua: sqe.cdw(12) & (1 << 30) != 0,
                }),
                Err(s) => IoPlan::Complete(s),
            }
        }
        io_opc::DSM => {
            let nr = ((sqe.cdw(10) & 0xff) as usize + 1).min(MAX_DSM_RANGES);
            let deallocate = sqe.cdw(11) & (1 << 2) != 0;
            if !deallocate {
                // Only attributes (hints): nothing to do.
                return IoPlan::Complete(Status::SUCCESS);
            }
            let mut ranges = Vec::with_capacity(nr);
            let mut rest: &[u8] = &data;
            for _ in 0..nr {
                let Some((r, tail)) = rest.split_first_chunk::<DSM_RANGE_LEN>() else {
                    break;
                };
                rest = tail;
                let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
                if nlb == 0 {
                    continue;
                }
                let mut s = [0u8; 8];
                s.copy_from_slice(&r[8..16]);
                match lba_range(ns, u64::from_le_bytes(s), nlb) {
                    Ok(r) => ranges.push(r),
                    Err(st) => return IoPlan::Complete(st),
                }
            }
            IoPlan::Run(BlockOp::Deallocate { ranges })
        }
        _ => IoPlan::Complete(Status::generic(sc::INVALID_OPCODE)),
    }
}
