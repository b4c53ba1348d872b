//! A small NVMe/TCP initiator for host-side tests and benchmarks. **A test tool**: it
//! trusts nothing from the target, but it implements only what our tests need (admin
//! queue + N I/O queues, Identify, logs, features, read/write/flush, digests on/off).

mod queue;

use std::net::SocketAddr;

use anyhow::{bail, Context};
use bytes::Bytes;
use quarry_nvmeof::spec::fabrics::{prop, FCTYPE_PROPERTY_GET, FCTYPE_PROPERTY_SET};
use quarry_nvmeof::spec::identify::decode_ns_list;
use quarry_nvmeof::spec::log::{decode_discovery_log, DiscoveryEntry};
use quarry_nvmeof::spec::{admin_opc, fid, io_opc, Cqe, Sqe, Status, DISCOVERY_NQN};
pub use quarry_nvmeof::tcp::Digests;

pub use queue::{Command, Completion, Queue};

/// Host NQN the tests use unless they need another.
pub const TEST_HOSTNQN: &str = "nqn.2014-08.io.quarry:test-initiator";
/// Host identifier that goes with it.
pub const TEST_HOSTID: [u8; 16] = *b"quarry-test-host";
/// Entries per queue the initiator asks for (0's based sqsize = this - 1).
pub const QUEUE_ENTRIES: u16 = 64;
/// Keep-alive timeout requested.
pub const KATO_MS: u32 = 30_000;

/// How to connect.
#[derive(Debug, Clone)]
pub struct Options {
    /// Target address.
    pub addr: SocketAddr,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Host ID.
    pub hostid: [u8; 16],
    /// Digests to request.
    pub digests: Digests,
    /// I/O queues to open.
    pub io_queues: u16,
    /// Disable SQ flow control on the I/O queues (Connect CATTR bit 2).
    pub disable_sqflow: bool,
    /// Keep-alive timeout requested at the admin Connect (ms, 0 = none).
    pub kato_ms: u32,
    /// Largest write sent in its capsule, below what the controller's IOCCSZ allows
    /// (`None`: as much as it allows); larger writes take an R2T. Lets a benchmark
    /// compare both paths against one target.
    pub max_incapsule: Option<u32>,
}

impl Options {
    /// Defaults: test host NQN, no digests, one I/O queue.
    pub fn new(addr: SocketAddr, subnqn: &str) -> Options {
        Options {
            addr,
            subnqn: subnqn.into(),
            hostnqn: TEST_HOSTNQN.into(),
            hostid: TEST_HOSTID,
            digests: Digests::NONE,
            io_queues: 1,
            disable_sqflow: false,
            kato_ms: KATO_MS,
            max_incapsule: None,
        }
    }
}

/// Returns an error unless the completion succeeded.
pub fn check(c: &Completion, what: &str) -> anyhow::Result<()> {
    let s = c.cqe.status();
    if !s.is_success() {
        bail!("{what} failed: SCT {:#x} SC {:#x}", s.sct, s.sc);
    }
    Ok(())
}

/// A connected controller: its admin queue and I/O queues.
pub struct Controller {
    /// Admin queue.
    pub admin: Queue,
    /// I/O queues (qid 1..).
    pub io: Vec<Queue>,
    /// Controller ID from Connect.
    pub cntlid: u16,
    /// Identify Controller data.
    pub identify: Vec<u8>,
}

fn admin_cmd(opcode: u8) -> Sqe {
    Sqe::new(opcode, 0)
}

impl Controller {
    /// Connects the admin queue only (Connect, enable) and returns the Connect CQE on
    /// refusal instead of an error, so tests can check refusal statuses.
    pub async fn connect_admin(o: &Options) -> anyhow::Result<Result<Controller, Cqe>> {
        let mut admin = Queue::open(o.addr, o.digests).await?;
        let cqe = admin
            .connect(
                0,
                QUEUE_ENTRIES - 1,
                o.kato_ms,
                0xffff,
                &o.subnqn,
                &o.hostnqn,
                o.hostid,
            )
            .await?;
        if !cqe.status().is_success() {
            return Ok(Err(cqe));
        }
        let cntlid = cqe.dw0 as u16;
        admin.incapsule_limit = 8192;
        let mut c = Controller {
            admin,
            io: Vec::new(),
            cntlid,
            identify: Vec::new(),
        };
        c.enable().await?;
        let id = c.identify(1, 0).await?;
        if u16::from_le_bytes([id[78], id[79]]) != cntlid {
            bail!("Identify CNTLID differs from Connect's");
        }
        c.identify = id;
        Ok(Ok(c))
    }

