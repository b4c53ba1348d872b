//! One NVMe/RDMA queue pair: its registered buffers, its completion queue and the
//! thread that drives its [`Queue`].
//!
//! The thread polls the CQ while there is work and for [`SPIN`] after the last
//! completion, then arms the CQ's interrupt and sleeps in `poll(2)` on the completion
//! channel and an eventfd (storage completions, controller events, disconnects), so an
//! idle queue costs no CPU. Every registration is owned by [`Conn`] and released when
//! it drops, whatever ended the queue (host disconnect, bad key, keep-alive, shutdown).

use std::collections::{HashMap, VecDeque};
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::budget::{ChunkPool, Reservation};
use super::verbs::{self, CompChannel, Cq, EventFd, Pd, RegBuf};
use super::wire::QueueSizes;
use super::{RdmaError, CHUNKS_PER_QUEUE, CHUNK_SIZE, MAX_SGE, RECV_SLOT};
use crate::spec::{Cqe, KeyedSgl, CQE_LEN};
use crate::target::io::{IoOutcome, IoRequest};
use crate::target::iobuf::IoBuf;
use crate::target::{ListenerInfo, Output, Queue, Target};
use crate::transport::ms_between;

/// How long the thread keeps polling the CQ after the last piece of work before it
/// arms the completion interrupt and sleeps.
pub const SPIN: Duration = Duration::from_micros(50);
/// Keep-alive and teardown checks, as for NVMe/TCP.
const TICK: Duration = crate::transport::TICK;
/// Completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;
/// wr_id tag of receive work requests (the low bits are the slot).
const RECV_TAG: u64 = 1 << 63;

/// Live queue pairs of a listener, by cm id address: how the CM thread reaches a
/// queue pair's thread.
pub(crate) type Registry = Arc<Mutex<HashMap<usize, Arc<Shared>>>>;

/// State the CM thread and wakers share with a queue pair's thread.
pub(crate) struct Shared {
    disconnected: AtomicBool,
    events: AtomicBool,
    efd: EventFd,
}

impl Shared {
    /// The host (or the device) went away: the thread tears the queue pair down.
    pub fn disconnect(&self) {
        self.disconnected.store(true, Ordering::Release);
        self.efd.wake();
    }
}

/// A cm id destroyed on drop (after its QP).
struct CmId(*mut rdma_cm_id);

impl Drop for CmId {
    fn drop(&mut self) {
        if self.0.is_null() {
            return;
        }
        // SAFETY: the id is ours, its QP is destroyed and its events are acked by the
        // CM thread (which never blocks on us).
        unsafe { rdma_destroy_id(self.0) };
    }
}

enum WrCtx {
    Read {
        cid: u16,
        chunks: Vec<u32>,
        len: usize,
    },
    Send {
        slot: u16,
        chunks: Vec<u32>,
    },
}

/// Why the queue pair ends.
#[derive(Debug)]
enum End {
    Closed,
    Fatal(String),
}

/// A queue pair with everything registered for it. Field order is drop order:
/// buffers are deregistered before the CQ, channel and PD go, the id last.
pub(crate) struct Conn {
    shared: Arc<Shared>,
    registry: Registry,
    qp_live: bool,
    recv: RegBuf,
    recv_entries: u16,
    cqe_buf: RegBuf,
    cqe_free: Vec<u16>,
    stage: RegBuf,
    pool: ChunkPool,
    cq: Cq,
    cc: CompChannel,
    _pd: Pd,
    _reservation: Reservation,
    ctx: HashMap<u64, WrCtx>,
    next_wr: u64,
    /// RDMA transfers ([`Output::FetchData`], [`Output::Respond`]) waiting, in order,
    /// for staging chunks or a completion slot.
    waiting: VecDeque<Output>,
    send_inv: bool,
    peer: String,
    id: CmId,
}

