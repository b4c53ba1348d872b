//! Drives the queue state machine through real PDUs, with no sockets and virtual time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::config::BlockDevice as _;
use super::mem::MemDevice;
use super::*;
use crate::spec::fabrics::FCTYPE_PROPERTY_SET;
use crate::spec::fabrics::{prop, ConnectCmd, ConnectData, FCTYPE_CONNECT, FCTYPE_PROPERTY_GET};
use crate::spec::identify::decode_ns_list;
use crate::spec::log::{
    decode_discovery_log, DiscoveryEntry, ADRFAM_IPV4, ADRFAM_IPV6, TRTYPE_RDMA, TRTYPE_TCP,
};
use crate::spec::{
    admin_opc, io_opc, sc, Cqe, Sgl, Sqe, Status, SGL_ID_INCAPSULE, SGL_ID_TRANSPORT,
};
use crate::tcp::{self, decode, frame_len, DecodeContext, Digests, IcReq, Pdu};

const NQN: &str = "nqn.2024-01.io.lab:tcp-loop";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:06bf3b55-7c17-492b-8648-391f3fcbedea";
const HOSTID: [u8; 16] = [
    0x06, 0xbf, 0x3b, 0x55, 0x7c, 0x17, 0x49, 0x2b, 0x86, 0x48, 0x39, 0x1f, 0x3f, 0xcb, 0xed, 0xea,
];
const BLOCKS: u64 = 256;

fn ns(nsid: u32, dev: Arc<MemDevice>) -> NamespaceConfig {
    NamespaceConfig {
        nsid,
        uuid: [nsid as u8; 16],
        lba_shift: 12,
        size_bytes: dev.size_bytes(),
        device: dev,
        counters: Arc::new(IoCounters::default()),
        label: format!("vol{nsid}"),
    }
}

fn config(hosts: Option<Vec<String>>, namespaces: Vec<NamespaceConfig>) -> TargetConfig {
    TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            serial: "QTEST0001".into(),
            allow_any_host: hosts.is_none(),
            hosts: hosts.unwrap_or_default(),
            namespaces,
        }],
        ports: vec![],
    }
}

fn target() -> Arc<Target> {
    let dev = Arc::new(MemDevice::new((BLOCKS * 4096) as usize));
    Target::new(
        config(None, vec![ns(1, dev)]),
        TargetIdentity::default(),
        None,
    )
}

fn listener() -> ListenerInfo {
    ListenerInfo {
        traddr: "127.0.0.1".into(),
        trsvcid: "4420".into(),
        ipv6: false,
        trtype: TRTYPE_TCP,
    }
}

#[derive(Debug, PartialEq)]
enum Got {
    IcResp(tcp::IcResp),
    Resp(Cqe),
    C2h { cid: u16, data: Vec<u8>, flags: u8 },
    R2t(tcp::R2t),
    Term { fes: u16, fei: u32 },
    Close,
}

/// A scripted host on the other end of one queue.
struct Host {
    q: Queue,
    digests: Digests,
    now: u64,
    raw: Vec<u8>,
    /// The transport's turn clock: each send starts a turn at it, and each storage
    /// operation finishes `io_took` later, in a turn of its own.
    clock: Instant,
    io_took: Duration,
}

impl Host {
    fn new(t: &Arc<Target>) -> Self {
        Host {
            q: Queue::new(t.clone(), listener(), "test".into()),
            digests: Digests::NONE,
            now: 0,
            raw: Vec::new(),
            clock: Instant::now(),
            io_took: Duration::ZERO,
        }
    }

    /// Feeds raw bytes (one or more whole PDUs) and collects what the target answers.
    fn send(&mut self, bytes: &[u8]) -> Vec<Got> {
        self.q.begin_turn(self.clock);
        let mut rest = bytes;
        while !rest.is_empty() {
            let ctx = self.q.decode_context();
            let n = match frame_len(rest, &ctx) {
                Ok(Some(n)) if n <= rest.len() => n,
                Ok(_) => panic!("short PDU in test"),
                Err(e) => {
                    self.q.decode_error(&e, &rest[..rest.len().min(24)]);
                    break;
                }
            };
            let frame = &rest[..n];
            match decode(frame, &ctx) {
                Ok(p) => self
                    .q
                    .handle_pdu(p, &frame[..frame.len().min(72)], self.now),
                Err(e) => self.q.decode_error(&e, &frame[..frame.len().min(72)]),
            }
            rest = &rest[n..];
        }
        self.drain()
    }

    fn drain(&mut self) -> Vec<Got> {
        let mut got = Vec::new();
        while let Some(o) = self.q.poll_output() {
            match o {
                Output::Send(b) => {
                    self.raw.extend_from_slice(&b);
                    got.extend(self.parse(&b));
                }
                Output::SendData { head, data, tail } => {
                    let b = [&head[..], &data[..], &tail[..]].concat();
                    self.raw.extend_from_slice(&b);
                    got.extend(self.parse(&b));
                }
                Output::Io(req) => {
                    let r = req.execute();
                    self.clock += self.io_took;
                    self.q.begin_turn(self.clock);
                    self.q.io_done(&req, r);
                }
                Output::Close => got.push(Got::Close),
                o @ (Output::FetchData { .. } | Output::Respond { .. }) => {
                    panic!("RDMA output on a TCP queue: {o:?}")
                }
            }
        }
        got
    }

