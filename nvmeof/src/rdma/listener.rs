//! The RDMA-CM listener: one thread reads the connection-manager events of a listening
//! id, validates each connection request's NVMe/RDMA private data, provisions a queue
//! pair within the memory budget and accepts (or rejects with the NVMe/RDMA status),
//! then starts the queue pair's thread; disconnects are forwarded to it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_sys::*;
use tokio_util::sync::CancellationToken;

use super::budget::MemoryBudget;
use super::conn::{self, Conn, Registry};
use super::verbs::{self, EventChannel};
use super::wire::{encode_reject, CmAccept, CmRequest, RejectStatus, RECFMT_V0};
use super::{queue_memory, RdmaError, MAX_QUEUE_PAIRS};
use crate::spec::log::TRTYPE_RDMA;
use crate::target::{ListenerInfo, Target};

/// How often the CM thread looks at the shutdown token.
const SHUTDOWN_POLL_MS: i32 = 200;
/// How long shutdown waits for queue pairs to go before leaving the channel behind.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Connection requests queued by RDMA-CM before we take them.
const BACKLOG: i32 = 128;

/// A listening cm id and its event channel (the id is destroyed before the channel).
pub(crate) struct Bound {
    listen: *mut rdma_cm_id,
    ch: EventChannel,
    addr: SocketAddr,
}

// SAFETY: the id and channel are used by one thread at a time (bound by the caller,
// then moved to the CM thread).
unsafe impl Send for Bound {}

impl Drop for Bound {
    fn drop(&mut self) {
        if !self.listen.is_null() {
            // SAFETY: our listening id; no events of it are outstanding unacked.
            unsafe { rdma_destroy_id(self.listen) };
        }
    }
}

impl Bound {
    pub fn bind(addr: SocketAddr) -> Result<Self, RdmaError> {
        verbs::devices()?;
        let ch = EventChannel::new()?;
        let mut id: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: live channel; id is written on success.
        let rc =
            unsafe { rdma_create_id(ch.0, &mut id, ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) };
        if rc != 0 {
            return Err(verbs::os_err("rdma_create_id"));
        }
        let b = Bound {
            listen: id,
            ch,
            addr,
        };
        let mut ss = verbs::sockaddr(addr);
        // SAFETY: live id; ss holds a sockaddr of addr's family.
        if unsafe { rdma_bind_addr(id, (&mut ss as *mut libc::sockaddr_storage).cast()) } != 0 {
            return Err(verbs::os_err("rdma_bind_addr"));
        }
        // SAFETY: bound id.
        if unsafe { rdma_listen(id, BACKLOG) } != 0 {
            return Err(verbs::os_err("rdma_listen"));
        }
        Ok(b)
    }

    pub fn serve(
        self,
        target: Arc<Target>,
        advertised: Option<String>,
        budget: Arc<MemoryBudget>,
        shutdown: CancellationToken,
    ) {
        let handle = tokio::runtime::Handle::try_current().ok();
        let addr = self.addr;
        let spawned = std::thread::Builder::new()
            .name("nvme-rdma-cm".into())
            .spawn(move || {
                let info = ListenerInfo {
                    traddr: advertised.unwrap_or_else(|| addr.ip().to_string()),
                    trsvcid: addr.port().to_string(),
                    ipv6: addr.is_ipv6(),
                    trtype: TRTYPE_RDMA,
                };
                let cm = Cm {
                    bound: self,
                    target,
                    info,
                    budget,
                    registry: Arc::new(Mutex::new(HashMap::new())),
                    start: Instant::now(),
                    handle,
                };
                cm.run(shutdown);
            });
        if let Err(e) = spawned {
            tracing::error!(listener = %addr, error = %e, "cannot start the NVMe/RDMA listener thread");
        }
    }
}

struct Cm {
    bound: Bound,
    target: Arc<Target>,
    info: ListenerInfo,
    budget: Arc<MemoryBudget>,
    registry: Registry,
    start: Instant,
    handle: Option<tokio::runtime::Handle>,
}

