//! The Rust test initiator against the real `quarry` binary: REST-configured
//! subsystems, discovery, admin commands, I/O with and without digests, an 8-queue
//! QD32 verified workload, namespace hot-add notices and host allow lists.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use quarry_nvmeof::spec::{admin_opc, fid, io_opc, sc, Sqe, Status};
use quarry_tests::nvme_initiator::{
    check, discover, pattern, rw_sqe, status, Command, Controller, Digests, Options, TEST_HOSTNQN,
};
use quarry_tests::QuarryProcess;
use serde_json::json;

const MIB: u64 = 1 << 20;
const BOTH: Digests = Digests {
    header: true,
    data: true,
};

/// Creates a volume, a subsystem and a namespace through the REST API.
fn provision(
    p: &QuarryProcess,
    vol: &str,
    size: u64,
    nqn: &str,
    hosts: Option<&[&str]>,
) -> anyhow::Result<()> {
    p.admin()?.export_volume(vol, size, nqn, hosts)
}

fn add_namespace(p: &QuarryProcess, nqn: &str, vol: &str) -> anyhow::Result<()> {
    let api = p.admin()?;
    api.create(
        &format!("/api/v1/nvme/subsystems/{nqn}/namespaces"),
        &json!({"volume": vol}),
    )?;
    Ok(())
}