    fn parse(&mut self, mut b: &[u8]) -> Vec<Got> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let ctx = DecodeContext {
                digests: self.digests,
                ..Default::default()
            };
            let n = frame_len(b, &ctx).unwrap().unwrap();
            out.push(match decode(&b[..n], &ctx).unwrap() {
                Pdu::IcResp(r) => {
                    self.digests = Digests::from_dgst(r.dgst);
                    Got::IcResp(r)
                }
                Pdu::CapsuleResp(r) => Got::Resp(r.cqe),
                Pdu::C2hData(d) => Got::C2h {
                    cid: d.cccid,
                    data: d.data.to_vec(),
                    flags: d.flags,
                },
                Pdu::R2t(r) => Got::R2t(r),
                Pdu::C2hTermReq(t) => Got::Term {
                    fes: t.fes,
                    fei: t.fei,
                },
                other => panic!("unexpected {other:?}"),
            });
            b = &b[n..];
        }
        out
    }

    fn icreq(&mut self, d: Digests) {
        let mut b = Vec::new();
        tcp::encode_icreq(
            &mut b,
            &IcReq {
                pfv: 0,
                hpda: 0,
                dgst: d.dgst(),
                maxr2t: 0,
            },
        );
        let g = self.send(&b);
        assert!(matches!(g[..], [Got::IcResp(_)]), "{g:?}");
    }

    fn cmd(&mut self, sqe: &Sqe, data: &[u8]) -> Vec<Got> {
        let mut b = Vec::new();
        tcp::encode_capsule_cmd(&mut b, sqe, data, self.digests, 0);
        self.send(&b)
    }

    fn connect(&mut self, qid: u16, cntlid: u16, hostnqn: &str) -> Cqe {
        let mut sqe = Sqe::new(admin_opc::FABRICS, 0x100 + qid);
        sqe.set_fctype(FCTYPE_CONNECT);
        ConnectCmd {
            recfmt: 0,
            qid,
            sqsize: 31,
            cattr: 0,
            kato: 5000,
        }
        .write(&mut sqe);
        sqe.set_sgl(Sgl {
            addr: 0,
            len: 1024,
            id: SGL_ID_INCAPSULE,
        });
        let data = ConnectData {
            hostid: HOSTID,
            cntlid,
            subnqn: NQN.into(),
            hostnqn: hostnqn.into(),
        }
        .to_bytes();
        let g = self.cmd(&sqe, &data);
        match &g[..] {
            [Got::Resp(c)] => *c,
            other => panic!("{other:?}"),
        }
    }

    fn resp(&mut self, sqe: &Sqe, data: &[u8]) -> Cqe {
        match &self.cmd(sqe, data)[..] {
            [Got::Resp(c)] => *c,
            other => panic!("{other:?}"),
        }
    }

    /// A command returning data: (data, cqe).
    fn read_cmd(&mut self, sqe: &Sqe) -> (Vec<u8>, Cqe) {
        match &self.cmd(sqe, &[])[..] {
            [Got::C2h { data, .. }, Got::Resp(c)] => (data.clone(), *c),
            other => panic!("{other:?}"),
        }
    }

    fn enable(&mut self) {
        let mut sqe = Sqe::new(admin_opc::FABRICS, 1);
        sqe.set_fctype(FCTYPE_PROPERTY_SET);
        sqe.set_cdw(11, prop::CC);
        sqe.set_cdw(12, 1 | (6 << 16) | (4 << 20));
        assert!(self.resp(&sqe, &[]).status().is_success());
    }
}

fn transport_sgl(sqe: &mut Sqe, len: u32) {
    sqe.set_sgl(Sgl {
        addr: 0,
        len,
        id: SGL_ID_TRANSPORT,
    });
}

fn identify(cns: u8, nsid: u32) -> Sqe {
    let mut s = Sqe::new(admin_opc::IDENTIFY, 9);
    s.set_nsid(nsid);
    s.set_cdw(10, u32::from(cns));
    transport_sgl(&mut s, 4096);
    s
}

fn rw(op: u8, cid: u16, slba: u64, nlb: u32, len: u32, incapsule: bool) -> Sqe {
    let mut s = Sqe::new(op, cid);
    s.set_nsid(1);
    s.set_cdw(10, slba as u32);
    s.set_cdw(11, (slba >> 32) as u32);
    s.set_cdw(12, nlb - 1);
    s.set_sgl(Sgl {
        addr: 0,
        len,
        id: if incapsule {
            SGL_ID_INCAPSULE
        } else {
            SGL_ID_TRANSPORT
        },
    });
    s
}

fn vec_of(name: &str) -> Vec<u8> {
    let text = match name {
        "icreq" => include_str!("../../vectors/icreq.hex"),
        "icreq-digest" => include_str!("../../vectors/icreq-digest.hex"),
        "connect" => include_str!("../../vectors/connect-capsule.hex"),
        "connect-digest" => include_str!("../../vectors/connect-capsule-digest.hex"),
        "icresp" => include_str!("../../vectors/target-icresp.hex"),
        "icresp-digest" => include_str!("../../vectors/target-digest-icresp.hex"),
        "resp" => include_str!("../../vectors/target-connect-resp.hex"),
        _ => include_str!("../../vectors/target-digest-connect-resp.hex"),
    };
    crate::tcp::tests::vector(text)
}

/// The Linux 6.1 ICReq + Connect get the same answer bytes nvmet-tcp gave, except
/// MAXH2CDATA (ours is 1 MiB).
#[test]
fn linux_connect_vectors_get_nvmet_answers() {
    for (ic, conn, icresp, resp) in [
        ("icreq", "connect", "icresp", "resp"),
        (
            "icreq-digest",
            "connect-digest",
            "icresp-digest",
            "resp-digest",
        ),
    ] {
        let t = target();
        let mut h = Host::new(&t);
        h.send(&vec_of(ic));
        let mut want = vec_of(icresp);
        want[12..16].copy_from_slice(&limits::MAX_H2C_DATA.to_le_bytes());
        assert_eq!(h.raw, want, "{ic}");
        h.raw.clear();
        let g = h.send(&vec_of(conn));
        assert!(matches!(g[..], [Got::Resp(_)]));
        assert_eq!(h.raw, vec_of(resp), "{conn}");
        assert_eq!(t.controller_count(), 1);
    }
}