/// What to do with a connection request once its event is acked.
enum After {
    Start(Box<Conn>),
    Destroy(*mut rdma_cm_id),
}

impl Cm {
    fn run(self, shutdown: CancellationToken) {
        tracing::info!(url = %format!("nvme+rdma://{}", self.bound.addr), "NVMe/RDMA listening");
        while !shutdown.is_cancelled() {
            self.pump_events(SHUTDOWN_POLL_MS);
        }
        // Shutdown: disconnect every queue pair and wait (a bounded time) for their
        // threads to release them, still acking events so their ids can be destroyed.
        let shared: Vec<_> = self.lock().values().cloned().collect();
        for s in shared {
            s.disconnect();
        }
        let until = Instant::now() + SHUTDOWN_GRACE;
        while !self.lock().is_empty() && Instant::now() < until {
            self.pump_events(50);
        }
        let left = self.lock().len();
        tracing::info!(url = %format!("nvme+rdma://{}", self.bound.addr), queue_pairs_left = left, registered_bytes_in_use = self.budget.used(), "NVMe/RDMA listener stopped");
        if left > 0 {
            tracing::warn!(
                queues = left,
                "NVMe/RDMA queue pairs still up at shutdown; leaving the event channel"
            );
            std::mem::forget(self.bound);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<conn::Shared>>> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `timeout_ms` for CM events and handles every one queued.
    fn pump_events(&self, timeout_ms: i32) {
        let ready = verbs::wait_readable(&[self.bound.ch.fd()], timeout_ms);
        if ready.first() != Some(&true) {
            return;
        }
        loop {
            let mut ev: *mut rdma_cm_event = ptr::null_mut();
            // SAFETY: non-blocking channel; ev is written on success.
            if unsafe { rdma_get_cm_event(self.bound.ch.0, &mut ev) } != 0 || ev.is_null() {
                return;
            }
            // SAFETY: ev is valid until acked.
            let (kind, id) = unsafe { ((*ev).event, (*ev).id) };
            let after = match kind {
                rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST => {
                    Some(self.on_connect_request(ev))
                }
                rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED => None,
                rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED
                | rdma_cm_event_type::RDMA_CM_EVENT_TIMEWAIT_EXIT
                | rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_ERROR
                | rdma_cm_event_type::RDMA_CM_EVENT_UNREACHABLE
                | rdma_cm_event_type::RDMA_CM_EVENT_REJECTED
                | rdma_cm_event_type::RDMA_CM_EVENT_ADDR_CHANGE
                | rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    if let Some(s) = self.lock().get(&(id as usize)) {
                        s.disconnect();
                    }
                    if id == self.bound.listen {
                        tracing::warn!(event = kind, "NVMe/RDMA listening id lost its device");
                    }
                    None
                }
                other => {
                    tracing::debug!(event = other, "ignoring RDMA-CM event");
                    None
                }
            };
            // SAFETY: ev came from rdma_get_cm_event and is acked once.
            unsafe { rdma_ack_cm_event(ev) };
            match after {
                Some(After::Start(conn)) => self.start(*conn),
                Some(After::Destroy(id)) => {
                    // SAFETY: a rejected request's id, its event acked above.
                    unsafe { rdma_destroy_id(id) };
                }
                None => {}
            }
        }
    }

    fn reject(&self, id: *mut rdma_cm_id, sts: RejectStatus, why: &str) -> After {
        tracing::info!(status = ?sts, reason = why, "NVMe/RDMA connection rejected");
        let rej = encode_reject(sts);
        // SAFETY: a connection request's id; rej lives across the call.
        unsafe { rdma_reject(id, rej.as_ptr().cast(), rej.len() as u8) };
        After::Destroy(id)
    }

    fn on_connect_request(&self, ev: *mut rdma_cm_event) -> After {
        // SAFETY: ev is a live CONNECT_REQUEST event.
        let (id, param) = unsafe { ((*ev).id, (*ev).param.conn) };
        let private: &[u8] = if param.private_data.is_null() {
            &[]
        } else {
            // SAFETY: RDMA-CM guarantees private_data_len bytes until the ack.
            unsafe {
                std::slice::from_raw_parts(
                    param.private_data.cast::<u8>(),
                    usize::from(param.private_data_len),
                )
            }
        };
        let req = match CmRequest::parse(private) {
            Ok(r) => r,
            Err(sts) => return self.reject(id, sts, "private data too short"),
        };
        let sizes = match req.validate() {
            Ok(s) => s,
            Err(sts) => return self.reject(id, sts, "invalid request"),
        };
        if self.lock().len() >= MAX_QUEUE_PAIRS {
            return self.reject(id, RejectStatus::NoResources, "queue pair limit reached");
        }
        let need = queue_memory(sizes.recv_entries, sizes.send_entries);
        let Some(reservation) = self.budget.reserve(need) else {
            return self.reject(
                id,
                RejectStatus::NoResources,
                &format!(
                    "registered memory budget exhausted ({} of {} bytes in use)",
                    self.budget.used(),
                    self.budget.limit()
                ),
            );
        };
        // SAFETY: the request's id carries its device context.
        let dev = match conn::device_limits(unsafe { (*id).verbs }) {
            Ok(d) => d,
            Err(e) => return self.reject(id, RejectStatus::NoResources, &e.to_string()),
        };
        let conn = match Conn::new(id, sizes, &dev, reservation, self.registry.clone()) {
            Ok(c) => c,
            Err(e) => return self.reject(id, RejectStatus::NoResources, &e.to_string()),
        };
        let rep = CmAccept {
            recfmt: RECFMT_V0,
            crqsize: sizes.recv_entries,
        }
        .encode();
        // SAFETY: zeroed conn param is valid; fields set below.
        let mut cp: rdma_conn_param = unsafe { std::mem::zeroed() };
        cp.private_data = rep.as_ptr().cast();
        cp.private_data_len = rep.len() as u8;
        // The request's values are already from our side's point of view (RDMA-CM
        // swaps the host's): its initiator depth is how many RDMA READs we may have
        // outstanding at the host (the host's responder resources). We issue READs
        // and serve none; a depth of 0 would stall every host-to-controller transfer.
        cp.initiator_depth = param
            .initiator_depth
            .min(u8::try_from(dev.max_qp_init_rd_atom).unwrap_or(u8::MAX));
        cp.responder_resources = param
            .responder_resources
            .min(u8::try_from(dev.max_qp_rd_atom).unwrap_or(u8::MAX));
        if cp.initiator_depth == 0 {
            return self.reject(
                conn.into_id(),
                RejectStatus::InvalidOrd,
                "the host offers no RDMA READ resources",
            );
        }
        cp.rnr_retry_count = 7;
        // SAFETY: live id with its QP; cp and rep live across the call.
        if unsafe { rdma_accept(id, &mut cp) } != 0 {
            let e = verbs::os_err("rdma_accept");
            tracing::warn!(peer = %conn.peer(), error = %e, "NVMe/RDMA accept failed");
            return After::Destroy(conn.into_id());
        }
        tracing::debug!(peer = %conn.peer(), qid = req.qid, hsqsize = req.hsqsize, hrqsize = req.hrqsize, ord = cp.initiator_depth, ird = cp.responder_resources, "NVMe/RDMA queue pair accepted");
        After::Start(Box::new(conn))
    }

    fn start(&self, conn: Conn) {
        let key = conn.key();
        self.lock().insert(key, conn.shared());
        let target = self.target.clone();
        let info = self.info.clone();
        let start = self.start;
        let handle = self.handle.clone();
        let registry = self.registry.clone();
        let name = format!("nvme-rdma-{}", conn.peer());
        let spawned = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || conn.run(target, info, start, handle));
        if let Err(e) = spawned {
            // The closure (and the Conn in it) was dropped: registrations released.
            tracing::error!(error = %e, "cannot start an NVMe/RDMA queue thread");
            registry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
        }
    }
}