async fn round_trip(
    p: &QuarryProcess,
    nqn: &str,
    digests: Digests,
    run: u64,
) -> anyhow::Result<()> {
    let entries = discover(p.nvme, TEST_HOSTNQN, digests).await?;
    ensure!(
        entries.iter().any(|e| e.subnqn == nqn),
        "discovery log lacks {nqn}: {entries:?}"
    );
    let entry = entries.iter().find(|e| e.subnqn == nqn).context("entry")?;
    ensure!(
        entry.trsvcid == p.nvme.port().to_string(),
        "trsvcid {}",
        entry.trsvcid
    );

    let mut o = Options::new(p.nvme, nqn);
    o.digests = digests;
    o.io_queues = 2;
    let mut c = Controller::connect(&o).await?;
    ensure!(c.namespaces().await? == vec![1], "namespace list");
    let (blocks, bs) = c.namespace_size(1).await?;
    ensure!(
        bs == 4096 && blocks == 64 * MIB / 4096,
        "size {blocks}x{bs}"
    );

    let smart_before = c.log_page(0x02, 0xffff_ffff, 512).await?;
    let writes_before = u64::from_le_bytes(smart_before[80..88].try_into()?);

    // 4 KiB (in-capsule) and 256 KiB (R2T, FUA) writes on two queues, read back.
    let small = pattern(7, 1, 4096);
    check(
        &c.write(0, 1, 7, small.clone(), bs, false).await?,
        "write 4k",
    )?;
    let big = pattern(100, 2, 256 * 1024);
    check(
        &c.write(1, 1, 100, big.clone(), bs, true).await?,
        "write 256k",
    )?;
    ensure!(
        c.read(1, 1, 7, 1, bs).await? == small,
        "4k read back differs"
    );
    ensure!(
        c.read(0, 1, 100, 64, bs).await? == big,
        "256k read back differs"
    );
    // 1 MiB (MDTS) read of a mostly unwritten range: zeroes after the 256 KiB.
    let r = c.read(0, 1, 100, 256, bs).await?;
    ensure!(
        r[..big.len()] == big[..] && r[big.len()..].iter().all(|&b| b == 0),
        "1 MiB read"
    );

    // Flush, Write Zeroes, then the zeroes read back.
    let mut f = Sqe::new(io_opc::FLUSH, 0);
    f.set_nsid(1);
    check(
        &c.io[0]
            .exec(Command {
                sqe: f,
                write: None,
                read_len: 0,
            })
            .await?,
        "flush",
    )?;
    let wz = rw_sqe(io_opc::WRITE_ZEROES, 1, 100, 8, false);
    check(
        &c.io[0]
            .exec(Command {
                sqe: wz,
                write: None,
                read_len: 0,
            })
            .await?,
        "write zeroes",
    )?;
    ensure!(
        c.read(0, 1, 100, 8, bs).await?.iter().all(|&b| b == 0),
        "zeroed range"
    );

    // Errors are statuses, and the queue keeps working after them.
    let oob = rw_sqe(io_opc::READ, 1, blocks, 1, false);
    let r = c.io[0]
        .exec(Command {
            sqe: oob,
            write: None,
            read_len: 4096,
        })
        .await?;
    ensure!(
        status(&r) == Status::generic(sc::LBA_OUT_OF_RANGE),
        "LBA out of range: {:?}",
        status(&r)
    );
    let bad = Sqe::new(0x7c, 0);
    let r = c.io[0]
        .exec(Command {
            sqe: bad,
            write: None,
            read_len: 0,
        })
        .await?;
    ensure!(
        status(&r) == Status::generic(sc::INVALID_OPCODE),
        "invalid opcode: {:?}",
        status(&r)
    );
    ensure!(c.read(0, 1, 7, 1, bs).await? == small, "read after errors");

    // SMART counts what we did: 4 KiB + 256 KiB written, reads and commands.
    let smart = c.log_page(0x02, 0xffff_ffff, 512).await?;
    let units_written = u64::from_le_bytes(smart[48..56].try_into()?);
    let write_cmds = u64::from_le_bytes(smart[80..88].try_into()?);
    // Data units are 512,000-byte units rounded up over everything written so far:
    // each round trip writes 4 KiB + 256 KiB (Write Zeroes does not count).
    let total = run * (4096 + 256 * 1024);
    ensure!(
        units_written == total.div_ceil(512_000),
        "SMART data units written {units_written}, want {}",
        total.div_ceil(512_000)
    );
    ensure!(
        write_cmds - writes_before == 2,
        "SMART host write commands {write_cmds} (before {writes_before})"
    );
    let fw = c.log_page(0x03, 0, 512).await?;
    ensure!(fw[0] == 1, "firmware slot AFI");
    // Keep Alive answers.
    check(
        &c.admin_exec(Sqe::new(admin_opc::KEEP_ALIVE, 0), None, 0)
            .await?,
        "keep alive",
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_rust_initiator_round_trip_digests_off_and_on() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    provision(&p, "rt0", 64 * MIB, "nqn.2026-11.io.quarry:rt0", None)?;
    round_trip(&p, "nqn.2026-11.io.quarry:rt0", Digests::NONE, 1).await?;
    round_trip(&p, "nqn.2026-11.io.quarry:rt0", BOTH, 2).await?;
    Ok(())
}

/// Blocks per queue region in the workload (4 MiB of 4 KiB blocks).
const REGION_BLOCKS: u64 = 1024;
const QUEUES: u16 = 8;
const DEPTH: usize = 32;

struct Region {
    base: u64,
    gens: Vec<u32>,
    busy: HashSet<u64>,
    rng: u64,
    deadline: Instant,
    reads: u64,
    writes: u64,
}

impl Region {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

/// Mixed 4 KiB random reads and writes at QD32 on one queue until the deadline; every
/// read is checked against the last completed write (or zeroes).
async fn workload(
    q: &mut quarry_tests::nvme_initiator::Queue,
    r: &Mutex<Region>,
) -> anyhow::Result<()> {
    q.pipeline(
        DEPTH,
        || {
            let mut r = r.lock().unwrap();
            if Instant::now() > r.deadline {
                return None;
            }
            let block = loop {
                let b = r.rand() % REGION_BLOCKS;
                if !r.busy.contains(&b) {
                    break b;
                }
            };
            r.busy.insert(block);
            let lba = r.base + block;
            let write = r.rand().is_multiple_of(2);
            if write {
                let g = r.gens[block as usize] + 1;
                let sqe = rw_sqe(io_opc::WRITE, 1, lba, 1, false);
                Some((
                    (block << 33) | (u64::from(g) << 1) | 1,
                    Command {
                        sqe,
                        write: Some(pattern(lba, u64::from(g), 4096).into()),
                        read_len: 0,
                    },
                ))
            } else {
                let g = r.gens[block as usize];
                let sqe = rw_sqe(io_opc::READ, 1, lba, 1, false);
                Some((
                    (block << 33) | (u64::from(g) << 1),
                    Command {
                        sqe,
                        write: None,
                        read_len: 4096,
                    },
                ))
            }
        },
        |tag, c| {
            let mut r = r.lock().unwrap();
            let block = tag >> 33;
            let g = ((tag >> 1) & 0xffff_ffff) as u32;
            check(&c, "workload I/O")?;
            r.busy.remove(&block);
            let lba = r.base + block;
            if tag & 1 == 1 {
                r.gens[block as usize] = g;
                r.writes += 1;
            } else {
                let want = if g == 0 {
                    vec![0u8; 4096]
                } else {
                    pattern(lba, u64::from(g), 4096)
                };
                if c.data != want {
                    bail!("verify failed at LBA {lba} (generation {g})");
                }
                r.reads += 1;
            }
            Ok(())
        },
    )
    .await
}

async fn run_workload(
    p: &QuarryProcess,
    nqn: &str,
    digests: Digests,
    secs: u64,
) -> anyhow::Result<(u64, u64)> {
    let mut o = Options::new(p.nvme, nqn);
    o.digests = digests;
    o.io_queues = QUEUES;
    let c = Controller::connect(&o).await?;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for (i, mut q) in c.io.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let r = Mutex::new(Region {
                base: i as u64 * REGION_BLOCKS,
                gens: vec![0; REGION_BLOCKS as usize],
                busy: HashSet::new(),
                rng: 0x2545_f491_4f6c_dd1d ^ (i as u64 + 1),
                deadline,
                reads: 0,
                writes: 0,
            });
            workload(&mut q, &r).await?;
            let r = r.into_inner().unwrap();
            anyhow::Ok((r.reads, r.writes))
        }));
    }
    let (mut reads, mut writes) = (0, 0);
    for t in tasks {
        let (r, w) = t.await??;
        reads += r;
        writes += w;
    }
    drop(c.admin);
    Ok((reads, writes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_8_queues_qd32_mixed_verified_digests_off_and_on() -> anyhow::Result<()> {
    let secs: u64 = std::env::var("NVME_WORKLOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let p = QuarryProcess::start()?;
    let size = u64::from(QUEUES) * REGION_BLOCKS * 4096;
    provision(&p, "wl-plain", size, "nqn.2026-11.io.quarry:wl-plain", None)?;
    provision(&p, "wl-dgst", size, "nqn.2026-11.io.quarry:wl-dgst", None)?;
    let (r, w) = run_workload(&p, "nqn.2026-11.io.quarry:wl-plain", Digests::NONE, secs).await?;
    eprintln!("digests off: {r} verified reads, {w} writes in {secs} s");
    ensure!(r > 100 && w > 100, "too little I/O: {r} reads {w} writes");
    let (r, w) = run_workload(&p, "nqn.2026-11.io.quarry:wl-dgst", BOTH, secs).await?;
    eprintln!("digests on: {r} verified reads, {w} writes in {secs} s");
    ensure!(r > 100 && w > 100, "too little I/O: {r} reads {w} writes");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_namespace_added_via_rest_raises_aen() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let nqn = "nqn.2026-11.io.quarry:hotadd";
    provision(&p, "ha1", 8 * MIB, nqn, None)?;
    let api = p.admin()?;
    api.create(
        "/api/v1/volumes",
        &json!({"name": "ha2", "size_bytes": 16 * MIB}),
    )?;
    let mut c = Controller::connect(&Options::new(p.nvme, nqn)).await?;
    ensure!(c.namespaces().await? == vec![1]);
    let mut sf = Sqe::new(admin_opc::SET_FEATURES, 0);
    sf.set_cdw(10, u32::from(fid::ASYNC_EVENT));
    sf.set_cdw(11, 1 << 8);
    check(
        &c.admin_exec(sf, None, 0).await?,
        "enable namespace notices",
    )?;
    // Add the namespace while the AER is outstanding.
    let data = p.data.clone();
    let http = p.url();
    let token = api.token().map(str::to_string);
    let adder = std::thread::spawn(move || {
        let _ = data;
        std::thread::sleep(Duration::from_millis(500));
        let api = quarry_tests::Api::at(&http, token);
        api.post(
            &format!("/api/v1/nvme/subsystems/{nqn}/namespaces"),
            &json!({"volume": "ha2"}),
        )
    });
    let aer = c
        .admin_exec(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), None, 0)
        .await?;
    let (s, b) = adder
        .join()
        .map_err(|_| anyhow::anyhow!("adder panicked"))??;
    ensure!(s < 300, "{s} {b}");
    check(&aer, "AER")?;
    ensure!(aer.cqe.dw0 == 0x0004_0002, "AER dw0 {:#x}", aer.cqe.dw0);
    let changed = c.log_page(0x04, 0, 4096).await?;
    ensure!(
        u32::from_le_bytes(changed[0..4].try_into()?) == 2,
        "changed list"
    );
    ensure!(
        c.namespaces().await? == vec![1, 2],
        "namespace list after add"
    );
    let (blocks, _) = c.namespace_size(2).await?;
    ensure!(blocks == 16 * MIB / 4096);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_host_not_allowed_is_refused() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let nqn = "nqn.2026-11.io.quarry:private";
    provision(
        &p,
        "priv",
        8 * MIB,
        nqn,
        Some(&["nqn.2014-08.io.quarry:allowed"]),
    )?;
    let refused = Controller::connect_admin(&Options::new(p.nvme, nqn)).await?;
    let Err(cqe) = refused else {
        bail!("a host not in the list connected")
    };
    ensure!(
        cqe.status() == Status::specific(sc::CONNECT_INVALID_HOST),
        "{:?}",
        cqe.status()
    );
    let entries = discover(p.nvme, TEST_HOSTNQN, Digests::NONE).await?;
    ensure!(
        entries.iter().all(|e| e.subnqn != nqn),
        "hidden subsystem listed"
    );
    let mut o = Options::new(p.nvme, nqn);
    o.hostnqn = "nqn.2014-08.io.quarry:allowed".into();
    let mut c = Controller::connect(&o).await?;
    ensure!(c.namespaces().await? == vec![1]);
    let entries = discover(p.nvme, "nqn.2014-08.io.quarry:allowed", Digests::NONE).await?;
    ensure!(
        entries.iter().any(|e| e.subnqn == nqn),
        "allowed host does not see it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_controller_listed_in_sessions_and_admin_disconnect_drops_it() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let nqn = "nqn.2026-11.io.quarry:sess";
    provision(&p, "sv", 8 * MIB, nqn, None)?;
    let mut c = Controller::connect(&Options::new(p.nvme, nqn)).await?;
    let data = pattern(1, 1, 64 * 1024);
    check(&c.write(0, 1, 0, data.clone(), 4096, false).await?, "write")?;
    ensure!(c.read(0, 1, 0, 16, 4096).await? == data);
    let api = p.admin()?;
    let (s, list) = api.get("/api/v1/sessions")?;
    ensure!(s == 200, "{s} {list}");
    let sess = list
        .as_array()
        .context("sessions is not an array")?
        .iter()
        .find(|e| {
            e["protocol"] == "nvme_tcp"
                && e["user"] == TEST_HOSTNQN
                && e["target"].as_str().is_some_and(|t| t.contains(nqn))
        })
        .with_context(|| format!("no NVMe session in {list}"))?
        .clone();
    ensure!(
        sess["bytes_written"].as_u64() == Some(64 * 1024),
        "bytes_written {sess}"
    );
    ensure!(
        sess["bytes_read"].as_u64() == Some(64 * 1024),
        "bytes_read {sess}"
    );
    let id = sess["id"].as_u64().context("id")?;
    let (s, b) = api.delete(&format!("/api/v1/sessions/{id}"))?;
    ensure!(s == 204, "{s} {b}");
    // The controller's queues are closed within a few keep-alive ticks.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        c.read(0, 1, 0, 1, 4096).await.is_err(),
        "I/O queue still served after disconnect"
    );
    let (_, list) = api.get("/api/v1/sessions")?;
    ensure!(
        !list
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["id"].as_u64() == Some(id))),
        "session still listed: {list}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_sq_flow_control_disabled_reads_complete_by_success_flag() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let nqn = "nqn.2026-11.io.quarry:sqflow";
    provision(&p, "sf", 8 * MIB, nqn, None)?;
    let mut o = Options::new(p.nvme, nqn);
    o.disable_sqflow = true;
    o.digests = BOTH;
    let mut c = Controller::connect(&o).await?;
    let data = pattern(3, 3, 128 * 1024);
    check(
        &c.write(0, 1, 10, data.clone(), 4096, false).await?,
        "write",
    )?;
    // The initiator synthesises the CQE from the SUCCESS flag (sqhd 0, status 0);
    // a CapsuleResp from the target would carry SQHD 0xffff in this mode.
    let sqe = rw_sqe(io_opc::READ, 1, 10, 32, false);
    let r = c.io[0]
        .exec(Command {
            sqe,
            write: None,
            read_len: 128 * 1024,
        })
        .await?;
    check(&r, "read")?;
    ensure!(r.data == data, "read back differs");
    ensure!(
        r.cqe.sqhd == 0,
        "read completed by a CapsuleResp, not the SUCCESS flag"
    );
    Ok(())
}

/// Submits an AER, runs `change` (a blocking REST call) on a thread after a short
/// delay, and returns the AER's DW0.
async fn aer_around(
    c: &mut Controller,
    change: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
) -> anyhow::Result<u32> {
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        change()
    });
    let aer = c
        .admin_exec(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), None, 0)
        .await?;
    t.join()
        .map_err(|_| anyhow::anyhow!("change thread panicked"))??;
    check(&aer, "AER")?;
    // Reading the changed list re-arms namespace notices.
    c.log_page(0x04, 0, 4096).await?;
    Ok(aer.cqe.dw0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_resize_remove_and_host_revocation_reach_connected_hosts() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let nqn = "nqn.2026-11.io.quarry:changes";
    provision(&p, "ch1", 8 * MIB, nqn, None)?;
    let api = p.admin()?;
    api.create(
        "/api/v1/volumes",
        &json!({"name": "ch2", "size_bytes": 8 * MIB}),
    )?;
    add_namespace(&p, nqn, "ch2")?;
    let mut c = Controller::connect(&Options::new(p.nvme, nqn)).await?;
    ensure!(c.namespaces().await? == vec![1, 2]);
    let mut sf = Sqe::new(admin_opc::SET_FEATURES, 0);
    sf.set_cdw(10, u32::from(fid::ASYNC_EVENT));
    sf.set_cdw(11, 1 << 8);
    check(
        &c.admin_exec(sf, None, 0).await?,
        "enable namespace notices",
    )?;
    let (http, token) = (p.url(), api.token().map(str::to_string));

    // Grow volume ch1: namespace 1 changes size.
    let (h, t) = (http.clone(), token.clone());
    let dw0 = aer_around(&mut c, move || {
        let (s, b) = quarry_tests::Api::at(&h, t)
            .patch("/api/v1/volumes/ch1", &json!({"size_bytes": 16 * MIB}))?;
        ensure!(s < 300, "resize: {s} {b}");
        Ok(())
    })
    .await?;
    ensure!(dw0 == 0x0004_0002, "resize AER {dw0:#x}");
    ensure!(
        c.namespace_size(1).await?.0 == 16 * MIB / 4096,
        "new size not reported"
    );
    let tail = rw_sqe(io_opc::WRITE, 1, 16 * MIB / 4096 - 1, 1, false);
    let r = c.io[0]
        .exec(Command {
            sqe: tail,
            write: Some(pattern(1, 1, 4096).into()),
            read_len: 0,
        })
        .await?;
    check(&r, "write to the grown tail")?;

    // Remove namespace 2: notice, list shrinks, I/O to it is refused.
    let (h, t) = (http.clone(), token.clone());
    let dw0 = aer_around(&mut c, move || {
        let (s, b) = quarry_tests::Api::at(&h, t)
            .delete(&format!("/api/v1/nvme/subsystems/{nqn}/namespaces/2"))?;
        ensure!(s < 300, "remove: {s} {b}");
        Ok(())
    })
    .await?;
    ensure!(dw0 == 0x0004_0002, "remove AER {dw0:#x}");
    ensure!(
        c.namespaces().await? == vec![1],
        "namespace list after removal"
    );
    let r = c.io[0]
        .exec(Command {
            sqe: rw_sqe(io_opc::READ, 2, 0, 1, false),
            write: None,
            read_len: 4096,
        })
        .await?;
    ensure!(
        status(&r) == Status::generic(sc::INVALID_NS),
        "I/O to removed namespace: {:?}",
        status(&r)
    );

    // Revoke the host: the controller is torn down.
    let (s, b) = api.patch(
        &format!("/api/v1/nvme/subsystems/{nqn}"),
        &json!({"allow_any_host": false, "hosts": ["nqn.2014-08.io.quarry:someone-else"]}),
    )?;
    ensure!(s < 300, "revoke: {s} {b}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        c.read(0, 1, 0, 1, 4096).await.is_err(),
        "revoked host still served"
    );
    let again = Controller::connect_admin(&Options::new(p.nvme, nqn)).await?;
    ensure!(
        matches!(again, Err(cqe) if cqe.status() == Status::specific(sc::CONNECT_INVALID_HOST)),
        "revoked host reconnected"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_keep_alive_expiry_tears_the_controller_down() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let nqn = "nqn.2026-11.io.quarry:kato";
    provision(&p, "ka", 8 * MIB, nqn, None)?;
    let mut o = Options::new(p.nvme, nqn);
    o.kato_ms = 1000;
    let mut c = Controller::connect(&o).await?;
    // Traffic within KATO keeps it alive.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        check(
            &c.admin_exec(Sqe::new(admin_opc::KEEP_ALIVE, 0), None, 0)
                .await?,
            "keep alive",
        )?;
    }
    // Silence past KATO plus the target's grace period: torn down.
    tokio::time::sleep(Duration::from_secs(8)).await;
    ensure!(
        c.admin_exec(Sqe::new(admin_opc::KEEP_ALIVE, 0), None, 0)
            .await
            .is_err(),
        "admin queue survived keep-alive expiry"
    );
    ensure!(
        c.read(0, 1, 0, 1, 4096).await.is_err(),
        "I/O queue survived keep-alive expiry"
    );
    let (_, list) = p.admin()?.get("/api/v1/sessions")?;
    ensure!(
        !list
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["protocol"] == "nvme_tcp")),
        "expired controller still listed: {list}"
    );
    Ok(())
}
