//! One NVMe-oF queue (an NVMe/TCP connection or an NVMe/RDMA queue pair) as a sans-I/O
//! state machine. The command handling (Connect, admin, I/O, completions) is the same
//! for both transports; only how capsules arrive and how data and completions leave
//! differ ([`Wire`]).
//!
//! Input: decoded PDUs ([`Queue::handle_pdu`], TCP) or received capsules
//! ([`Queue::handle_capsule`] and [`Queue::data_fetched`], RDMA), storage completions
//! ([`Queue::io_done`]), ticks ([`Queue::tick`]) and wake-ups for controller events
//! ([`Queue::poll_events`]), each with the time in ms since the target started.
//! Output: [`Output`] values drained with [`Queue::poll_output`]: PDU bytes to send,
//! storage operations to run, or the instruction to close.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashMap;

use super::admin::{self, AdminCtx, AdminResult, ListenerInfo};
use super::config::{IoCounters, TargetConfig};
use super::controller::IoKind;
use super::controller::*;
use super::io::{self as nvm_io, BlockOp, IoOutcome, IoPlan, IoRequest};
use super::iobuf::IoBuf;
use super::limits::*;
use crate::spec::fabrics::{self, ConnectCmd, ConnectData, CONNECT_DATA_LEN};
use crate::spec::{
    admin_opc, sc, Cqe, KeyedSgl, Sqe, Status, SGL_ID_INCAPSULE, SGL_ID_TRANSPORT, SGL_TYPE_KEYED,
    SQE_LEN,
};
use crate::tcp::{self, DecodeContext, Digests, IcResp, Pdu, PduError, TermReqFes, PFV_1_0};

/// What the transport must do next.
#[derive(Debug)]
pub enum Output {
    /// Send these bytes (one or more whole PDUs), in order.
    Send(Vec<u8>),
    /// Send `head`, then `data`, then `tail`, in order: a read's C2HData written from
    /// the buffer the storage filled (no copy into the PDU). `head` is the PDU up to
    /// its data; `tail` its data digest and the CapsuleResp, when there are any.
    SendData {
        /// PDU header, header digest and padding.
        head: Vec<u8>,
        /// The data.
        data: IoBuf,
        /// What follows the data: digest, CapsuleResp (either may be absent).
        tail: Vec<u8>,
    },
    /// Run this storage operation and report it with [`Queue::io_done`].
    Io(IoRequest),
    /// Flush what was sent, then close the connection.
    Close,
    /// RDMA only: read the host memory `sgl` describes (RDMA READ) and report it with
    /// [`Queue::data_fetched`].
    FetchData {
        /// Command the data belongs to.
        cid: u16,
        /// Host memory to read (its whole length).
        sgl: KeyedSgl,
    },
    /// RDMA only: write `data` (if not empty) to the host memory `sgl` describes (RDMA
    /// WRITE), then send `cqe`, invalidating `invalidate` with the send when set.
    Respond {
        /// The completion to send.
        cqe: Cqe,
        /// Controller-to-host data (empty for none).
        data: Vec<u8>,
        /// Where `data` goes (the command's keyed SGL).
        sgl: Option<KeyedSgl>,
        /// Remote key to invalidate with the completion (send with invalidate).
        invalidate: Option<u32>,
    },
}

/// How a queue's capsules travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// NVMe/TCP PDUs: ICReq/ICResp first, R2T/H2CData and C2HData for data.
    Tcp,
    /// NVMe/RDMA: capsules in RDMA SENDs, data by RDMA READ/WRITE on keyed SGLs.
    Rdma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitIcReq,
    AwaitConnect,
    Live,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    None,
    H2c,
    C2h,
}

/// A command capsule's in-capsule data: in the received PDU, or already in a buffer of
/// its own (read there by the transport, [`Queue::capsule_placed`]).
enum InCapsule<'a> {
    Borrowed(&'a [u8]),
    Owned(IoBuf),
}

impl std::ops::Deref for InCapsule<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            InCapsule::Borrowed(d) => d,
            InCapsule::Owned(b) => b,
        }
    }
}

enum CmdState {
    /// Waiting for an R2T slot.
    WaitR2t { len: u32 },
    /// R2T sent, collecting H2CData.
    Receiving { buf: IoBuf, ttag: u16 },
    /// Storage or AER in progress.
    Running,
    /// RDMA READ of the host's data in progress.
    Fetching,
}

struct Cmd {
    sqe: Sqe,
    state: CmdState,
}

/// One queue's state.
pub struct Queue {
    target: Arc<Target>,
    listener: ListenerInfo,
    peer: String,
    wire: Wire,
    /// RDMA: the Connect command waiting for its data to be read from the host.
    pending_connect: Option<Sqe>,
    /// RDMA: the command being handled that is not (yet) in flight, so a completion
    /// for it (a refused command, the Connect) still finds its keyed SGL to invalidate.
    current: Option<Sqe>,
    phase: Phase,
    digests: Digests,
    hpda: u8,
    ctrl: Option<Arc<Controller>>,
    qid: u16,
    sq_entries: u16,
    sqhd: u16,
    sqflow_disabled: bool,
    /// Commands by CID. Keyed with FxHash: the map holds at most `sq_entries` (128)
    /// commands, so a host choosing colliding CIDs can slow only its own lookups, and
    /// SipHash was the larger part of each insert and remove.
    inflight: FxHashMap<u16, Cmd>,
    r2t_active: usize,
    r2t_waiting: VecDeque<u16>,
    io_bytes: u64,
    io_waiting: VecDeque<IoRequest>,
    next_ttag: u16,
    cfg_gen: u64,
    cfg: Arc<TargetConfig>,
    out: VecDeque<Output>,
    /// The time of the transport's current turn ([`Queue::begin_turn`]): the start of
    /// every command dispatched in it and the end of every I/O finished in it. One clock
    /// read per turn instead of two per command; a read of the clock is a system call
    /// where the clock source has no vDSO path (HPET, as in the qemu guest lab).
    turn_at: Instant,
}