#[test]
fn admin_bringup_identify_and_properties() {
    let t = target();
    let mut h = Host::new(&t);
    h.icreq(Digests::NONE);
    let c = h.connect(0, 0xffff, HOSTNQN);
    assert!(c.status().is_success());
    let cntlid = c.dw0 as u16;
    // Before CC.EN, admin commands are a sequence error.
    let c = h.resp(&identify(1, 0), &[]);
    assert_eq!(c.status(), Status::generic(sc::COMMAND_SEQUENCE));
    let mut pg = Sqe::new(admin_opc::FABRICS, 2);
    pg.set_fctype(FCTYPE_PROPERTY_GET);
    pg.set_cdw(10, 1);
    pg.set_cdw(11, prop::CAP);
    let cap = h.resp(&pg, &[]);
    assert_eq!(cap.dw0 & 0xffff, u32::from(limits::MAX_QUEUE_ENTRIES - 1));
    assert_eq!(cap.dw1 & (1 << 5), 1 << 5, "CSS NVM");
    h.enable();
    pg.set_cdw(10, 0);
    pg.set_cdw(11, prop::CSTS);
    assert_eq!(h.resp(&pg, &[]).dw0 & 1, 1);

    let (id, c) = h.read_cmd(&identify(1, 0));
    assert!(c.status().is_success());
    assert_eq!(u16::from_le_bytes([id[78], id[79]]), cntlid);
    assert_eq!(&id[768..768 + NQN.len()], NQN.as_bytes());
    assert_eq!(&id[4..13], b"QTEST0001");
    assert_eq!(model_number(&id), crate::target::config::MODEL);
    // IOCCSZ: the SQE plus 128 KiB of in-capsule data on NVMe/TCP.
    assert_eq!(
        u32::from_le_bytes([id[1792], id[1793], id[1794], id[1795]]) * 16,
        64 + 128 * 1024
    );

    let (list, _) = h.read_cmd(&identify(2, 0));
    assert_eq!(decode_ns_list(&list), vec![1]);
    let (nsid, _) = h.read_cmd(&identify(0, 1));
    assert_eq!(u64::from_le_bytes(nsid[0..8].try_into().unwrap()), BLOCKS);
    assert_eq!(nsid[130], 12);
    let (desc, _) = h.read_cmd(&identify(3, 1));
    assert_eq!((desc[0], desc[1], desc[20]), (2, 16, 3));
    // Inactive NSID: zeroes; NSID 0: invalid namespace.
    let (z, _) = h.read_cmd(&identify(0, 7));
    assert!(z.iter().all(|&b| b == 0));
    let c = h.resp(&identify(0, 0), &[]);
    assert_eq!(c.status(), Status::generic(sc::INVALID_NS));
    // Unknown admin opcode.
    let c = h.resp(&Sqe::new(0x55, 3), &[]);
    assert_eq!(c.status(), Status::generic(sc::INVALID_OPCODE));
}

/// Identify Controller's model number (bytes 24-63, ASCII padded with spaces).
fn model_number(id: &[u8]) -> &str {
    std::str::from_utf8(&id[24..64]).unwrap().trim_end()
}

fn io_queue(t: &Arc<Target>, d: Digests) -> (Host, Host) {
    let mut a = Host::new(t);
    a.icreq(d);
    let cntlid = a.connect(0, 0xffff, HOSTNQN).dw0 as u16;
    a.enable();
    let mut io = Host::new(t);
    io.icreq(d);
    let c = io.connect(1, cntlid, HOSTNQN);
    assert!(c.status().is_success(), "{c:?}");
    (a, io)
}

#[test]
fn io_write_read_incapsule_and_r2t_with_and_without_digests() {
    for d in [
        Digests::NONE,
        Digests {
            header: true,
            data: true,
        },
    ] {
        let t = target();
        let (_a, mut io) = io_queue(&t, d);
        // In-capsule 4 KiB write.
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let c = io.resp(&rw(io_opc::WRITE, 1, 3, 1, 4096, true), &data);
        assert!(c.status().is_success());
        // 64 KiB write via R2T, sent in two H2CData PDUs.
        let big: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        let g = io.cmd(&rw(io_opc::WRITE, 2, 10, 16, 65536, false), &[]);
        let [Got::R2t(r)] = g[..] else {
            panic!("{g:?}")
        };
        assert_eq!((r.cccid, r.r2to, r.r2tl), (2, 0, 65536));
        let mut b = Vec::new();
        tcp::encode_h2c_data(&mut b, 2, r.ttag, 0, &big[..30000], false, d, 0);
        assert!(io.send(&b).is_empty());
        let mut b = Vec::new();
        tcp::encode_h2c_data(&mut b, 2, r.ttag, 30000, &big[30000..], true, d, 0);
        let g = io.send(&b);
        assert!(matches!(g[..], [Got::Resp(c)] if c.status().is_success() && c.cid == 2));
        // Read both back.
        let (got, c) = io.read_cmd(&rw(io_opc::READ, 3, 3, 1, 4096, false));
        assert!(c.status().is_success());
        assert_eq!(got, data);
        let (got, _) = io.read_cmd(&rw(io_opc::READ, 4, 10, 16, 65536, false));
        assert_eq!(got, big);
        // A 128 KiB write fits in its capsule (no R2T); one block more does not.
        let capsule: Vec<u8> = (0..131072u32).map(|i| (i % 249) as u8).collect();
        let c = io.resp(&rw(io_opc::WRITE, 8, 40, 32, 131072, true), &capsule);
        assert!(c.status().is_success(), "{c:?}");
        let (got, _) = io.read_cmd(&rw(io_opc::READ, 9, 40, 32, 131072, false));
        assert_eq!(got, capsule);
        let over = vec![7u8; 131072 + 4096];
        let c = io.resp(&rw(io_opc::WRITE, 10, 40, 33, 131072 + 4096, true), &over);
        assert_eq!(c.status(), Status::generic(sc::SGL_OFFSET_INVALID));
        // Flush, write zeroes, read zeroes.
        let mut f = Sqe::new(io_opc::FLUSH, 5);
        f.set_nsid(1);
        assert!(io.resp(&f, &[]).status().is_success());
        let mut wz = rw(io_opc::WRITE_ZEROES, 6, 10, 16, 0, false);
        transport_sgl(&mut wz, 0);
        assert!(io.resp(&wz, &[]).status().is_success());
        let (got, _) = io.read_cmd(&rw(io_opc::READ, 7, 10, 1, 4096, false));
        assert!(got.iter().all(|&b| b == 0));
        // SMART reflects the traffic.
        let ns = t.config().subsystems[0].namespaces[0].counters.clone();
        assert_eq!(
            ns.bytes_written.load(std::sync::atomic::Ordering::Relaxed),
            4096 + 65536 + 131072
        );
    }
}