// SAFETY: the verbs objects are used by one thread at a time (created by the CM
// thread, then moved to the queue pair's thread); libibverbs objects are thread-safe.
unsafe impl Send for Conn {}

/// Device limits a queue pair is sized against.
pub(crate) struct DeviceLimits {
    pub max_qp_wr: i32,
    pub max_sge: i32,
    pub max_cqe: i32,
    pub max_qp_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
}

/// Queries `ctx`'s device limits.
pub(crate) fn device_limits(ctx: *mut ibv_context) -> Result<DeviceLimits, RdmaError> {
    // SAFETY: zeroed ibv_device_attr is valid; ctx is live.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    let rc = unsafe { ibv_query_device(ctx, &mut a) };
    if rc != 0 {
        return Err(verbs::errno_err("ibv_query_device", rc));
    }
    Ok(DeviceLimits {
        max_qp_wr: a.max_qp_wr,
        max_sge: a.max_sge,
        max_cqe: a.max_cqe,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
    })
}

impl Conn {
    /// Provisions a queue pair on `id` (a connection request not yet accepted):
    /// buffers, CQ, QP, and every capsule receive posted. On error nothing is left
    /// registered, and `id` is still the caller's.
    pub fn new(
        id: *mut rdma_cm_id,
        sizes: QueueSizes,
        dev: &DeviceLimits,
        reservation: Reservation,
        registry: Registry,
    ) -> Result<Self, RdmaError> {
        // SAFETY: a connection request's id carries its device context.
        let ctx = unsafe { (*id).verbs };
        let recv_entries = sizes.recv_entries;
        let send_entries = sizes.send_entries;
        let max_sge = usize::try_from(dev.max_sge).unwrap_or(1).clamp(1, MAX_SGE);
        // Reads, writes and sends of every command the host may have outstanding.
        let want_wr = 3 * u32::from(recv_entries) + 4;
        let max_send_wr = want_wr.min(u32::try_from(dev.max_qp_wr).unwrap_or(want_wr));
        let cq_entries = (max_send_wr + u32::from(recv_entries))
            .min(u32::try_from(dev.max_cqe).unwrap_or(u32::MAX)) as i32;
        let pd = Pd::new(ctx)?;
        let cc = CompChannel::new(ctx)?;
        let cq = Cq::new(ctx, cq_entries, &cc)?;
        let lw = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
        let recv = RegBuf::new(&pd, usize::from(recv_entries) * RECV_SLOT, lw)?;
        let cqe_buf = RegBuf::new(&pd, usize::from(send_entries) * CQE_LEN, lw)?;
        let stage = RegBuf::new(&pd, CHUNKS_PER_QUEUE as usize * CHUNK_SIZE, lw)?;
        let shared = Arc::new(Shared {
            disconnected: AtomicBool::new(false),
            events: AtomicBool::new(false),
            efd: EventFd::new()?,
        });
        // SAFETY: zeroed init attr is valid; fields set below.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.0;
        attr.recv_cq = cq.0;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.cap.max_send_wr = max_send_wr;
        attr.cap.max_recv_wr = u32::from(recv_entries);
        attr.cap.max_send_sge = max_sge as u32;
        attr.cap.max_recv_sge = 1;
        attr.sq_sig_all = 0;
        // SAFETY: live id, pd and attr.
        let rc = unsafe { rdma_create_qp(id, pd.0, &mut attr) };
        if rc != 0 {
            return Err(verbs::os_err("rdma_create_qp"));
        }
        let mut conn = Conn {
            shared,
            registry,
            qp_live: true,
            recv,
            recv_entries,
            cqe_buf,
            cqe_free: (0..send_entries).rev().collect(),
            stage,
            pool: ChunkPool::new(CHUNK_SIZE, CHUNKS_PER_QUEUE, max_sge),
            cq,
            cc,
            _pd: pd,
            _reservation: reservation,
            ctx: HashMap::new(),
            next_wr: 1,
            waiting: VecDeque::new(),
            send_inv: true,
            peer: verbs::peer_of(id),
            id: CmId(id),
        };
        for slot in 0..recv_entries {
            if let Err(e) = conn.post_recv(slot) {
                conn.release_without_id();
                return Err(e);
            }
        }
        // SAFETY: arm the CQ once so the first completion can wake a sleeping thread.
        unsafe { ibv_req_notify_cq(conn.cq.0, 0) };
        Ok(conn)
    }