/// SQ flow control disable (Connect CATTR bit 2).
const CATTR_DISABLE_SQFLOW: u8 = 1 << 2;

impl Queue {
    /// A new connection from `peer` accepted on `listener`.
    pub fn new(target: Arc<Target>, listener: ListenerInfo, peer: String) -> Self {
        Self::with_wire(target, listener, peer, Wire::Tcp)
    }

    /// A new NVMe/RDMA queue pair from `peer` (the RDMA-CM exchange already done):
    /// the first capsule must be a Connect.
    pub fn new_rdma(target: Arc<Target>, listener: ListenerInfo, peer: String) -> Self {
        Self::with_wire(target, listener, peer, Wire::Rdma)
    }

    fn with_wire(target: Arc<Target>, listener: ListenerInfo, peer: String, wire: Wire) -> Self {
        let cfg = target.config();
        let cfg_gen = target.config_generation();
        Queue {
            target,
            listener,
            peer,
            wire,
            pending_connect: None,
            current: None,
            phase: if wire == Wire::Rdma {
                Phase::AwaitConnect
            } else {
                Phase::AwaitIcReq
            },
            digests: Digests::NONE,
            hpda: 0,
            ctrl: None,
            qid: 0,
            sq_entries: 0,
            sqhd: 0,
            sqflow_disabled: false,
            inflight: FxHashMap::default(),
            r2t_active: 0,
            r2t_waiting: VecDeque::new(),
            io_bytes: 0,
            io_waiting: VecDeque::new(),
            next_ttag: 0,
            cfg_gen,
            cfg,
            out: VecDeque::new(),
            turn_at: Instant::now(),
        }
    }

    /// How to decode the next PDU from this host.
    pub fn decode_context(&self) -> DecodeContext {
        DecodeContext {
            digests: self.digests,
            data_alignment: 0,
            max_pdu_len: tcp::MAX_PDU_LEN,
        }
    }