    /// Connects admin + `o.io_queues` I/O queues.
    pub async fn connect(o: &Options) -> anyhow::Result<Controller> {
        let mut c = match Self::connect_admin(o).await? {
            Ok(c) => c,
            Err(cqe) => bail!("Connect refused: {:?}", cqe.status()),
        };
        let mut sf = admin_cmd(admin_opc::SET_FEATURES);
        sf.set_cdw(10, u32::from(fid::NUM_QUEUES));
        let n = u32::from(o.io_queues.max(1) - 1);
        sf.set_cdw(11, n | (n << 16));
        let r = c.admin_exec(sf, None, 0).await?;
        check(&r, "Set Features (number of queues)")?;
        let granted = (r.cqe.dw0 & 0xffff) + 1;
        if granted < u32::from(o.io_queues) {
            bail!(
                "target granted {granted} I/O queues, wanted {}",
                o.io_queues
            );
        }
        let ioccsz = u32::from_le_bytes([
            c.identify[1792],
            c.identify[1793],
            c.identify[1794],
            c.identify[1795],
        ]);
        for qid in 1..=o.io_queues {
            let mut q = Queue::open(o.addr, o.digests).await?;
            q.disable_sqflow = o.disable_sqflow;
            let cqe = q
                .connect(
                    qid,
                    QUEUE_ENTRIES - 1,
                    0,
                    c.cntlid,
                    &o.subnqn,
                    &o.hostnqn,
                    o.hostid,
                )
                .await
                .with_context(|| format!("connecting I/O queue {qid}"))?;
            if !cqe.status().is_success() {
                bail!("I/O queue {qid} Connect refused: {:?}", cqe.status());
            }
            let allowed = (ioccsz * 16).saturating_sub(64);
            q.incapsule_limit = o.max_incapsule.map_or(allowed, |m| m.min(allowed));
            c.io.push(q);
        }
        Ok(c)
    }

    /// Runs an admin command.
    pub async fn admin_exec(
        &mut self,
        sqe: Sqe,
        write: Option<Vec<u8>>,
        read_len: u32,
    ) -> anyhow::Result<Completion> {
        self.admin
            .exec(Command {
                sqe,
                write: write.map(Bytes::from),
                read_len,
            })
            .await
    }

    async fn property_get(&mut self, offset: u32, size8: bool) -> anyhow::Result<u64> {
        let mut s = Sqe::new(admin_opc::FABRICS, 0);
        s.set_fctype(FCTYPE_PROPERTY_GET);
        s.set_cdw(10, u32::from(size8));
        s.set_cdw(11, offset);
        let r = self.admin_exec(s, None, 0).await?;
        check(&r, "Property Get")?;
        Ok(u64::from(r.cqe.dw0) | (u64::from(r.cqe.dw1) << 32))
    }

    async fn enable(&mut self) -> anyhow::Result<()> {
        let cap = self.property_get(prop::CAP, true).await?;
        if cap & (1 << 37) == 0 {
            bail!("CAP.CSS lacks the NVM command set: {cap:#x}");
        }
        let mut s = Sqe::new(admin_opc::FABRICS, 0);
        s.set_fctype(FCTYPE_PROPERTY_SET);
        s.set_cdw(11, prop::CC);
        s.set_cdw(12, 1 | (6 << 16) | (4 << 20));
        check(&self.admin_exec(s, None, 0).await?, "Property Set CC")?;
        let csts = self.property_get(prop::CSTS, false).await?;
        if csts & 1 == 0 {
            bail!("CSTS.RDY not set after enable: {csts:#x}");
        }
        Ok(())
    }

    /// Identify with `cns` for `nsid` (4096 bytes).
    pub async fn identify(&mut self, cns: u8, nsid: u32) -> anyhow::Result<Vec<u8>> {
        let mut s = admin_cmd(admin_opc::IDENTIFY);
        s.set_nsid(nsid);
        s.set_cdw(10, u32::from(cns));
        let r = self.admin_exec(s, None, 4096).await?;
        check(&r, "Identify")?;
        Ok(r.data)
    }