#[test]
fn io_errors_are_statuses() {
    let t = target();
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    let c = io.resp(&rw(io_opc::READ, 1, BLOCKS, 1, 4096, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::LBA_OUT_OF_RANGE));
    let c = io.resp(&rw(io_opc::READ, 1, u64::MAX, 2, 8192, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::LBA_OUT_OF_RANGE));
    let c = io.resp(&rw(0x7e, 2, 0, 1, 0, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::INVALID_OPCODE));
    let mut r = rw(io_opc::READ, 3, 0, 1, 4096, false);
    r.set_nsid(2);
    assert_eq!(io.resp(&r, &[]).status(), Status::generic(sc::INVALID_NS));
    // SGL length disagreeing with NLB.
    let c = io.resp(&rw(io_opc::READ, 4, 0, 2, 4096, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::SGL_LENGTH_INVALID));
    // Write beyond the end is refused before any R2T.
    let c = io.resp(&rw(io_opc::WRITE, 5, BLOCKS - 1, 2, 8192, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::LBA_OUT_OF_RANGE));
    // DSM deallocate of a range, then out of range.
    let mut dsm = Sqe::new(io_opc::DSM, 6);
    dsm.set_nsid(1);
    dsm.set_cdw(11, 1 << 2);
    dsm.set_sgl(Sgl {
        addr: 0,
        len: 16,
        id: SGL_ID_INCAPSULE,
    });
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&4u32.to_le_bytes());
    range[8..16].copy_from_slice(&1u64.to_le_bytes());
    assert!(io.resp(&dsm, &range).status().is_success());
    range[8..16].copy_from_slice(&BLOCKS.to_le_bytes());
    assert_eq!(
        io.resp(&dsm, &range).status(),
        Status::generic(sc::LBA_OUT_OF_RANGE)
    );
    assert_eq!(io.q.inflight(), 0);
}

#[test]
fn host_not_allowed_is_refused() {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let t = Target::new(
        config(Some(vec!["nqn.allowed".into()]), vec![ns(1, dev)]),
        TargetIdentity::default(),
        None,
    );
    let mut h = Host::new(&t);
    h.icreq(Digests::NONE);
    let c = h.connect(0, 0xffff, HOSTNQN);
    assert_eq!(c.status(), Status::specific(sc::CONNECT_INVALID_HOST));
    let mut h = Host::new(&t);
    h.icreq(Digests::NONE);
    assert!(h.connect(0, 0xffff, "nqn.allowed").status().is_success());
    // An I/O queue naming a controller that does not exist.
    let mut io = Host::new(&t);
    io.icreq(Digests::NONE);
    let c = io.connect(1, 0x77, "nqn.allowed");
    assert_eq!(c.status(), Status::specific(sc::CONNECT_INVALID_PARAM));
    assert_eq!(c.dw0, (1 << 16) | 16);
}

#[test]
fn namespace_added_raises_aen_and_changed_list() {
    let t = target();
    let (mut a, _io) = io_queue(&t, Digests::NONE);
    let mut sf = Sqe::new(admin_opc::SET_FEATURES, 20);
    sf.set_cdw(10, u32::from(crate::spec::fid::ASYNC_EVENT));
    sf.set_cdw(11, 1 << 8);
    assert!(a.resp(&sf, &[]).status().is_success());
    let aer = Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 21);
    assert!(a.cmd(&aer, &[]).is_empty());
    let d1 = Arc::new(MemDevice::new(1 << 20));
    let d2 = Arc::new(MemDevice::new(1 << 20));
    t.update_config(config(None, vec![ns(1, d1), ns(2, d2)]));
    a.q.poll_events();
    let g = a.drain();
    let [Got::Resp(c)] = g[..] else {
        panic!("{g:?}")
    };
    assert_eq!((c.cid, c.dw0), (21, 0x0004_0002));
    let mut lp = Sqe::new(admin_opc::GET_LOG_PAGE, 22);
    lp.set_cdw(10, 0x04 | (1023 << 16));
    transport_sgl(&mut lp, 4096);
    let (log, _) = a.read_cmd(&lp);
    assert_eq!(decode_ns_list(&log), vec![2]);
    let (list, _) = a.read_cmd(&identify(2, 0));
    assert_eq!(decode_ns_list(&list), vec![1, 2]);
}

#[test]
fn keep_alive_expiry_tears_down_controller() {
    let t = target();
    let (mut a, mut io) = io_queue(&t, Digests::NONE);
    a.now = 4000;
    let ka = Sqe::new(admin_opc::KEEP_ALIVE, 30);
    assert!(a.resp(&ka, &[]).status().is_success());
    a.q.tick(4000 + 5000 + limits::KATO_GRACE_MS - 1);
    assert!(a.drain().is_empty());
    a.q.tick(4000 + 5000 + limits::KATO_GRACE_MS + 1);
    assert_eq!(a.drain(), vec![Got::Close]);
    assert_eq!(t.controller_count(), 0);
    io.q.tick(20_000);
    assert_eq!(io.drain(), vec![Got::Close]);
}

#[test]
fn hostile_pdus_terminate() {
    let t = target();
    // Capsule before ICReq: closed without a TermReq (no connection yet).
    let mut h = Host::new(&t);
    let g = h.cmd(&Sqe::new(0x06, 1), &[]);
    assert_eq!(g, vec![Got::Close]);
    // H2CData with no R2T outstanding.
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    let mut b = Vec::new();
    tcp::encode_h2c_data(&mut b, 9, 0, 0, &[0; 512], true, Digests::NONE, 0);
    let g = io.send(&b);
    assert!(
        matches!(g[..], [Got::Term { fes: 1, fei: 8 }, Got::Close]),
        "{g:?}"
    );
    // Data past the R2T window.
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    let g = io.cmd(&rw(io_opc::WRITE, 2, 0, 1, 4096, false), &[]);
    let [Got::R2t(r)] = g[..] else { panic!() };
    let mut b = Vec::new();
    tcp::encode_h2c_data(&mut b, 2, r.ttag, 0, &[0; 8192], true, Digests::NONE, 0);
    let g = io.send(&b);
    assert!(
        matches!(g[..], [Got::Term { fes: 4, .. }, Got::Close]),
        "{g:?}"
    );
    // Bad header digest.
    let d = Digests {
        header: true,
        data: false,
    };
    let (_a, mut io) = io_queue(&t, d);
    let mut b = Vec::new();
    tcp::encode_capsule_cmd(&mut b, &rw(io_opc::READ, 3, 0, 1, 4096, false), &[], d, 0);
    b[20] ^= 0xff;
    let g = io.send(&b);
    assert!(
        matches!(g[..], [Got::Term { fes: 3, .. }, Got::Close]),
        "{g:?}"
    );
    // Oversized PLEN.
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    let mut b = Vec::new();
    tcp::encode_capsule_cmd(
        &mut b,
        &rw(io_opc::READ, 3, 0, 1, 4096, false),
        &[],
        Digests::NONE,
        0,
    );
    b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let g = io.send(&b);
    assert!(
        matches!(g[..], [Got::Term { fes: 1, fei: 4 }, Got::Close]),
        "{g:?}"
    );
    // The target still serves a fresh connection.
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    let (_, c) = io.read_cmd(&rw(io_opc::READ, 4, 0, 1, 4096, false));
    assert!(c.status().is_success());
}