    /// Destroys the QP and forgets the id so dropping `self` frees everything but
    /// the id (the caller still owns it: its event is not acked yet).
    fn release_without_id(&mut self) {
        if self.qp_live {
            // SAFETY: QP created on this id.
            unsafe { rdma_destroy_qp(self.id.0) };
            self.qp_live = false;
        }
        self.id.0 = ptr::null_mut();
    }

    /// Gives the cm id back to the caller (accept failed before the thread started):
    /// the QP and buffers are freed, the caller destroys the id after acking.
    pub fn into_id(mut self) -> *mut rdma_cm_id {
        let id = self.id.0;
        self.release_without_id();
        id
    }

    /// The address of the cm id (registry key).
    pub fn key(&self) -> usize {
        self.id.0 as usize
    }

    /// State shared with the CM thread.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The peer's address as text.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    fn qp(&self) -> *mut ibv_qp {
        // SAFETY: live id; its qp was created in new.
        unsafe { (*self.id.0).qp }
    }

    fn post_recv(&mut self, slot: u16) -> Result<(), RdmaError> {
        let mut sge = ibv_sge {
            addr: self.recv.addr(usize::from(slot) * RECV_SLOT),
            length: RECV_SLOT as u32,
            lkey: self.recv.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: RECV_TAG | u64::from(slot),
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: wr and sge live across the call; the slot's memory is registered.
        let rc = unsafe { ibv_post_recv(self.qp(), &mut wr, &mut bad) };
        if rc != 0 {
            return Err(verbs::errno_err("ibv_post_recv", rc));
        }
        Ok(())
    }

    fn wr_id(&mut self) -> u64 {
        let id = self.next_wr;
        self.next_wr = (self.next_wr + 1) & !RECV_TAG;
        id
    }

    fn sges(&self, chunks: &[u32], len: usize) -> Vec<ibv_sge> {
        self.pool
            .segments(chunks, len)
            .into_iter()
            .map(|(off, n)| ibv_sge {
                addr: self.stage.addr(off),
                length: n as u32,
                lkey: self.stage.lkey(),
            })
            .collect()
    }

    /// Starts an RDMA READ of the host's data; `Ok(false)` when it must wait for
    /// staging chunks.
    fn start_fetch(&mut self, cid: u16, sgl: KeyedSgl) -> Result<bool, End> {
        let len = sgl.len as usize;
        if !self.pool.fits(len) {
            return Err(End::Fatal(format!(
                "transfer of {len} bytes exceeds the staging pool"
            )));
        }
        let Some(chunks) = self.pool.alloc(len) else {
            return Ok(false);
        };
        let mut sges = self.sges(&chunks, len);
        let wr_id = self.wr_id();
        // SAFETY: zeroed send wr is valid; fields set below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as i32;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.rdma = rdma_t {
            remote_addr: sgl.addr,
            rkey: sgl.key,
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: wr, sges live across the call; chunks are registered and ours.
        let rc = unsafe { ibv_post_send(self.qp(), &mut wr, &mut bad) };
        if rc != 0 {
            self.pool.release(&chunks);
            return Err(End::Fatal(format!(
                "posting RDMA READ: {}",
                std::io::Error::from_raw_os_error(rc.abs())
            )));
        }
        self.ctx.insert(wr_id, WrCtx::Read { cid, chunks, len });
        Ok(true)
    }

    /// Writes `data` to the host (RDMA WRITE) and sends `cqe`; `Ok(false)` when it
    /// must wait for a completion slot or staging chunks.
    fn start_respond(
        &mut self,
        cqe: &Cqe,
        data: &[u8],
        sgl: Option<KeyedSgl>,
        invalidate: Option<u32>,
    ) -> Result<bool, End> {
        let data_len = match sgl {
            Some(k) if !data.is_empty() => data.len().min(k.len as usize),
            _ => 0,
        };
        if data_len > 0 && !self.pool.fits(data_len) {
            return Err(End::Fatal(format!(
                "response of {data_len} bytes exceeds the staging pool"
            )));
        }
        let Some(slot) = self.cqe_free.pop() else {
            return Ok(false);
        };
        let chunks = match self.pool.alloc(data_len) {
            Some(c) => c,
            None => {
                self.cqe_free.push(slot);
                return Ok(false);
            }
        };
        // The segments cover `data_len` bytes, at most `data.len()`: each takes its
        // share of what is left.
        let mut rest = data;
        for (at, n) in self.pool.segments(&chunks, data_len) {
            let (seg, tail) = rest.split_at(n.min(rest.len()));
            self.stage.write(at, seg);
            rest = tail;
        }
        self.cqe_buf
            .write(usize::from(slot) * CQE_LEN, &cqe.to_bytes());
        let mut data_sges = self.sges(&chunks, data_len);
        let mut cqe_sge = ibv_sge {
            addr: self.cqe_buf.addr(usize::from(slot) * CQE_LEN),
            length: CQE_LEN as u32,
            lkey: self.cqe_buf.lkey(),
        };
        let send_id = self.wr_id();
        let write_id = self.wr_id();
        // Set once the WRITE is posted (a retry then posts only the completion).
        let mut write_posted = false;
        loop {
            // SAFETY: zeroed send wrs are valid; fields set below.
            let mut send: ibv_send_wr = unsafe { std::mem::zeroed() };
            send.wr_id = send_id;
            send.sg_list = &mut cqe_sge;
            send.num_sge = 1;
            send.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
            match invalidate {
                Some(rkey) if self.send_inv => {
                    send.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                    send.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
                }
                _ => send.opcode = ibv_wr_opcode::IBV_WR_SEND,
            }
            // SAFETY: as above.
            let mut write: ibv_send_wr = unsafe { std::mem::zeroed() };
            let first: *mut ibv_send_wr = if data_len > 0 && !write_posted {
                let k = sgl.unwrap_or(KeyedSgl {
                    addr: 0,
                    len: 0,
                    key: 0,
                    invalidate: false,
                });
                write.wr_id = write_id;
                write.sg_list = data_sges.as_mut_ptr();
                write.num_sge = data_sges.len() as i32;
                write.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                write.wr.rdma = rdma_t {
                    remote_addr: k.addr,
                    rkey: k.key,
                };
                write.next = &mut send;
                &mut write
            } else {
                &mut send
            };
            let mut bad: *mut ibv_send_wr = ptr::null_mut();
            // SAFETY: the chain and its sges live across the call.
            let rc = unsafe { ibv_post_send(self.qp(), first, &mut bad) };
            if rc == 0 {
                break;
            }
            if invalidate.is_some() && self.send_inv && std::ptr::eq(bad, &send) {
                // Everything before the completion (the WRITE) was posted.
                write_posted = true;
                // The provider refused send-with-invalidate: the host invalidates its
                // key itself when the completion comes without it.
                tracing::debug!(peer = %self.peer, "send with invalidate refused; using plain send");
                self.send_inv = false;
                continue;
            }
            self.pool.release(&chunks);
            self.cqe_free.push(slot);
            return Err(End::Fatal(format!(
                "posting completion: {}",
                std::io::Error::from_raw_os_error(rc.abs())
            )));
        }
        self.ctx.insert(send_id, WrCtx::Send { slot, chunks });
        Ok(true)
    }

    fn try_start(&mut self, p: &Output) -> Result<bool, End> {
        match p {
            Output::FetchData { cid, sgl } => self.start_fetch(*cid, *sgl),
            Output::Respond {
                cqe,
                data,
                sgl,
                invalidate,
            } => self.start_respond(cqe, data, *sgl, *invalidate),
            // Only transfers are queued here.
            Output::Send(_) | Output::SendData { .. } | Output::Io(_) | Output::Close => Ok(true),
        }
    }

    /// Starts waiting transfers in order while resources allow.
    fn pump_waiting(&mut self) -> Result<(), End> {
        while let Some(p) = self.waiting.pop_front() {
            if !self.try_start(&p)? {
                self.waiting.push_front(p);
                break;
            }
        }
        Ok(())
    }

    fn submit(&mut self, p: Output) -> Result<(), End> {
        if self.waiting.is_empty() && self.try_start(&p)? {
            return Ok(());
        }
        self.waiting.push_back(p);
        Ok(())
    }

    /// Drives the queue until the host disconnects, the queue closes or a transfer
    /// fails; then everything is released (by dropping `self`).
    pub fn run(
        mut self,
        target: Arc<Target>,
        info: ListenerInfo,
        start: Instant,
        handle: Option<tokio::runtime::Handle>,
    ) {
        let peer = self.peer.clone();
        let budget = self._reservation.budget().clone();
        let mut q = Queue::new_rdma(target.clone(), info, peer.clone());
        let (io_tx, io_rx) = mpsc::channel::<(IoRequest, std::io::Result<IoOutcome>)>();
        let executor = target.executor();
        let opened = Instant::now();
        let mut last_tick = Instant::now();
        let mut last_work = Instant::now();
        let mut waker_installed = false;
        let mut wcs: Vec<ibv_wc> = (0..POLL_BATCH)
            // SAFETY: zeroed work completions are valid.
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        let end = 'run: loop {
            let at = Instant::now();
            q.begin_turn(at);
            let now = ms_between(start, at);
            let mut work = false;
            // Completions.
            // SAFETY: wcs has POLL_BATCH entries.
            let n = unsafe { ibv_poll_cq(self.cq.0, POLL_BATCH as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                break End::Fatal("ibv_poll_cq failed".into());
            }
            for wc in wcs.iter().take(n as usize) {
                work = true;
                if let Err(e) = self.on_wc(wc, &mut q, &target, now) {
                    break 'run e;
                }
            }
            while let Ok((req, res)) = io_rx.try_recv() {
                work = true;
                q.io_done(&req, res);
            }
            if self.shared.events.swap(false, Ordering::AcqRel) {
                work = true;
                q.poll_events();
            }
            if self.shared.disconnected.load(Ordering::Acquire) {
                break End::Closed;
            }
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                q.tick(now);
                if q.controller().is_none() && opened.elapsed() > crate::transport::CONNECT_TIMEOUT
                {
                    break End::Fatal("no Connect in time".into());
                }
            }
            if !waker_installed && q.qid() == 0 {
                if let Some(c) = q.controller() {
                    let sh = self.shared.clone();
                    c.set_waker(Arc::new(move || {
                        sh.events.store(true, Ordering::Release);
                        sh.efd.wake();
                    }));
                    waker_installed = true;
                }
            }
            match self.drain_outputs(&mut q, &io_tx, &executor, &handle, now) {
                Ok(true) => {
                    // The queue closes itself (Disconnect, keep-alive): let the
                    // completions it sent last reach the host first.
                    self.flush_sends(&mut wcs);
                    break End::Closed;
                }
                Ok(false) => {}
                Err(e) => break e,
            }
            if let Err(e) = self.pump_waiting() {
                break e;
            }
            if q.is_closed() {
                break End::Closed;
            }
            if work {
                last_work = Instant::now();
                continue;
            }
            if last_work.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            // Idle: arm the interrupt, look once more (a completion may have landed
            // before arming), then sleep until the CQ, a waker or the next tick.
            // SAFETY: live CQ.
            unsafe { ibv_req_notify_cq(self.cq.0, 0) };
            // SAFETY: live CQ, wcs has room for one.
            let again = unsafe { ibv_poll_cq(self.cq.0, 1, wcs.as_mut_ptr()) };
            if let Some(wc) = wcs.first().filter(|_| again > 0) {
                let at = Instant::now();
                q.begin_turn(at);
                if let Err(e) = self.on_wc(wc, &mut q, &target, ms_between(start, at)) {
                    break e;
                }
                last_work = Instant::now();
                continue;
            }
            let wait = TICK.saturating_sub(last_tick.elapsed());
            let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(500).max(1);
            let ready = verbs::wait_readable(&[self.cc.fd(), self.shared.efd.0], wait_ms);
            if ready.first() == Some(&true) {
                let mut cq: *mut ibv_cq = ptr::null_mut();
                let mut ctx: *mut c_void = ptr::null_mut();
                // SAFETY: non-blocking channel; ack each event we get.
                if unsafe { ibv_get_cq_event(self.cc.0, &mut cq, &mut ctx) } == 0 {
                    // SAFETY: the event was for our CQ.
                    unsafe { ibv_ack_cq_events(cq, 1) };
                }
            }
            if ready.get(1) == Some(&true) {
                self.shared.efd.clear();
            }
            last_work = Instant::now();
        };
        match &end {
            End::Closed => tracing::debug!(peer = %peer, qid = q.qid(), "NVMe/RDMA queue closed"),
            End::Fatal(why) => {
                tracing::info!(peer = %peer, qid = q.qid(), reason = %why, "NVMe/RDMA queue torn down")
            }
        }
        let qid = q.qid();
        q.on_disconnect();
        let held = self._reservation.bytes();
        drop(self);
        // Everything this queue pair registered is released by now.
        tracing::info!(peer = %peer, qid, released_bytes = held, registered_bytes_in_use = budget.used(), "NVMe/RDMA queue pair released");
    }
}