    /// Active namespace IDs.
    pub async fn namespaces(&mut self) -> anyhow::Result<Vec<u32>> {
        Ok(decode_ns_list(&self.identify(2, 0).await?))
    }

    /// (blocks, block size) of a namespace.
    pub async fn namespace_size(&mut self, nsid: u32) -> anyhow::Result<(u64, u32)> {
        let id = self.identify(0, nsid).await?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&id[0..8]);
        Ok((u64::from_le_bytes(b), 1u32 << id[130]))
    }

    /// Get Log Page `lid` of `len` bytes at offset 0.
    pub async fn log_page(&mut self, lid: u8, nsid: u32, len: u32) -> anyhow::Result<Vec<u8>> {
        let mut s = admin_cmd(admin_opc::GET_LOG_PAGE);
        s.set_nsid(nsid);
        let numd = len / 4 - 1;
        s.set_cdw(10, u32::from(lid) | ((numd & 0xffff) << 16));
        s.set_cdw(11, numd >> 16);
        let r = self.admin_exec(s, None, len).await?;
        check(&r, "Get Log Page")?;
        Ok(r.data)
    }

    /// Reads `nlb` blocks at `slba` through I/O queue `q`.
    pub async fn read(
        &mut self,
        q: usize,
        nsid: u32,
        slba: u64,
        nlb: u32,
        bs: u32,
    ) -> anyhow::Result<Vec<u8>> {
        let sqe = rw_sqe(io_opc::READ, nsid, slba, nlb, false);
        let queue = self.io.get_mut(q).context("no such I/O queue")?;
        let r = queue
            .exec(Command {
                sqe,
                write: None,
                read_len: nlb * bs,
            })
            .await?;
        check(&r, "Read")?;
        Ok(r.data)
    }

    /// Writes `data` at `slba` through I/O queue `q`.
    pub async fn write(
        &mut self,
        q: usize,
        nsid: u32,
        slba: u64,
        data: Vec<u8>,
        bs: u32,
        fua: bool,
    ) -> anyhow::Result<Completion> {
        let nlb = (data.len() as u32) / bs;
        let sqe = rw_sqe(io_opc::WRITE, nsid, slba, nlb, fua);
        let queue = self.io.get_mut(q).context("no such I/O queue")?;
        queue
            .exec(Command {
                sqe,
                write: Some(data.into()),
                read_len: 0,
            })
            .await
    }
}

/// A Read or Write SQE (CID and SGL are set at submission).
pub fn rw_sqe(op: u8, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Sqe {
    let mut s = Sqe::new(op, 0);
    s.set_nsid(nsid);
    s.set_cdw(10, slba as u32);
    s.set_cdw(11, (slba >> 32) as u32);
    s.set_cdw(12, (nlb - 1) | if fua { 1 << 30 } else { 0 });
    s
}

/// Connects to the discovery controller and returns the discovery log entries.
pub async fn discover(
    addr: SocketAddr,
    hostnqn: &str,
    digests: Digests,
) -> anyhow::Result<Vec<DiscoveryEntry>> {
    let mut o = Options::new(addr, DISCOVERY_NQN);
    o.hostnqn = hostnqn.into();
    o.digests = digests;
    let mut c = match Controller::connect_admin(&o).await? {
        Ok(c) => c,
        Err(cqe) => bail!("discovery Connect refused: {:?}", cqe.status()),
    };
    let head = c.log_page(0x70, 0, 1024).await?;
    let mut n = [0u8; 8];
    n.copy_from_slice(&head[8..16]);
    let numrec = u64::from_le_bytes(n) as u32;
    let full = c.log_page(0x70, 0, 1024 * (1 + numrec)).await?;
    let (_, entries) = decode_discovery_log(&full).context("bad discovery log")?;
    Ok(entries)
}

/// Deterministic 4 KiB-granular test pattern for (block, generation).
pub fn pattern(block: u64, generation: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = block.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ generation.wrapping_mul(0xbf58_476d_1ce4_e5b9)
        ^ 0x94d0_49bb_1331_11eb;
    while out.len() < len {
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Status helper for tests.
pub fn status(c: &Completion) -> Status {
    c.cqe.status()
}
