//! Admin command set and Fabrics Property Get/Set for one controller.
//!
//! Pure functions of (controller state, configuration snapshot, command): no I/O, time
//! passed in, so each command is unit-tested directly.

use std::sync::atomic::Ordering;

use super::config::{PortConfig, SubsystemConfig, TargetConfig};
use super::controller::*;
use super::limits::*;
use crate::spec::fabrics::prop;
use crate::spec::identify::*;
use crate::spec::log::*;
use crate::spec::{admin_opc, fid, lid, sc, Sqe, Status};

/// How the target is reached, for discovery log entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerInfo {
    /// Address hosts connect to (as text).
    pub traddr: String,
    /// TCP port (as text).
    pub trsvcid: String,
    /// Whether the address is IPv6.
    pub ipv6: bool,
    /// Transport the listener serves ([`TRTYPE_TCP`] or [`TRTYPE_RDMA`]).
    pub trtype: u8,
}

/// Everything an admin command may look at.
pub struct AdminCtx<'a> {
    /// The target (identity, discovery generation).
    pub target: &'a Target,
    /// The controller.
    pub ctrl: &'a Controller,
    /// Configuration snapshot.
    pub cfg: &'a TargetConfig,
    /// Milliseconds since the target started.
    pub now_ms: u64,
    /// Listener the admin queue came in on.
    pub listener: &'a ListenerInfo,
}

/// Outcome of an admin command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminResult {
    /// Complete now.
    Complete {
        /// Status.
        status: Status,
        /// DW0.
        dw0: u32,
        /// DW1.
        dw1: u32,
        /// Controller-to-host data (truncated to the host buffer by the caller).
        data: Vec<u8>,
    },
    /// An AER: completes later when an event arrives.
    Deferred,
}

fn done(status: Status) -> AdminResult {
    AdminResult::Complete {
        status,
        dw0: 0,
        dw1: 0,
        data: Vec::new(),
    }
}

fn done_dw0(dw0: u32) -> AdminResult {
    AdminResult::Complete {
        status: Status::SUCCESS,
        dw0,
        dw1: 0,
        data: Vec::new(),
    }
}

fn with_data(data: Vec<u8>) -> AdminResult {
    AdminResult::Complete {
        status: Status::SUCCESS,
        dw0: 0,
        dw1: 0,
        data,
    }
}

/// CAP: MQES, CQR, TO = 7.5 s, CSS = NVM command set, MPSMIN = MPSMAX = 4 KiB.
pub fn cap() -> u64 {
    u64::from(MAX_QUEUE_ENTRIES - 1) | (1 << 16) | (15 << 24) | (1 << 37)
}

/// Property Get (Fabrics): returns (status, value).
pub fn property_get(ctrl: &Controller, sqe: &Sqe) -> (Status, u64) {
    let size8 = sqe.cdw(10) & 0x7 == 1;
    let offset = sqe.cdw(11);
    let a = ctrl.admin();
    let v = match (offset, size8) {
        (prop::CAP, true) => cap(),
        (prop::CAP, false) => cap() & 0xffff_ffff,
        (prop::VS, false) => u64::from(NVME_VERSION),
        (prop::CC, false) => u64::from(a.cc),
        (prop::CSTS, false) => u64::from(a.csts),
        _ => return (Status::generic(sc::INVALID_FIELD), 0),
    };
    (Status::SUCCESS, v)
}

/// Property Set (Fabrics): only CC is writable; enable/disable/shutdown take effect.
pub fn property_set(ctrl: &Controller, sqe: &Sqe) -> Status {
    let offset = sqe.cdw(11);
    let value = sqe.cdw(12);
    if offset != prop::CC || sqe.cdw(10) & 0x7 != 0 {
        return Status::generic(sc::INVALID_FIELD);
    }
    let mut a = ctrl.admin();
    let was_en = a.cc & CC_EN != 0;
    let en = value & CC_EN != 0;
    let shn = (value >> 14) & 0x3;
    a.cc = value;
    if en && !was_en {
        let iosqes = (value >> 16) & 0xf;
        let iocqes = (value >> 20) & 0xf;
        let mps = (value >> 7) & 0xf;
        let css = (value >> 4) & 0x7;
        let ok =
            mps == 0 && css == 0 && (iosqes == 0 || iosqes == 6) && (iocqes == 0 || iocqes == 4);
        if ok {
            a.csts = CSTS_RDY;
        } else {
            // CFS: the host asked for something we cannot do.
            a.csts = 1 << 1;
        }
    } else if !en && was_en {
        a.csts = 0;
    }
    if shn != 0 {
        a.csts = (a.csts & !(0x3 << 2)) | CSTS_SHST_COMPLETE;
    }
    ctrl.set_ready(a.csts & CSTS_RDY != 0);
    Status::SUCCESS
}