/// How long a closing queue waits for its last completions to be sent.
const CLOSE_FLUSH: Duration = Duration::from_millis(200);

impl Conn {
    /// Posts what still waits and polls until every completion SEND has finished (or
    /// failed), at most [`CLOSE_FLUSH`].
    fn flush_sends(&mut self, wcs: &mut [ibv_wc]) {
        let until = Instant::now() + CLOSE_FLUSH;
        while Instant::now() < until {
            if self.pump_waiting().is_err() {
                return;
            }
            let sends = self
                .ctx
                .values()
                .filter(|c| matches!(c, WrCtx::Send { .. }))
                .count();
            if sends == 0 && self.waiting.is_empty() {
                return;
            }
            // SAFETY: wcs has room for wcs.len() entries.
            let n = unsafe { ibv_poll_cq(self.cq.0, wcs.len() as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return;
            }
            for wc in wcs.iter().take(n as usize) {
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    return;
                }
                if let Some(WrCtx::Send { slot, chunks }) = self.ctx.remove(&wc.wr_id) {
                    self.pool.release(&chunks);
                    self.cqe_free.push(slot);
                }
            }
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Handles one work completion.
    fn on_wc(
        &mut self,
        wc: &ibv_wc,
        q: &mut Queue,
        target: &Arc<Target>,
        now: u64,
    ) -> Result<(), End> {
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            // The QP is in error: a flushed request means we are going down anyway; any
            // other status (a bad remote key, a host gone mid-transfer) ends the queue.
            if wc.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                return Err(End::Closed);
            }
            return Err(End::Fatal(format!(
                "work request failed: {} (vendor error {:#x})",
                verbs::wc_status_str(wc.status),
                wc.vendor_err
            )));
        }
        if wc.wr_id & RECV_TAG != 0 {
            let slot = (wc.wr_id & 0xffff) as u16;
            if slot >= self.recv_entries {
                return Err(End::Fatal(format!(
                    "receive completion for unknown slot {slot}"
                )));
            }
            let len = (wc.byte_len as usize).min(RECV_SLOT);
            if q.controller().is_none() && target.has_source() {
                // Bring the configuration up to date before a Connect, as NVMe/TCP does.
                if let Err(e) = target.refresh() {
                    tracing::warn!(error = %e, "configuration refresh failed; using the previous one");
                }
            }
            let capsule = self.recv.slice(usize::from(slot) * RECV_SLOT, len);
            q.handle_capsule(capsule, now);
            return self
                .post_recv(slot)
                .map_err(|e| End::Fatal(format!("reposting a receive: {e}")));
        }
        match self.ctx.remove(&wc.wr_id) {
            Some(WrCtx::Read { cid, chunks, len }) => {
                let mut data = IoBuf::with_capacity(len);
                for (at, n) in self.pool.segments(&chunks, len) {
                    // The segments add up to `len`, the capacity: this always fits.
                    data.extend_from_slice(self.stage.slice(at, n));
                }
                self.pool.release(&chunks);
                q.data_fetched(cid, Some(data), now);
                Ok(())
            }
            Some(WrCtx::Send { slot, chunks }) => {
                self.pool.release(&chunks);
                self.cqe_free.push(slot);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Carries out the queue's outputs; `Ok(true)` when the queue asked to close.
    fn drain_outputs(
        &mut self,
        q: &mut Queue,
        io_tx: &mpsc::Sender<(IoRequest, std::io::Result<IoOutcome>)>,
        executor: &Option<Arc<dyn crate::target::IoExecutor>>,
        handle: &Option<tokio::runtime::Handle>,
        now: u64,
    ) -> Result<bool, End> {
        let mut close = false;
        while let Some(o) = q.poll_output() {
            match o {
                Output::Io(req) => {
                    let tx = io_tx.clone();
                    let sh = self.shared.clone();
                    let done = move |req: IoRequest, res: std::io::Result<IoOutcome>| {
                        // The queue may be gone; then the result is moot.
                        let _ = tx.send((req, res));
                        sh.efd.wake();
                    };
                    match (executor, handle) {
                        (Some(e), _) => e.submit(req, Box::new(done)),
                        (None, Some(h)) => {
                            h.spawn_blocking(move || {
                                let res = req.execute();
                                done(req, res);
                            });
                        }
                        (None, None) => {
                            let res = req.execute();
                            done(req, res);
                        }
                    }
                }
                Output::FetchData { cid, sgl } if sgl.len == 0 => {
                    q.data_fetched(cid, Some(IoBuf::default()), now);
                }
                o @ (Output::FetchData { .. } | Output::Respond { .. }) => self.submit(o)?,
                Output::Close => close = true,
                Output::Send(_) | Output::SendData { .. } => {
                    return Err(End::Fatal("NVMe/TCP output on an RDMA queue".into()));
                }
            }
        }
        Ok(close)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.id.0.is_null() {
            return;
        }
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(self.id.0 as usize));
        // SAFETY: live id; disconnecting twice or after the host did is harmless.
        unsafe { rdma_disconnect(self.id.0) };
        if self.qp_live {
            // SAFETY: QP created on this id; no more posts follow.
            unsafe { rdma_destroy_qp(self.id.0) };
            self.qp_live = false;
        }
        // Any CQ event not yet taken is acked before the CQ goes.
        let mut cq: *mut ibv_cq = ptr::null_mut();
        let mut ctx: *mut c_void = ptr::null_mut();
        // SAFETY: non-blocking channel.
        while unsafe { ibv_get_cq_event(self.cc.0, &mut cq, &mut ctx) } == 0 {
            // SAFETY: the event was for our CQ.
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
        // Fields drop next: buffers (deregistered), CQ, channel, PD, reservation, id.
    }
}