    /// Next output, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The controller once connected.
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.ctrl.as_ref()
    }

    /// Queue ID once connected.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Whether the queue has closed.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Reports a framing/decoding error from the transport: terminate the connection.
    pub fn decode_error(&mut self, err: &PduError, header: &[u8]) {
        tracing::debug!(peer = %self.peer, %err, "bad PDU");
        match err.fes() {
            Some((fes, fei)) => self.fatal(fes, fei, header),
            None => self.close(),
        }
    }

    fn fatal(&mut self, fes: TermReqFes, fei: u32, header: &[u8]) {
        if self.phase == Phase::Closed {
            return;
        }
        let mut b = Vec::new();
        // Before the IC exchange there is no connection to terminate: just close. RDMA
        // has no termination request: the queue pair is disconnected.
        if self.phase != Phase::AwaitIcReq && self.wire == Wire::Tcp {
            tcp::encode_term_req(&mut b, false, fes as u16, fei, header);
            self.out.push_back(Output::Send(b));
        }
        self.close();
    }

    fn close(&mut self) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Closed;
            self.out.push_back(Output::Close);
        }
    }

    /// The connection went away: release the queue (and the controller for an admin queue).
    pub fn on_disconnect(&mut self) {
        if let Some(c) = self.ctrl.take() {
            if self.qid == 0 {
                self.target.remove_controller(c.cntlid);
            } else {
                c.admin().io_queues.remove(&self.qid);
            }
        }
        self.phase = Phase::Closed;
    }

    /// Periodic check: keep-alive expiry and controller teardown.
    pub fn tick(&mut self, now_ms: u64) {
        let Some(c) = self.ctrl.clone() else { return };
        if c.is_dead() {
            self.close();
            return;
        }
        if self.qid == 0 && c.keep_alive_expired(now_ms) {
            tracing::info!(peer = %self.peer, cntlid = c.cntlid, "keep-alive timeout, tearing down controller");
            self.target.remove_controller(c.cntlid);
            self.close();
        }
    }

    /// Delivers queued asynchronous events to outstanding AERs (admin queue only).
    pub fn poll_events(&mut self) {
        if self.qid != 0 || self.phase != Phase::Live {
            return;
        }
        let Some(c) = self.ctrl.clone() else { return };
        if c.is_dead() {
            self.close();
            return;
        }
        loop {
            let (cid, ev) = {
                let mut a = c.admin();
                if a.aer_cids.is_empty() || a.events.is_empty() {
                    break;
                }
                (a.aer_cids.remove(0), a.events.remove(0))
            };
            self.complete(cid, Status::SUCCESS, ev.dw0, 0, &[]);
        }
    }

    fn refresh_config(&mut self) {
        let g = self.target.config_generation();
        if g != self.cfg_gen {
            self.cfg = self.target.config();
            self.cfg_gen = g;
        }
    }

    /// What every PDU from the host does first: false if the queue is closed (the PDU is
    /// ignored); else the controller's keep-alive timer restarts.
    fn pdu_arrived(&mut self, now_ms: u64) -> bool {
        if self.phase == Phase::Closed {
            return false;
        }
        if let Some(c) = &self.ctrl {
            c.touch(now_ms);
        }
        true
    }

    /// Handles one decoded PDU from the host.
    pub fn handle_pdu(&mut self, pdu: Pdu<'_>, header: &[u8], now_ms: u64) {
        if !self.pdu_arrived(now_ms) {
            return;
        }
        match (self.phase, pdu) {
            (Phase::AwaitIcReq, Pdu::IcReq(r)) => {
                if r.pfv != PFV_1_0 {
                    return self.fatal(TermReqFes::UnsupportedParameter, 8, header);
                }
                if r.hpda > MAX_HPDA {
                    return self.fatal(TermReqFes::UnsupportedParameter, 10, header);
                }
                self.hpda = r.hpda;
                self.digests = Digests::from_dgst(r.dgst);
                let mut b = Vec::new();
                tcp::encode_icresp(
                    &mut b,
                    &IcResp {
                        pfv: PFV_1_0,
                        cpda: 0,
                        dgst: self.digests.dgst(),
                        maxh2cdata: MAX_H2C_DATA,
                    },
                );
                self.out.push_back(Output::Send(b));
                self.phase = Phase::AwaitConnect;
            }
            (Phase::AwaitIcReq, _) => self.fatal(TermReqFes::PduSequenceError, 0, header),
            (_, Pdu::H2cTermReq(t)) => {
                tracing::info!(peer = %self.peer, fes = t.fes, fei = t.fei, "host terminated connection");
                self.close();
            }
            (_, Pdu::CapsuleCmd(c)) => {
                self.on_capsule(c.sqe, InCapsule::Borrowed(c.data), header, now_ms)
            }
            (Phase::Live, Pdu::H2cData(d)) => self.on_h2c_data(d, header, now_ms),
            _ => self.fatal(TermReqFes::PduSequenceError, 0, header),
        }
    }

    /// RDMA: handles one received command capsule (SQE + in-capsule data).
    pub fn handle_capsule(&mut self, capsule: &[u8], now_ms: u64) {
        if self.phase == Phase::Closed {
            return;
        }
        let Some(head) = capsule.get(..SQE_LEN) else {
            tracing::debug!(peer = %self.peer, len = capsule.len(), "short capsule");
            return self.close();
        };
        let mut raw = [0u8; SQE_LEN];
        raw.copy_from_slice(head);
        let sqe = Sqe::from_bytes(raw);
        if let Some(c) = &self.ctrl {
            c.touch(now_ms);
        }
        let data = capsule.get(SQE_LEN..).unwrap_or_default();
        self.current = Some(sqe);
        self.on_capsule(sqe, InCapsule::Borrowed(data), head, now_ms);
        self.current = None;
    }

    /// RDMA: the host data of command `cid` (requested by [`Output::FetchData`]) has
    /// been read, or could not be (`None`: the queue pair failed and closes).
    pub fn data_fetched(&mut self, cid: u16, data: Option<IoBuf>, now_ms: u64) {
        if self.phase == Phase::Closed {
            return;
        }
        let Some(data) = data else {
            return self.close();
        };
        if self.phase == Phase::AwaitConnect {
            match self.pending_connect.take() {
                Some(sqe) if sqe.cid() == cid => {
                    self.current = Some(sqe);
                    self.connect(&sqe, &data, now_ms);
                    self.current = None;
                }
                _ => self.close(),
            }
            return;
        }
        match self.inflight.get_mut(&cid) {
            Some(cmd) if matches!(cmd.state, CmdState::Fetching) => {
                cmd.state = CmdState::Running;
                self.dispatch(cid, data, now_ms);
            }
            _ => self.close(),
        }
    }

    /// Whether `id` names data the transport moves itself (not in the capsule).
    fn transport_sgl(&self, id: u8) -> bool {
        match self.wire {
            Wire::Tcp => id == SGL_ID_TRANSPORT,
            Wire::Rdma => id >> 4 == SGL_TYPE_KEYED,
        }
    }

    fn advance_sqhd(&mut self) {
        if self.sq_entries > 0 {
            self.sqhd = (self.sqhd + 1) % self.sq_entries;
        } else {
            self.sqhd = self.sqhd.wrapping_add(1);
        }
    }

    fn on_capsule(&mut self, sqe: Sqe, in_capsule: InCapsule<'_>, header: &[u8], now_ms: u64) {
        let data: &[u8] = &in_capsule;
        let cid = sqe.cid();
        self.advance_sqhd();
        if self.phase == Phase::AwaitConnect {
            if sqe.opcode() == admin_opc::FABRICS && sqe.fctype() == fabrics::FCTYPE_CONNECT {
                // NVMe/RDMA hosts send the admin queue's Connect data by reference.
                if let (Wire::Rdma, Some(k)) = (self.wire, sqe.keyed_sgl()) {
                    if self.pending_connect.is_some() || (k.len as usize) < CONNECT_DATA_LEN {
                        return self.respond(cid, Status::generic(sc::COMMAND_SEQUENCE), 0, 0);
                    }
                    self.pending_connect = Some(sqe);
                    self.out.push_back(Output::FetchData {
                        cid,
                        sgl: KeyedSgl {
                            len: CONNECT_DATA_LEN as u32,
                            ..k
                        },
                    });
                    return;
                }
                self.connect(&sqe, data, now_ms);
            } else {
                self.respond(cid, Status::generic(sc::COMMAND_SEQUENCE), 0, 0);
            }
            return;
        }
        if self.inflight.contains_key(&cid) {
            // A reused CID is a host bug we cannot track safely.
            return self.fatal(TermReqFes::InvalidHeaderField, 10, header);
        }
        if self.inflight.len() >= usize::from(self.sq_entries) {
            return self.fatal(TermReqFes::DataTransferLimitExceeded, 0, header);
        }
        let sgl = sqe.sgl();
        let dir = self.direction(&sqe);
        // Commands with no transfer may carry any SGL length 0; data only when H2C.
        match dir {
            Dir::H2c if sgl.len > 0 => {
                if sgl.len > MAX_TRANSFER {
                    return self.respond(cid, Status::generic(sc::INVALID_FIELD), 0, 0);
                }
                match sgl.id {
                    SGL_ID_INCAPSULE => {
                        let start = usize::try_from(sgl.addr).unwrap_or(usize::MAX);
                        let end = start.saturating_add(sgl.len as usize);
                        match data.get(start..end) {
                            // The limit this listener's Identify advertised (IOCCSZ).
                            Some(d) if sgl.len <= max_incapsule_data(self.listener.trtype) => {
                                let d = match in_capsule {
                                    // Placed by the transport: all of it is the data.
                                    InCapsule::Owned(b) if start == 0 && end == b.len() => b,
                                    _ => IoBuf::copy_from(d),
                                };
                                self.inflight.insert(
                                    cid,
                                    Cmd {
                                        sqe,
                                        state: CmdState::Running,
                                    },
                                );
                                self.dispatch(cid, d, now_ms);
                            }
                            _ => self.respond(cid, Status::generic(sc::SGL_OFFSET_INVALID), 0, 0),
                        }
                    }
                    id if self.transport_sgl(id) => {
                        if !data.is_empty() {
                            return self.respond(cid, Status::generic(sc::INVALID_FIELD), 0, 0);
                        }
                        // Validate before soliciting (TCP) or reading (RDMA) the host's
                        // data so a bad write costs no buffer and no transfer.
                        if let Some(st) = self.precheck(&sqe) {
                            return self.respond(cid, st, 0, 0);
                        }
                        let state = match (self.wire, sqe.keyed_sgl()) {
                            (Wire::Tcp, _) => CmdState::WaitR2t { len: sgl.len },
                            (Wire::Rdma, Some(k)) => {
                                self.out.push_back(Output::FetchData { cid, sgl: k });
                                CmdState::Fetching
                            }
                            (Wire::Rdma, None) => {
                                return self.respond(
                                    cid,
                                    Status::generic(sc::SGL_TYPE_INVALID),
                                    0,
                                    0,
                                );
                            }
                        };
                        let tcp = matches!(state, CmdState::WaitR2t { .. });
                        self.inflight.insert(cid, Cmd { sqe, state });
                        if tcp {
                            self.r2t_waiting.push_back(cid);
                            self.pump_r2t();
                        }
                    }
                    _ => self.respond(cid, Status::generic(sc::SGL_TYPE_INVALID), 0, 0),
                }
            }
            _ => {
                if !data.is_empty() {
                    return self.respond(cid, Status::generic(sc::INVALID_FIELD), 0, 0);
                }
                if dir == Dir::C2h && sgl.len > 0 && !self.transport_sgl(sgl.id) {
                    return self.respond(cid, Status::generic(sc::SGL_TYPE_INVALID), 0, 0);
                }
                self.inflight.insert(
                    cid,
                    Cmd {
                        sqe,
                        state: CmdState::Running,
                    },
                );
                self.dispatch(cid, IoBuf::default(), now_ms);
            }
        }
    }

    fn direction(&self, sqe: &Sqe) -> Dir {
        let bits = if sqe.opcode() == admin_opc::FABRICS {
            sqe.fctype() & 0x3
        } else {
            sqe.opcode() & 0x3
        };
        match bits {
            1 => Dir::H2c,
            2 => Dir::C2h,
            _ => Dir::None,
        }
    }

    /// Cheap checks on a command that wants data, before any buffer is allocated.
    fn precheck(&mut self, sqe: &Sqe) -> Option<Status> {
        if self.qid == 0 {
            // No admin command of ours takes solicited data.
            return Some(Status::generic(sc::INVALID_FIELD));
        }
        self.refresh_config();
        let ctrl = self.ctrl.as_ref()?;
        let sub = self.cfg.subsystem(&ctrl.subnqn)?;
        let Some(ns) = sub.namespace(sqe.nsid()) else {
            return Some(Status::generic(sc::INVALID_NS));
        };
        match nvm_io::plan(ns, sqe, sqe.sgl().len) {
            IoPlan::Complete(s) => Some(s),
            _ => None,
        }
    }

    fn pump_r2t(&mut self) {
        while self.r2t_active < MAX_ACTIVE_R2T {
            let Some(cid) = self.r2t_waiting.pop_front() else {
                return;
            };
            let Some(cmd) = self.inflight.get_mut(&cid) else {
                continue;
            };
            let CmdState::WaitR2t { len } = cmd.state else {
                continue;
            };
            let ttag = self.next_ttag;
            self.next_ttag = self.next_ttag.wrapping_add(1);
            cmd.state = CmdState::Receiving {
                buf: IoBuf::with_capacity(len as usize),
                ttag,
            };
            self.r2t_active += 1;
            let mut b = Vec::new();
            tcp::encode_r2t(
                &mut b,
                &tcp::R2t {
                    cccid: cid,
                    ttag,
                    r2to: 0,
                    r2tl: len,
                },
                self.digests,
            );
            self.out.push_back(Output::Send(b));
        }
    }

    fn on_h2c_data(&mut self, d: tcp::DataPdu<'_>, header: &[u8], now_ms: u64) {
        match self.h2c_buffer(d.cccid, d.ttag, d.datao, d.data.len()) {
            // Fits: `h2c_buffer` checked the room.
            Ok(buf) => {
                buf.extend_from_slice(d.data);
            }
            Err((fes, fei)) => return self.fatal(fes, fei, header),
        }
        self.after_h2c_data(d.cccid, d.flags, header, now_ms);
    }

    /// The buffer of the command an H2CData PDU (`cccid`, `ttag`, `datao`, `len` data
    /// bytes) belongs to, if the PDU is the next one that command expects and its data
    /// fits; else the termination request (FES, FEI) it earns.
    fn h2c_buffer(
        &mut self,
        cccid: u16,
        ttag: u16,
        datao: u32,
        len: usize,
    ) -> Result<&mut IoBuf, (TermReqFes, u32)> {
        let Some(cmd) = self.inflight.get_mut(&cccid) else {
            return Err((TermReqFes::InvalidHeaderField, 8));
        };
        let CmdState::Receiving { buf, ttag: want } = &mut cmd.state else {
            return Err((TermReqFes::PduSequenceError, 0));
        };
        if *want != ttag {
            return Err((TermReqFes::InvalidHeaderField, 10));
        }
        if datao as usize != buf.len() {
            return Err((TermReqFes::DataTransferOutOfRange, 12));
        }
        // The buffer's capacity is the command's length: data past it is refused.
        let fits = buf.len().saturating_add(len) <= buf.capacity();
        if len > MAX_H2C_DATA as usize || !fits {
            return Err((TermReqFes::DataTransferOutOfRange, 16));
        }
        Ok(buf)
    }

    /// After an H2CData PDU's data went into its command's buffer: checks LAST_PDU
    /// against the data received and runs the command once its data is complete.
    fn after_h2c_data(&mut self, cccid: u16, flags: u8, header: &[u8], now_ms: u64) {
        let Some(cmd) = self.inflight.get_mut(&cccid) else {
            return;
        };
        let total = cmd.sqe.sgl().len as usize;
        let CmdState::Receiving { buf, .. } = &mut cmd.state else {
            return;
        };
        let last = flags & tcp::FLAG_LAST_PDU != 0;
        let complete = buf.len() == total;
        if last != complete {
            return self.fatal(TermReqFes::PduSequenceError, 1, header);
        }
        if complete {
            let data = std::mem::take(buf);
            cmd.state = CmdState::Running;
            self.r2t_active = self.r2t_active.saturating_sub(1);
            self.dispatch(cccid, data, now_ms);
            self.pump_r2t();
        }
    }

    /// Lends the transport the buffer an H2CData PDU's data goes into, so that it reads
    /// the data from the socket straight into it (no copy of a whole buffered PDU): `Some`
    /// only when [`Queue::handle_pdu`] would take this PDU's data, with the buffer holding
    /// the data received so far. On `None` the transport passes the complete PDU to
    /// `handle_pdu` as usual, which reports whatever is wrong with it.
    pub fn lend_h2c_buffer(&mut self, head: &tcp::DataHead) -> Option<IoBuf> {
        let tcp::HeadOf::H2cData { cccid, ttag, datao } = head.of else {
            return None;
        };
        if self.phase != Phase::Live {
            return None;
        }
        let buf = self.h2c_buffer(cccid, ttag, datao, head.data_len).ok()?;
        Some(std::mem::take(buf))
    }

    /// Takes back a buffer lent by [`Queue::lend_h2c_buffer`] with the PDU's data (and its
    /// digest, if any, verified) appended, and goes on as [`Queue::handle_pdu`] does after
    /// taking an H2CData PDU's data. `header`: the PDU's header bytes, for error reports.
    pub fn h2c_data_placed(
        &mut self,
        head: &tcp::DataHead,
        data: IoBuf,
        header: &[u8],
        now_ms: u64,
    ) {
        let tcp::HeadOf::H2cData { cccid, .. } = head.of else {
            return;
        };
        if !self.pdu_arrived(now_ms) {
            return;
        }
        // The command may have ended while its data was read (the queue was torn down).
        let Some(cmd) = self.inflight.get_mut(&cccid) else {
            return self.fatal(TermReqFes::InvalidHeaderField, 8, header);
        };
        let CmdState::Receiving { buf, .. } = &mut cmd.state else {
            return self.fatal(TermReqFes::PduSequenceError, 0, header);
        };
        *buf = data;
        self.after_h2c_data(cccid, head.flags, header, now_ms);
    }

    /// A command capsule whose in-capsule data the transport read straight into `data`
    /// (digest verified): handled as [`Queue::handle_pdu`] handles the same capsule, the
    /// data taken as it is instead of copied.
    pub fn capsule_placed(&mut self, sqe: Sqe, data: IoBuf, header: &[u8], now_ms: u64) {
        if !self.pdu_arrived(now_ms) {
            return;
        }
        if self.phase == Phase::AwaitIcReq {
            return self.fatal(TermReqFes::PduSequenceError, 0, header);
        }
        self.on_capsule(sqe, InCapsule::Owned(data), header, now_ms);
    }

    /// Runs a command whose data (if any) is complete.
    fn dispatch(&mut self, cid: u16, data: IoBuf, now_ms: u64) {
        let Some(cmd) = self.inflight.get(&cid) else {
            return;
        };
        let sqe = cmd.sqe;
        let Some(ctrl) = self.ctrl.clone() else {
            return self.respond(cid, Status::generic(sc::COMMAND_SEQUENCE), 0, 0);
        };
        if sqe.opcode() == admin_opc::FABRICS {
            return self.fabrics(&ctrl, &sqe, now_ms);
        }
        if !ctrl.is_ready() {
            return self.respond(cid, Status::generic(sc::COMMAND_SEQUENCE), 0, 0);
        }
        if self.qid == 0 {
            self.refresh_config();
            let cfg = self.cfg.clone();
            let ctx = AdminCtx {
                target: &self.target,
                ctrl: &ctrl,
                cfg: &cfg,
                now_ms,
                listener: &self.listener,
            };
            match admin::execute(&ctx, &sqe, &data) {
                AdminResult::Deferred => {
                    self.poll_events();
                }
                AdminResult::Complete {
                    status,
                    dw0,
                    dw1,
                    data,
                } => {
                    let n = data.len().min(sqe.sgl().len as usize);
                    self.complete(cid, status, dw0, dw1, data.get(..n).unwrap_or_default());
                }
            }
            return;
        }
        self.io_command(&ctrl, cid, &sqe, data);
    }

    fn io_command(&mut self, ctrl: &Controller, cid: u16, sqe: &Sqe, data: IoBuf) {
        self.refresh_config();
        let cfg = self.cfg.clone();
        let Some(ns) = cfg
            .subsystem(&ctrl.subnqn)
            .and_then(|s| s.namespace(sqe.nsid()))
        else {
            let st = if nvm_io_opcode_known(sqe.opcode()) {
                Status::generic(sc::INVALID_NS)
            } else {
                Status::generic(sc::INVALID_OPCODE)
            };
            return self.respond(cid, st, 0, 0);
        };
        let plan = if self.direction(sqe) == Dir::H2c && sqe.sgl().len > 0 {
            match nvm_io::plan(ns, sqe, sqe.sgl().len) {
                IoPlan::NeedsData { len } if len as usize == data.len() => {
                    nvm_io::build_with_data(ns, sqe, data)
                }
                IoPlan::NeedsData { .. } => {
                    IoPlan::Complete(Status::generic(sc::SGL_LENGTH_INVALID))
                }
                other => other,
            }
        } else {
            nvm_io::plan(ns, sqe, sqe.sgl().len)
        };
        match plan {
            IoPlan::Run(op) => {
                self.io_waiting.push_back(IoRequest {
                    cid,
                    device: ns.device.clone(),
                    counters: ns.counters.clone(),
                    op,
                    started: self.turn_at,
                });
                self.pump_io();
            }
            IoPlan::Complete(s) => self.respond(cid, s, 0, 0),
            IoPlan::NeedsData { .. } => {
                self.respond(cid, Status::generic(sc::SGL_LENGTH_INVALID), 0, 0)
            }
        }
    }

    /// Starts waiting storage operations while the queue's data budget allows; one
    /// always runs so a single maximal command cannot stall.
    fn pump_io(&mut self) {
        while let Some(req) = self.io_waiting.front() {
            let cost = io_cost(&req.op);
            if self.io_bytes > 0 && self.io_bytes + cost > MAX_INFLIGHT_IO_BYTES {
                return;
            }
            let Some(req) = self.io_waiting.pop_front() else {
                return;
            };
            self.io_bytes += cost;
            self.out.push_back(Output::Io(req));
        }
    }

    /// Starts a turn of the transport's loop at `at`, read once for everything the turn
    /// handles: the commands it dispatches start then, and the I/O it reports finished
    /// ends then (for the latency the controller keeps).
    pub fn begin_turn(&mut self, at: Instant) {
        self.turn_at = at;
    }

    /// Reports a finished storage operation.
    pub fn io_done(&mut self, req: &IoRequest, result: io::Result<IoOutcome>) {
        if self.phase == Phase::Closed {
            return;
        }
        let took = self.turn_at.saturating_duration_since(req.started);
        self.io_bytes = self.io_bytes.saturating_sub(io_cost(&req.op));
        self.pump_io();
        let k: &IoCounters = &req.counters;
        match result {
            Ok(IoOutcome::Read(data)) => {
                IoCounters::add(&k.bytes_read, data.len() as u64);
                IoCounters::add(&k.read_commands, 1);
                if let Some(c) = &self.ctrl {
                    c.account(data.len() as u64, 0);
                    c.io_completed(IoKind::Read, took, true);
                }
                self.complete_read(req.cid, data);
            }
            Ok(IoOutcome::Done) => {
                if let BlockOp::Write { data, .. } = &req.op {
                    IoCounters::add(&k.bytes_written, data.len() as u64);
                    IoCounters::add(&k.write_commands, 1);
                    if let Some(c) = &self.ctrl {
                        c.account(0, data.len() as u64);
                    }
                }
                if let Some(c) = &self.ctrl {
                    c.io_completed(IoKind::of(&req.op), took, true);
                }
                self.respond(req.cid, Status::SUCCESS, 0, 0);
            }
            Err(e) => {
                tracing::warn!(peer = %self.peer, cid = req.cid, error = %e, "backing I/O failed");
                IoCounters::add(&k.media_errors, 1);
                if let Some(c) = &self.ctrl {
                    c.io_completed(IoKind::of(&req.op), took, false);
                }
                self.respond(req.cid, Status::generic(sc::INTERNAL), 0, 0);
            }
        }
    }

    fn fabrics(&mut self, ctrl: &Controller, sqe: &Sqe, now_ms: u64) {
        let cid = sqe.cid();
        let _ = now_ms;
        match sqe.fctype() {
            fabrics::FCTYPE_PROPERTY_GET if self.qid == 0 => {
                let (st, v) = admin::property_get(ctrl, sqe);
                self.respond(cid, st, v as u32, (v >> 32) as u32);
            }
            fabrics::FCTYPE_PROPERTY_SET if self.qid == 0 => {
                let st = admin::property_set(ctrl, sqe);
                self.respond(cid, st, 0, 0);
            }
            fabrics::FCTYPE_DISCONNECT => {
                self.respond(cid, Status::SUCCESS, 0, 0);
                self.close();
            }
            fabrics::FCTYPE_CONNECT => {
                self.respond(cid, Status::generic(sc::COMMAND_SEQUENCE), 0, 0);
            }
            _ => self.respond(cid, Status::generic(sc::INVALID_FIELD), 0, 0),
        }
    }

    fn connect(&mut self, sqe: &Sqe, data: &[u8], now_ms: u64) {
        let cid = sqe.cid();
        let cmd = ConnectCmd::parse(sqe);
        let invalid = |offset: u16, in_data: bool| {
            (
                Status::specific(sc::CONNECT_INVALID_PARAM),
                u32::from(offset) | if in_data { 1 << 16 } else { 0 },
            )
        };
        let result: Result<(Arc<Controller>, u16), (Status, u32)> = (|| {
            if cmd.recfmt != 0 {
                return Err((Status::specific(0x80), 0));
            }
            let sgl = sqe.sgl();
            let by_reference = self.wire == Wire::Rdma && sgl.id >> 4 == SGL_TYPE_KEYED;
            if (sgl.id != SGL_ID_INCAPSULE && !by_reference)
                || (sgl.len as usize) < CONNECT_DATA_LEN
            {
                return Err(invalid(24, false));
            }
            let cd = ConnectData::parse(data).map_err(|e| invalid(e.offset, true))?;
            if cmd.sqsize == 0 || cmd.sqsize >= MAX_QUEUE_ENTRIES {
                return Err(invalid(44, false));
            }
            let ctrl = if cmd.qid == 0 {
                self.target
                    .create_controller(
                        &cd.subnqn,
                        &cd.hostnqn,
                        cd.hostid,
                        cd.cntlid,
                        cmd.kato,
                        now_ms,
                        &self.peer,
                    )
                    .map_err(|e| match e {
                        ConnectError::InvalidParam { offset, data } => invalid(offset, data),
                        ConnectError::InvalidHost => {
                            (Status::specific(sc::CONNECT_INVALID_HOST), 0)
                        }
                        ConnectError::Busy => (Status::specific(sc::CONNECT_CTRL_BUSY), 0),
                    })?
            } else {
                let c = self
                    .target
                    .find_controller(&cd.subnqn, &cd.hostnqn, &cd.hostid, cd.cntlid)
                    .ok_or_else(|| invalid(16, true))?;
                if c.kind != ControllerKind::Io {
                    return Err(invalid(42, false));
                }
                if !c.is_ready() {
                    return Err((Status::generic(sc::COMMAND_SEQUENCE), 0));
                }
                let mut a = c.admin();
                let granted = a.io_queues_granted.unwrap_or(MAX_IO_QUEUES);
                if cmd.qid > granted || !a.io_queues.insert(cmd.qid) {
                    drop(a);
                    return Err(invalid(42, false));
                }
                drop(a);
                c
            };
            Ok((ctrl, cmd.qid))
        })();
        match result {
            Ok((ctrl, qid)) => {
                let cntlid = ctrl.cntlid;
                tracing::info!(peer = %self.peer, cntlid, qid, subnqn = %ctrl.subnqn, hostnqn = %ctrl.hostnqn, "queue connected");
                self.qid = qid;
                self.sq_entries = cmd.sqsize + 1;
                self.sqflow_disabled = cmd.cattr & CATTR_DISABLE_SQFLOW != 0;
                self.ctrl = Some(ctrl);
                self.phase = Phase::Live;
                self.respond(cid, Status::SUCCESS, u32::from(cntlid), 0);
            }
            Err((st, dw0)) => {
                tracing::info!(peer = %self.peer, qid = cmd.qid, status = ?st, "connect refused");
                self.respond(cid, st, dw0, 0);
            }
        }
    }

    fn respond(&mut self, cid: u16, status: Status, dw0: u32, dw1: u32) {
        self.complete(cid, status, dw0, dw1, &[]);
    }

    /// Completes a successful read on TCP with its data sent from `data` itself
    /// ([`Output::SendData`]); RDMA and empty reads take [`Queue::complete`].
    fn complete_read(&mut self, cid: u16, data: IoBuf) {
        if self.wire == Wire::Rdma || data.is_empty() {
            return self.complete(cid, Status::SUCCESS, 0, 0, &data);
        }
        self.inflight.remove(&cid);
        let cqe = self.cqe(cid, Status::SUCCESS, 0, 0);
        let (head, tail) = self.c2h_pieces(&cqe, &data, self.sqflow_disabled);
        self.out.push_back(Output::SendData { head, data, tail });
    }

    /// A successful TCP answer with `data` as two pieces around the data: the C2HData
    /// up to its data, then its data digest and the CapsuleResp (left out when the
    /// C2HData's SUCCESS flag, `success_flag`, stands for it).
    fn c2h_pieces(&self, cqe: &Cqe, data: &[u8], success_flag: bool) -> (Vec<u8>, Vec<u8>) {
        let mut head = Vec::with_capacity(32);
        let digested = tcp::encode_c2h_data_head(
            &mut head,
            cqe.cid,
            0,
            data.len(),
            true,
            success_flag,
            self.digests,
            self.hpda,
        );
        let mut tail = Vec::new();
        if digested {
            tail.extend_from_slice(&tcp::data_digest(data));
        }
        if !success_flag {
            tcp::encode_capsule_resp(&mut tail, cqe, self.digests);
        }
        (head, tail)
    }

    /// The completion entry of `cid` as this queue reports it.
    fn cqe(&self, cid: u16, status: Status, dw0: u32, dw1: u32) -> Cqe {
        Cqe {
            dw0,
            dw1,
            sqhd: if self.sqflow_disabled {
                0xffff
            } else {
                self.sqhd
            },
            sqid: self.qid,
            cid,
            status: status.to_u16(),
        }
    }

    /// Completes a command: C2HData (if any) then CapsuleResp, unless SUCCESS covers it.
    fn complete(&mut self, cid: u16, status: Status, dw0: u32, dw1: u32, data: &[u8]) {
        let cmd = self.inflight.remove(&cid);
        if !status.is_success() {
            if let Some(c) = &self.ctrl {
                let (nsid, lba) = match &cmd {
                    Some(cmd) if self.qid != 0 => (
                        cmd.sqe.nsid(),
                        u64::from(cmd.sqe.cdw(10)) | (u64::from(cmd.sqe.cdw(11)) << 32),
                    ),
                    Some(cmd) => (cmd.sqe.nsid(), 0),
                    None => (0, 0),
                };
                c.log_error(self.qid, cid, status.to_u16(), nsid, lba);
            }
        }
        let cqe = self.cqe(cid, status, dw0, dw1);
        if self.wire == Wire::Rdma {
            let sqe = match &cmd {
                Some(c) => Some(c.sqe),
                None => self.current.filter(|s| s.cid() == cid),
            };
            let keyed = sqe.and_then(|s| s.keyed_sgl());
            let data = if status.is_success() {
                data.to_vec()
            } else {
                Vec::new()
            };
            self.out.push_back(Output::Respond {
                cqe,
                data,
                sgl: keyed,
                invalidate: keyed.filter(|k| k.invalidate).map(|k| k.key),
            });
            return;
        }
        let b = if !data.is_empty() && status.is_success() {
            let success_flag = self.sqflow_disabled && dw0 == 0 && dw1 == 0;
            let (head, tail) = self.c2h_pieces(&cqe, data, success_flag);
            [&head[..], data, &tail[..]].concat()
        } else {
            let mut b = Vec::with_capacity(64);
            tcp::encode_capsule_resp(&mut b, &cqe, self.digests);
            b
        };
        self.out.push_back(Output::Send(b));
    }

    /// Number of commands in flight (for tests and metrics).
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }
}

/// Bytes of buffer an operation holds while it runs.
fn io_cost(op: &BlockOp) -> u64 {
    match op {
        BlockOp::Read { len, .. } => u64::from(*len),
        BlockOp::Write { data, .. } => data.len() as u64,
        _ => 0,
    }
}

fn nvm_io_opcode_known(op: u8) -> bool {
    use crate::spec::io_opc::*;
    matches!(op, FLUSH | WRITE | READ | WRITE_ZEROES | DSM)
}