/// Executes an admin command (not Fabrics) on an enabled controller.
pub fn execute(ctx: &AdminCtx<'_>, sqe: &Sqe, data: &[u8]) -> AdminResult {
    let discovery = ctx.ctrl.kind == ControllerKind::Discovery;
    match sqe.opcode() {
        admin_opc::IDENTIFY => identify(ctx, sqe),
        admin_opc::GET_LOG_PAGE => get_log_page(ctx, sqe),
        admin_opc::SET_FEATURES => set_features(ctx, sqe, data),
        admin_opc::GET_FEATURES => get_features(ctx, sqe),
        admin_opc::ASYNC_EVENT_REQUEST if !discovery => {
            let mut a = ctx.ctrl.admin();
            if a.aer_cids.len() >= MAX_AER {
                return done(Status::specific(sc::AER_LIMIT));
            }
            a.aer_cids.push(sqe.cid());
            AdminResult::Deferred
        }
        admin_opc::KEEP_ALIVE => done(Status::SUCCESS),
        // Abort: we never abort (DW0 bit 0 set = not aborted); commands complete soon.
        admin_opc::ABORT if !discovery => done_dw0(1),
        _ => done(Status::generic(sc::INVALID_OPCODE)),
    }
}

fn subsystem<'a>(ctx: &AdminCtx<'a>) -> Option<&'a SubsystemConfig> {
    ctx.cfg.subsystem(&ctx.ctrl.subnqn)
}

/// NGUID derived from the namespace UUID (stable across restarts).
pub fn nguid(uuid: &[u8; 16]) -> [u8; 16] {
    *uuid
}

fn controller_info(ctx: &AdminCtx<'_>) -> ControllerInfo {
    let discovery = ctx.ctrl.kind == ControllerKind::Discovery;
    let sub = subsystem(ctx);
    let nn = sub
        .and_then(|s| s.namespaces.iter().map(|n| n.nsid).max())
        .unwrap_or(0)
        .max(if discovery { 0 } else { MAX_NSID_REPORTED });
    ControllerInfo {
        vid: 0,
        serial: sub
            .map(|s| s.serial.clone())
            .unwrap_or_else(|| "quarry-discovery".to_string()),
        model: ctx.target.identity.model.clone(),
        firmware: ctx.target.identity.firmware.clone(),
        mdts: MDTS,
        cntlid: ctx.ctrl.cntlid,
        version: NVME_VERSION,
        oaes: if discovery { 0 } else { OAES_NS_ATTR },
        ctratt: 0,
        cntrltype: if discovery {
            CNTRLTYPE_DISCOVERY
        } else {
            CNTRLTYPE_IO
        },
        aerl: (MAX_AER - 1) as u8,
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        kas: KAS_100MS,
        maxcmd: MAX_QUEUE_ENTRIES,
        nn,
        oncs: if discovery {
            0
        } else {
            ONCS_DSM | ONCS_WRITE_ZEROES
        },
        vwc: !discovery,
        // SGLs supported; SGL offsets in the capsule (bit 20); on RDMA also Keyed SGL
        // Data Blocks (bit 2), which NVMe/RDMA hosts require.
        sgls: 1
            | (1 << 20)
            | if ctx.listener.trtype == TRTYPE_RDMA {
                1 << 2
            } else {
                0
            },
        subnqn: ctx.ctrl.subnqn.clone(),
        ioccsz: (64 + max_incapsule_data(ctx.listener.trtype)) / 16,
        iorcsz: 1,
        cmic: if discovery { 0 } else { 1 << 1 },
        lpa: 0x01 | 0x04,
    }
}

/// Highest NSID a controller reports (NN): namespaces can be added later up to this.
pub const MAX_NSID_REPORTED: u32 = 1024;