#[test]
fn discovery_log_lists_allowed_subsystems() {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let mut cfg = config(None, vec![ns(1, dev)]);
    cfg.subsystems.push(SubsystemConfig {
        nqn: "nqn.private".into(),
        serial: "S2".into(),
        allow_any_host: false,
        hosts: vec!["nqn.other".into()],
        namespaces: vec![],
    });
    let t = Target::new(cfg, TargetIdentity::default(), None);
    let mut h = Host::new(&t);
    h.icreq(Digests::NONE);
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
    sqe.set_fctype(FCTYPE_CONNECT);
    ConnectCmd {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 0,
    }
    .write(&mut sqe);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 1024,
        id: SGL_ID_INCAPSULE,
    });
    let data = ConnectData {
        hostid: HOSTID,
        cntlid: 0xffff,
        subnqn: crate::spec::DISCOVERY_NQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    let c = h.resp(&sqe, &data);
    assert!(c.status().is_success());
    h.enable();
    let (id, _) = h.read_cmd(&identify(1, 0));
    assert_eq!(id[111], 2, "discovery controller type");
    let mut lp = Sqe::new(admin_opc::GET_LOG_PAGE, 5);
    lp.set_cdw(10, 0x70 | (((4096 / 4) - 1) << 16));
    transport_sgl(&mut lp, 4096);
    let (log, c) = h.read_cmd(&lp);
    assert!(c.status().is_success());
    let (_, entries) = decode_discovery_log(&log).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].subnqn, NQN);
    assert_eq!(entries[0].trsvcid, "4420");
    // Identify Namespace is not for discovery controllers.
    let c = h.resp(&identify(0, 1), &[]);
    assert_eq!(c.status(), Status::generic(sc::INVALID_FIELD));
}

/// Connects a discovery controller and returns its discovery log entries.
fn discovery_entries(t: &Arc<Target>) -> Vec<DiscoveryEntry> {
    let mut h = Host::new(t);
    h.icreq(Digests::NONE);
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
    sqe.set_fctype(FCTYPE_CONNECT);
    ConnectCmd {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 0,
    }
    .write(&mut sqe);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 1024,
        id: SGL_ID_INCAPSULE,
    });
    let data = ConnectData {
        hostid: HOSTID,
        cntlid: 0xffff,
        subnqn: crate::spec::DISCOVERY_NQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    assert!(h.resp(&sqe, &data).status().is_success());
    h.enable();
    let mut lp = Sqe::new(admin_opc::GET_LOG_PAGE, 5);
    lp.set_cdw(10, 0x70 | (((8192 / 4) - 1) << 16));
    transport_sgl(&mut lp, 8192);
    let (log, c) = h.read_cmd(&lp);
    assert!(c.status().is_success());
    decode_discovery_log(&log).unwrap().1
}

#[test]
fn discovery_log_lists_every_port_with_wildcards_resolved() {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let mut cfg = config(None, vec![ns(1, dev)]);
    cfg.ports = vec![
        PortConfig {
            portid: 1,
            traddr: "0.0.0.0".into(),
            trsvcid: "4420".into(),
            trtype: TRTYPE_TCP,
        },
        PortConfig {
            portid: 2,
            traddr: "fd00::7".into(),
            trsvcid: "4421".into(),
            trtype: TRTYPE_RDMA,
        },
    ];
    let t = Target::new(cfg, TargetIdentity::default(), None);
    let entries = discovery_entries(&t);
    assert_eq!(entries.len(), 2, "{entries:?}");
    // The wildcard port is reported with the address the host reached us on.
    assert_eq!(entries[0].traddr, "127.0.0.1");
    assert_eq!(entries[0].portid, 1);
    assert_eq!(entries[0].adrfam, ADRFAM_IPV4);
    assert_eq!(entries[1].traddr, "fd00::7");
    assert_eq!(entries[1].trsvcid, "4421");
    // Each port's transport is its own: TCP and RDMA listeners side by side.
    assert_eq!(entries[0].trtype, TRTYPE_TCP);
    assert_eq!(entries[1].trtype, TRTYPE_RDMA);
    assert_eq!(entries[1].portid, 2);
    assert_eq!(entries[1].adrfam, ADRFAM_IPV6);
    assert!(entries.iter().all(|e| e.subnqn == NQN));
}

/// Keeps every latency its controllers report.
#[derive(Default)]
struct Latencies(Mutex<Vec<(IoKind, Duration, bool)>>);

impl SessionObserver for Latencies {
    fn bytes_read(&self, _: u64) {}
    fn bytes_written(&self, _: u64) {}
    fn is_cancelled(&self) -> bool {
        false
    }
    fn io_completed(&self, kind: IoKind, elapsed: Duration, ok: bool) {
        self.0.lock().unwrap().push((kind, elapsed, ok));
    }
}

/// Hooks handing every controller one shared [`Latencies`].
struct Shared(Arc<Latencies>);

impl SessionHooks for Shared {
    fn controller_created(&self, _: &str, _: &str, _: &str, _: u16) -> Arc<dyn SessionObserver> {
        self.0.clone()
    }
}

#[test]
fn latency_runs_from_the_dispatching_turn_to_the_finishing_turn() {
    let seen = Arc::new(Latencies::default());
    let dev = Arc::new(MemDevice::new((BLOCKS * 4096) as usize));
    let t = Target::new(
        config(None, vec![ns(1, dev)]),
        TargetIdentity::default(),
        Some(Arc::new(Shared(seen.clone()))),
    );
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    io.io_took = Duration::from_micros(730);
    let c = io.resp(&rw(io_opc::WRITE, 1, 3, 1, 4096, true), &[9; 4096]);
    assert!(c.status().is_success());
    io.io_took = Duration::from_millis(12);
    let (got, c) = io.read_cmd(&rw(io_opc::READ, 2, 3, 1, 4096, false));
    assert!(c.status().is_success());
    assert_eq!(got, [9; 4096]);
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            (IoKind::Write, Duration::from_micros(730), true),
            (IoKind::Read, Duration::from_millis(12), true),
        ]
    );
}