fn identify(ctx: &AdminCtx<'_>, sqe: &Sqe) -> AdminResult {
    let cns = (sqe.cdw(10) & 0xff) as u8;
    let nsid = sqe.nsid();
    if ctx.ctrl.kind == ControllerKind::Discovery && cns != CNS_CONTROLLER {
        return done(Status::generic(sc::INVALID_FIELD));
    }
    match cns {
        CNS_CONTROLLER => with_data(controller_info(ctx).encode()),
        CNS_NAMESPACE => {
            if nsid == 0 || nsid == u32::MAX {
                return done(Status::generic(sc::INVALID_NS));
            }
            match subsystem(ctx).and_then(|s| s.namespace(nsid)) {
                Some(ns) => {
                    let blocks = ns.blocks();
                    with_data(
                        NamespaceInfo {
                            nsze: blocks,
                            ncap: blocks,
                            nuse: blocks,
                            lbads: ns.lba_shift,
                            shared: true,
                            nguid: nguid(&ns.uuid),
                        }
                        .encode(),
                    )
                }
                // Inactive but valid NSID: a zeroed structure.
                None if nsid <= MAX_NSID_REPORTED => with_data(vec![0u8; IDENTIFY_LEN]),
                None => done(Status::generic(sc::INVALID_NS)),
            }
        }
        CNS_ACTIVE_NS_LIST => {
            if nsid >= 0xffff_fffe {
                return done(Status::generic(sc::INVALID_NS));
            }
            let ids = subsystem(ctx)
                .map(|s| s.namespaces.iter().map(|n| n.nsid).collect::<Vec<_>>())
                .unwrap_or_default();
            with_data(encode_ns_list(ids, nsid))
        }
        CNS_NS_DESC_LIST => match subsystem(ctx).and_then(|s| s.namespace(nsid)) {
            Some(ns) => with_data(encode_ns_descriptors(&nguid(&ns.uuid), &ns.uuid)),
            None => done(Status::generic(sc::INVALID_NS)),
        },
        CNS_CS_CONTROLLER if (sqe.cdw(11) >> 24) == 0 => with_data(vec![0u8; IDENTIFY_LEN]),
        _ => done(Status::generic(sc::INVALID_FIELD)),
    }
}

fn smart(ctx: &AdminCtx<'_>, nsid: u32) -> Result<Vec<u8>, Status> {
    let sub = subsystem(ctx);
    let mut c = SmartCounters {
        power_on_hours: ctx.now_ms / 3_600_000,
        error_entries: ctx.ctrl.error_log().1,
        ..Default::default()
    };
    let all = nsid == 0 || nsid == u32::MAX;
    let mut found = false;
    for ns in sub.map(|s| s.namespaces.as_slice()).unwrap_or_default() {
        if !all && ns.nsid != nsid {
            continue;
        }
        found = true;
        let k = &ns.counters;
        c.bytes_read += k.bytes_read.load(Ordering::Relaxed);
        c.bytes_written += k.bytes_written.load(Ordering::Relaxed);
        c.read_commands += k.read_commands.load(Ordering::Relaxed);
        c.write_commands += k.write_commands.load(Ordering::Relaxed);
        c.media_errors += k.media_errors.load(Ordering::Relaxed);
    }
    if !all && !found {
        return Err(Status::generic(sc::INVALID_NS));
    }
    Ok(c.encode())
}

fn discovery_log(ctx: &AdminCtx<'_>) -> Vec<u8> {
    // Each port a host may connect to, with wildcard addresses replaced by the address
    // this discovery connection arrived on (a host reaches the others the same way).
    let here = PortConfig {
        portid: 1,
        traddr: ctx.listener.traddr.clone(),
        trsvcid: ctx.listener.trsvcid.clone(),
        trtype: ctx.listener.trtype,
    };
    let ports: Vec<PortConfig> = if ctx.cfg.ports.is_empty() {
        vec![here]
    } else {
        ctx.cfg
            .ports
            .iter()
            .map(|p| PortConfig {
                traddr: if p.is_wildcard() {
                    ctx.listener.traddr.clone()
                } else {
                    p.traddr.clone()
                },
                ..p.clone()
            })
            .collect()
    };
    let entries: Vec<DiscoveryEntry> = ctx
        .cfg
        .subsystems
        .iter()
        .filter(|s| s.allows(&ctx.ctrl.hostnqn))
        .flat_map(|s| {
            ports.iter().map(move |p| DiscoveryEntry {
                trtype: p.trtype,
                adrfam: if p.traddr.contains(':') {
                    ADRFAM_IPV6
                } else {
                    ADRFAM_IPV4
                },
                subtype: SUBTYPE_NVM,
                // No secure channel required; SQ flow control disable supported.
                treq: 0x02 | 0x04,
                portid: p.portid,
                cntlid: DYNAMIC_CNTLID,
                asqsz: MAX_QUEUE_ENTRIES,
                trsvcid: p.trsvcid.clone(),
                subnqn: s.nqn.clone(),
                traddr: p.traddr.clone(),
            })
        })
        .take(MAX_DISCOVERY_ENTRIES)
        .collect();
    encode_discovery_log(ctx.target.discovery_genctr(), &entries)
}