#[test]
fn sq_flow_control_disabled_uses_success_flag() {
    let t = target();
    let mut a = Host::new(&t);
    a.icreq(Digests::NONE);
    let cntlid = a.connect(0, 0xffff, HOSTNQN).dw0 as u16;
    a.enable();
    let mut io = Host::new(&t);
    io.icreq(Digests::NONE);
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0x101);
    sqe.set_fctype(FCTYPE_CONNECT);
    ConnectCmd {
        recfmt: 0,
        qid: 1,
        sqsize: 31,
        cattr: 1 << 2,
        kato: 0,
    }
    .write(&mut sqe);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 1024,
        id: SGL_ID_INCAPSULE,
    });
    let data = ConnectData {
        hostid: HOSTID,
        cntlid,
        subnqn: NQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    assert!(io.resp(&sqe, &data).status().is_success());
    let g = io.cmd(&rw(io_opc::READ, 5, 0, 2, 8192, false), &[]);
    match &g[..] {
        [Got::C2h {
            cid: 5,
            data,
            flags,
        }] => {
            assert_eq!(data.len(), 8192);
            assert_eq!(flags & (tcp::FLAG_SUCCESS | tcp::FLAG_LAST_PDU), 0x0c);
        }
        other => panic!("{other:?}"),
    }
    // Errors still get a CapsuleResp.
    let c = io.resp(&rw(io_opc::READ, 6, BLOCKS, 1, 4096, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::LBA_OUT_OF_RANGE));
}

#[test]
fn storage_budget_bounds_inflight_reads() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    let t = Target::new(
        config(None, vec![ns(1, dev)]),
        TargetIdentity::default(),
        None,
    );
    let (_a, mut io) = io_queue(&t, Digests::NONE);
    let mut b = Vec::new();
    for cid in 0..24u16 {
        let sqe = rw(io_opc::READ, cid, u64::from(cid) * 256, 256, 1 << 20, false);
        tcp::encode_capsule_cmd(&mut b, &sqe, &[], Digests::NONE, 0);
    }
    // Feed the PDUs without running storage: only the budget's worth is released.
    let mut rest = &b[..];
    while !rest.is_empty() {
        let ctx = io.q.decode_context();
        let n = frame_len(rest, &ctx).unwrap().unwrap();
        let p = decode(&rest[..n], &ctx).unwrap();
        io.q.handle_pdu(p, &[], 0);
        rest = &rest[n..];
    }
    let mut reqs = Vec::new();
    while let Some(o) = io.q.poll_output() {
        match o {
            Output::Io(r) => reqs.push(r),
            other => panic!("{other:?}"),
        }
    }
    let budget = (limits::MAX_INFLIGHT_IO_BYTES / u64::from(limits::MAX_TRANSFER)) as usize;
    assert_eq!(reqs.len(), budget);
    // Completing one releases exactly one more.
    let r = reqs.remove(0);
    let res = r.execute();
    io.q.io_done(&r, res);
    let mut released = 0;
    while let Some(o) = io.q.poll_output() {
        if let Output::Io(_) = o {
            released += 1;
        }
    }
    assert_eq!(released, 1);
}

#[test]
fn features_number_of_queues_kato_and_write_cache() {
    let t = target();
    let mut a = Host::new(&t);
    a.icreq(Digests::NONE);
    a.connect(0, 0xffff, HOSTNQN);
    a.enable();
    let mut sf = Sqe::new(admin_opc::SET_FEATURES, 40);
    sf.set_cdw(10, u32::from(crate::spec::fid::NUM_QUEUES));
    sf.set_cdw(11, 500 | (500 << 16));
    let c = a.resp(&sf, &[]);
    let granted = u32::from(limits::MAX_IO_QUEUES - 1);
    assert_eq!(c.dw0, granted | (granted << 16));
    sf.set_cdw(10, u32::from(crate::spec::fid::KATO));
    sf.set_cdw(11, 12_000);
    assert!(a.resp(&sf, &[]).status().is_success());
    let mut gf = Sqe::new(admin_opc::GET_FEATURES, 41);
    gf.set_cdw(10, u32::from(crate::spec::fid::KATO));
    assert_eq!(a.resp(&gf, &[]).dw0, 12_000);
    sf.set_cdw(10, u32::from(crate::spec::fid::VOLATILE_WC));
    sf.set_cdw(11, 0);
    assert!(a.resp(&sf, &[]).status().is_success());
    gf.set_cdw(10, u32::from(crate::spec::fid::VOLATILE_WC));
    assert_eq!(a.resp(&gf, &[]).dw0, 0);
    // Saveable is refused; unknown feature is an invalid field.
    sf.set_cdw(10, u32::from(crate::spec::fid::KATO) | (1 << 31));
    assert_eq!(
        a.resp(&sf, &[]).status(),
        Status::specific(sc::FEATURE_NOT_SAVEABLE)
    );
    gf.set_cdw(10, 0x7e);
    assert_eq!(
        a.resp(&gf, &[]).status(),
        Status::generic(sc::INVALID_FIELD)
    );
    // SMART and firmware logs.
    let mut lp = Sqe::new(admin_opc::GET_LOG_PAGE, 42);
    lp.set_nsid(u32::MAX);
    lp.set_cdw(10, 0x02 | (127 << 16));
    transport_sgl(&mut lp, 512);
    let (smart, _) = a.read_cmd(&lp);
    assert_eq!(smart.len(), 512);
    lp.set_cdw(10, 0x03 | (127 << 16));
    let (fw, _) = a.read_cmd(&lp);
    assert_eq!(fw[0], 1);
    lp.set_cdw(10, 0x7f | (127 << 16));
    assert_eq!(
        a.resp(&lp, &[]).status(),
        Status::specific(sc::INVALID_LOG_PAGE)
    );
}

#[test]
fn log_page_read_at_an_offset_is_zero_filled_past_the_page() {
    let t = target();
    let (mut a, _io) = io_queue(&t, Digests::NONE);
    // The 512-byte firmware slot log read as 1024 bytes from byte 8: the revision (bytes
    // 8..16 of the page) first, then zeroes.
    let mut lp = Sqe::new(admin_opc::GET_LOG_PAGE, 60);
    lp.set_cdw(10, 0x03 | (255 << 16));
    lp.set_cdw(12, 8);
    transport_sgl(&mut lp, 1024);
    let (fw, c) = a.read_cmd(&lp);
    assert!(c.status().is_success());
    let page = crate::spec::log::encode_fw_slot(&t.identity.firmware);
    assert_eq!(fw.len(), 1024);
    assert_eq!(&fw[..8], &page[8..16]);
    assert!(fw[8..].iter().all(|&b| b == 0));
    // At the end of the page: all zeroes; past it: refused.
    lp.set_cdw(12, 512);
    let (end, c) = a.read_cmd(&lp);
    assert!(c.status().is_success());
    assert!(end.len() == 1024 && end.iter().all(|&b| b == 0));
    lp.set_cdw(12, 513);
    assert_eq!(
        a.resp(&lp, &[]).status(),
        Status::generic(sc::INVALID_FIELD)
    );
}

#[test]
fn failed_commands_fill_the_error_log_and_smart_count() {
    let t = target();
    let (mut a, mut io) = io_queue(&t, Digests::NONE);
    let c = io.resp(&rw(io_opc::READ, 9, BLOCKS + 5, 1, 4096, false), &[]);
    assert_eq!(c.status(), Status::generic(sc::LBA_OUT_OF_RANGE));
    let mut lp = Sqe::new(admin_opc::GET_LOG_PAGE, 50);
    lp.set_cdw(10, 0x01 | (15 << 16));
    transport_sgl(&mut lp, 64);
    let (e, _) = a.read_cmd(&lp);
    assert_eq!(u64::from_le_bytes(e[0..8].try_into().unwrap()), 1);
    assert_eq!(u16::from_le_bytes([e[8], e[9]]), 1, "sqid");
    assert_eq!(u16::from_le_bytes([e[10], e[11]]), 9, "cid");
    assert_eq!(
        u16::from_le_bytes([e[12], e[13]]),
        Status::generic(sc::LBA_OUT_OF_RANGE).to_u16()
    );
    assert_eq!(
        u64::from_le_bytes(e[16..24].try_into().unwrap()),
        BLOCKS + 5
    );
    assert_eq!(u32::from_le_bytes(e[24..28].try_into().unwrap()), 1);
    lp.set_nsid(u32::MAX);
    lp.set_cdw(10, 0x02 | (127 << 16));
    transport_sgl(&mut lp, 512);
    let (smart, _) = a.read_cmd(&lp);
    assert_eq!(smart[176], 1, "SMART error log entries");
}

#[test]
fn resize_with_a_shared_device_raises_a_notice() {
    let dev = Arc::new(MemDevice::new(2 << 20));
    let mut small = ns(1, dev.clone());
    small.size_bytes = 1 << 20;
    let t = Target::new(config(None, vec![small]), TargetIdentity::default(), None);
    let (mut a, _io) = io_queue(&t, Digests::NONE);
    let mut sf = Sqe::new(admin_opc::SET_FEATURES, 20);
    sf.set_cdw(10, u32::from(crate::spec::fid::ASYNC_EVENT));
    sf.set_cdw(11, 1 << 8);
    assert!(a.resp(&sf, &[]).status().is_success());
    assert!(a
        .cmd(&Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 21), &[])
        .is_empty());
    // Same device object, larger snapshot size.
    t.update_config(config(None, vec![ns(1, dev)]));
    a.q.poll_events();
    let g = a.drain();
    assert!(matches!(g[..], [Got::Resp(c)] if c.cid == 21), "{g:?}");
    let (id, _) = a.read_cmd(&identify(0, 1));
    assert_eq!(u64::from_le_bytes(id[0..8].try_into().unwrap()), 512);
}

// --- The same Queue in NVMe/RDMA mode: capsules in, RDMA READ/WRITE + completions out.

fn rdma_listener() -> ListenerInfo {
    ListenerInfo {
        traddr: "10.0.2.15".into(),
        trsvcid: "4421".into(),
        ipv6: false,
        trtype: TRTYPE_RDMA,
    }
}

/// What an RDMA queue asked its transport to do.
#[derive(Debug)]
enum RdmaOut {
    Fetch(u16, crate::spec::KeyedSgl),
    Respond(Cqe, Vec<u8>, Option<u32>),
    Close,
}

/// Drains outputs, running storage I/O inline.
fn rdma_drain(q: &mut Queue) -> Vec<RdmaOut> {
    let mut v = Vec::new();
    while let Some(o) = q.poll_output() {
        match o {
            Output::Io(req) => {
                let r = req.execute();
                q.io_done(&req, r);
            }
            Output::FetchData { cid, sgl } => v.push(RdmaOut::Fetch(cid, sgl)),
            Output::Respond {
                cqe,
                data,
                invalidate,
                ..
            } => v.push(RdmaOut::Respond(cqe, data, invalidate)),
            Output::Close => v.push(RdmaOut::Close),
            Output::Send(b) => panic!("TCP bytes from an RDMA queue: {b:?}"),
            Output::SendData { head, .. } => panic!("TCP data from an RDMA queue: {head:?}"),
        }
    }
    v
}

fn keyed(sqe: &mut Sqe, len: u32, key: u32, invalidate: bool) {
    sqe.set_keyed_sgl(crate::spec::KeyedSgl {
        addr: 0x7f00_0000,
        len,
        key,
        invalidate,
    });
}

fn capsule(sqe: &Sqe, data: &[u8]) -> Vec<u8> {
    let mut c = sqe.as_bytes().to_vec();
    c.extend_from_slice(data);
    c
}