fn get_log_page(ctx: &AdminCtx<'_>, sqe: &Sqe) -> AdminResult {
    let log_id = (sqe.cdw(10) & 0xff) as u8;
    let rae = sqe.cdw(10) & (1 << 15) != 0;
    let numd = ((sqe.cdw(10) >> 16) | ((sqe.cdw(11) & 0xffff) << 16)).saturating_add(1);
    let Some(len) = numd.checked_mul(4).filter(|&l| l <= MAX_LOG_TRANSFER) else {
        return done(Status::generic(sc::INVALID_FIELD));
    };
    let offset = u64::from(sqe.cdw(12)) | (u64::from(sqe.cdw(13)) << 32);
    let discovery = ctx.ctrl.kind == ControllerKind::Discovery;
    let page = match (log_id, discovery) {
        (lid::DISCOVERY, true) => discovery_log(ctx),
        (lid::ERROR, false) => ctx.ctrl.error_log().0,
        (lid::SMART, false) => match smart(ctx, sqe.nsid()) {
            Ok(p) => p,
            Err(s) => return done(s),
        },
        (lid::FW_SLOT, false) => encode_fw_slot(&ctx.target.identity.firmware),
        (lid::CHANGED_NS, false) => {
            let mut a = ctx.ctrl.admin();
            let ids: Vec<u32> = a.changed_nsids.iter().copied().collect();
            if !rae {
                a.changed_nsids.clear();
                a.ns_event_masked = false;
            }
            encode_changed_ns(&ids)
        }
        _ => return done(Status::specific(sc::INVALID_LOG_PAGE)),
    };
    let Ok(off) = usize::try_from(offset) else {
        return done(Status::generic(sc::INVALID_FIELD));
    };
    if off > page.len() {
        return done(Status::generic(sc::INVALID_FIELD));
    }
    let len = len as usize;
    let mut out = Vec::with_capacity(len);
    out.extend(page.get(off..).unwrap_or_default().iter().take(len));
    out.resize(len, 0);
    with_data(out)
}

fn set_features(ctx: &AdminCtx<'_>, sqe: &Sqe, _data: &[u8]) -> AdminResult {
    let f = (sqe.cdw(10) & 0xff) as u8;
    if sqe.cdw(10) & (1 << 31) != 0 {
        return done(Status::specific(sc::FEATURE_NOT_SAVEABLE));
    }
    let v = sqe.cdw(11);
    let discovery = ctx.ctrl.kind == ControllerKind::Discovery;
    let mut a = ctx.ctrl.admin();
    match f {
        fid::KATO => {
            a.kato_ms = v;
            drop(a);
            ctx.ctrl.touch(ctx.now_ms);
            done(Status::SUCCESS)
        }
        fid::ASYNC_EVENT => {
            a.aen_config = v;
            done(Status::SUCCESS)
        }
        fid::NUM_QUEUES if !discovery => {
            let nsqr = v & 0xffff;
            let ncqr = v >> 16;
            if nsqr == 0xffff || ncqr == 0xffff {
                return done(Status::generic(sc::INVALID_FIELD));
            }
            if !a.io_queues.is_empty() {
                return done(Status::generic(sc::COMMAND_SEQUENCE));
            }
            let want = (nsqr.min(ncqr) + 1).min(u32::from(MAX_IO_QUEUES));
            let granted = u16::try_from(want).unwrap_or(MAX_IO_QUEUES);
            a.io_queues_granted = Some(granted);
            let z = u32::from(granted - 1);
            done_dw0(z | (z << 16))
        }
        fid::VOLATILE_WC if !discovery => {
            a.write_cache = v & 1 != 0;
            done(Status::SUCCESS)
        }
        _ => done(Status::generic(sc::INVALID_FIELD)),
    }
}

fn get_features(ctx: &AdminCtx<'_>, sqe: &Sqe) -> AdminResult {
    let f = (sqe.cdw(10) & 0xff) as u8;
    let sel = (sqe.cdw(10) >> 8) & 0x7;
    let discovery = ctx.ctrl.kind == ControllerKind::Discovery;
    if sel == 3 {
        // Supported capabilities: changeable, not saveable.
        return match f {
            fid::KATO | fid::ASYNC_EVENT | fid::NUM_QUEUES | fid::VOLATILE_WC => done_dw0(1 << 2),
            _ => done(Status::generic(sc::INVALID_FIELD)),
        };
    }
    let a = ctx.ctrl.admin();
    match f {
        fid::KATO => done_dw0(a.kato_ms),
        fid::ASYNC_EVENT => done_dw0(a.aen_config),
        fid::NUM_QUEUES if !discovery => {
            let z = u32::from(a.io_queues_granted.unwrap_or(MAX_IO_QUEUES) - 1);
            done_dw0(z | (z << 16))
        }
        fid::VOLATILE_WC if !discovery => done_dw0(u32::from(a.write_cache)),
        _ => done(Status::generic(sc::INVALID_FIELD)),
    }
}