/// Connects an RDMA queue the way Linux nvme-rdma does on the admin queue: the
/// Connect data by reference (keyed SGL), read by the target.
fn rdma_connect(q: &mut Queue, qid: u16, cntlid: u16) -> Cqe {
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0x100 + qid);
    sqe.set_fctype(FCTYPE_CONNECT);
    ConnectCmd {
        recfmt: 0,
        qid,
        sqsize: 31,
        cattr: 0,
        kato: 5000,
    }
    .write(&mut sqe);
    keyed(&mut sqe, 1024, 0x1234, true);
    q.handle_capsule(&capsule(&sqe, &[]), 0);
    let out = rdma_drain(q);
    let [RdmaOut::Fetch(cid, k)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!((*cid, k.len, k.key), (0x100 + qid, 1024, 0x1234));
    let data = ConnectData {
        hostid: HOSTID,
        cntlid,
        subnqn: NQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    q.data_fetched(*cid, Some(IoBuf::copy_from(&data)), 0);
    let out = rdma_drain(q);
    match &out[..] {
        [RdmaOut::Respond(c, d, inv)] => {
            assert!(d.is_empty());
            assert_eq!(*inv, Some(0x1234), "the host asked for invalidation");
            *c
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rdma_queue_connects_reads_and_writes_through_keyed_sgls() {
    let t = target();
    let mut admin = Queue::new_rdma(t.clone(), rdma_listener(), "rdma-host".into());
    let c = rdma_connect(&mut admin, 0, 0xffff);
    assert!(c.status().is_success(), "{c:?}");
    let cntlid = c.dw0 as u16;
    // Property Set CC.EN (no data), then Identify Controller by RDMA WRITE.
    let mut en = Sqe::new(admin_opc::FABRICS, 1);
    en.set_fctype(FCTYPE_PROPERTY_SET);
    en.set_cdw(11, prop::CC);
    en.set_cdw(12, 1 | (6 << 16) | (4 << 20));
    admin.handle_capsule(&capsule(&en, &[]), 0);
    assert!(
        matches!(&rdma_drain(&mut admin)[..], [RdmaOut::Respond(c, _, None)] if c.status().is_success())
    );
    let mut id = identify(1, 0);
    keyed(&mut id, 4096, 0x55, true);
    admin.handle_capsule(&capsule(&id, &[]), 0);
    match &rdma_drain(&mut admin)[..] {
        [RdmaOut::Respond(c, d, Some(0x55))] => {
            assert!(c.status().is_success());
            assert_eq!(d.len(), 4096);
            // SGLS: keyed SGL data blocks supported (bit 2), required by nvme-rdma.
            let sgls = u32::from_le_bytes([d[536], d[537], d[538], d[539]]);
            assert_ne!(sgls & (1 << 2), 0, "sgls={sgls:#x}");
            // The same model as over NVMe/TCP: one subsystem, one model on every path.
            assert_eq!(model_number(d), crate::target::config::MODEL);
        }
        other => panic!("{other:?}"),
    }

    // An I/O queue: Connect data in the capsule (as Linux sends it on I/O queues).
    let mut io = Queue::new_rdma(t.clone(), rdma_listener(), "rdma-host".into());
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0x101);
    sqe.set_fctype(FCTYPE_CONNECT);
    ConnectCmd {
        recfmt: 0,
        qid: 1,
        sqsize: 127,
        cattr: 0,
        kato: 0,
    }
    .write(&mut sqe);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 1024,
        id: SGL_ID_INCAPSULE,
    });
    let data = ConnectData {
        hostid: HOSTID,
        cntlid,
        subnqn: NQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    io.handle_capsule(&capsule(&sqe, &data), 0);
    assert!(
        matches!(&rdma_drain(&mut io)[..], [RdmaOut::Respond(c, _, None)] if c.status().is_success())
    );

    // Write 2 blocks by reference: RDMA READ first, then storage, then the completion.
    let mut w = rw(io_opc::WRITE, 7, 3, 2, 8192, false);
    keyed(&mut w, 8192, 0x77, true);
    io.handle_capsule(&capsule(&w, &[]), 0);
    let out = rdma_drain(&mut io);
    let [RdmaOut::Fetch(7, k)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(k.len, 8192);
    let payload: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    io.data_fetched(7, Some(IoBuf::copy_from(&payload)), 0);
    assert!(
        matches!(&rdma_drain(&mut io)[..], [RdmaOut::Respond(c, d, Some(0x77))] if c.status().is_success() && c.cid == 7 && d.is_empty())
    );

    // A 4 KiB write in the capsule (in-capsule data), no transfer.
    let mut w2 = rw(io_opc::WRITE, 8, 5, 1, 4096, true);
    w2.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: SGL_ID_INCAPSULE,
    });
    io.handle_capsule(&capsule(&w2, &[0xab; 4096]), 0);
    assert!(
        matches!(&rdma_drain(&mut io)[..], [RdmaOut::Respond(c, _, None)] if c.status().is_success())
    );

    // Read all three blocks back by RDMA WRITE, with the key invalidated.
    let mut r = rw(io_opc::READ, 9, 3, 3, 12288, false);
    keyed(&mut r, 12288, 0x99, true);
    io.handle_capsule(&capsule(&r, &[]), 0);
    match &rdma_drain(&mut io)[..] {
        [RdmaOut::Respond(c, d, Some(0x99))] => {
            assert!(c.status().is_success());
            assert_eq!(&d[..8192], &payload[..]);
            assert!(d[8192..].iter().all(|&b| b == 0xab));
        }
        other => panic!("{other:?}"),
    }

    // A failed RDMA READ (bad key, host gone) closes the queue.
    let mut w3 = rw(io_opc::WRITE, 10, 0, 1, 4096, false);
    keyed(&mut w3, 4096, 0x1, false);
    io.handle_capsule(&capsule(&w3, &[]), 0);
    assert!(matches!(&rdma_drain(&mut io)[..], [RdmaOut::Fetch(10, _)]));
    io.data_fetched(10, None, 0);
    assert!(matches!(&rdma_drain(&mut io)[..], [RdmaOut::Close]));
    assert!(io.is_closed());
}

#[test]
fn rdma_queue_refuses_tcp_transport_sgls_and_short_capsules() {
    let t = target();
    let mut q = Queue::new_rdma(t, rdma_listener(), "rdma-host".into());
    // A capsule shorter than an SQE ends the queue pair.
    q.handle_capsule(&[0u8; 10], 0);
    assert!(matches!(&rdma_drain(&mut q)[..], [RdmaOut::Close]));
    let t = target();
    let mut q = Queue::new_rdma(t, rdma_listener(), "rdma-host".into());
    let c = rdma_connect(&mut q, 0, 0xffff);
    assert!(c.status().is_success());
    let mut en = Sqe::new(admin_opc::FABRICS, 1);
    en.set_fctype(FCTYPE_PROPERTY_SET);
    en.set_cdw(11, prop::CC);
    en.set_cdw(12, 1 | (6 << 16) | (4 << 20));
    q.handle_capsule(&capsule(&en, &[]), 0);
    rdma_drain(&mut q);
    // The NVMe/TCP transport descriptor means nothing on RDMA.
    q.handle_capsule(&capsule(&identify(1, 0), &[]), 0);
    match &rdma_drain(&mut q)[..] {
        [RdmaOut::Respond(c, d, None)] => {
            assert!(!c.status().is_success());
            assert!(d.is_empty());
        }
        other => panic!("{other:?}"),
    }
}
