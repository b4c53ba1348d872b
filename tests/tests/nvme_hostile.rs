//! Hostile hosts against the real `quarry` binary: a malformed PDU, an oversized
//! length, a bad header digest, a bad data digest, and a host vanishing mid-R2T each
//! get a C2HTermReq or a closed connection, while an already connected controller
//! keeps doing verified I/O throughout.

use std::time::Duration;

use anyhow::{bail, ensure};
use quarry_nvmeof::spec::{io_opc, Sgl, SGL_ID_TRANSPORT};
use quarry_nvmeof::tcp::{self, DecodeContext, Pdu};
use quarry_tests::nvme_initiator::{check, pattern, rw_sqe, Controller, Digests, Options, Queue};
use quarry_tests::QuarryProcess;

const NQN: &str = "nqn.2026-11.io.quarry:hostile";
const BOTH: Digests = Digests {
    header: true,
    data: true,
};

/// What the target did after the hostile bytes.
#[derive(Debug, PartialEq)]
enum Reaction {
    Term { fes: u16 },
    Closed,
}

async fn reaction(q: &mut Queue, digests: Digests) -> anyhow::Result<Reaction> {
    match tokio::time::timeout(Duration::from_secs(10), q.read_frame()).await {
        Err(_) => bail!("target neither terminated nor closed within 10 s"),
        Ok(Err(_)) => Ok(Reaction::Closed),
        Ok(Ok(frame)) => {
            let ctx = DecodeContext {
                digests,
                ..Default::default()
            };
            match tcp::decode(&frame, &ctx) {
                Ok(Pdu::C2hTermReq(t)) => {
                    // After a termination request the target must close.
                    let after = tokio::time::timeout(Duration::from_secs(10), q.read_frame()).await;
                    ensure!(
                        matches!(after, Ok(Err(_))),
                        "connection stayed open after C2HTermReq"
                    );
                    Ok(Reaction::Term { fes: t.fes })
                }
                other => bail!("unexpected answer to a hostile PDU: {other:?}"),
            }
        }
    }
}

/// Flips the last byte of an encoded PDU: its data digest, when it has one.
fn spoil_last_byte(b: &mut [u8]) {
    if let Some(last) = b.last_mut() {
        *last ^= 0xff;
    }
}

/// Sends a WRITE of `len` bytes at `slba` whose data goes by R2T and returns the R2T.
async fn start_r2t_write(
    c: &mut Controller,
    cid: u16,
    slba: u64,
    len: u32,
    digests: Digests,
) -> anyhow::Result<tcp::R2t> {
    let mut sqe = rw_sqe(io_opc::WRITE, 1, slba, len / 4096, false);
    sqe.set_cid(cid);
    sqe.set_sgl(Sgl {
        addr: 0,
        len,
        id: SGL_ID_TRANSPORT,
    });
    let mut b = Vec::new();
    tcp::encode_capsule_cmd(&mut b, &sqe, &[], digests, 0);
    c.io[0].send_raw(&b).await?;
    let frame = c.io[0].read_frame().await?;
    let ctx = DecodeContext {
        digests,
        ..Default::default()
    };
    match tcp::decode(&frame, &ctx)? {
        Pdu::R2t(r2t) => Ok(r2t),
        other => bail!("expected an R2T, got {other:?}"),
    }
}

/// Waits for the target's answer to a 128 KiB in-capsule write on `c` (a success, or the
/// connection dropped when `dropped`), then reads the 32 blocks at `slba` back through
/// the bystander.
async fn bystander_read_after(
    c: &mut Controller,
    bystander: &mut Controller,
    slba: u64,
    dropped: bool,
) -> anyhow::Result<Vec<u8>> {
    if dropped {
        let r = reaction(&mut c.io[0], BOTH).await?;
        ensure!(r == Reaction::Closed, "bad in-capsule data digest: {r:?}");
    } else {
        let frame = c.io[0].read_frame().await?;
        let ctx = DecodeContext {
            digests: BOTH,
            ..Default::default()
        };
        match tcp::decode(&frame, &ctx)? {
            Pdu::CapsuleResp(r) if r.cqe.status == 0 => {}
            other => bail!("128 KiB in-capsule write: {other:?}"),
        }
    }
    bystander.read(0, 1, slba, 32, 4096).await
}

/// An I/O queue connected to a fresh controller (the victim of each attack).
async fn io_queue(p: &QuarryProcess, digests: Digests) -> anyhow::Result<Controller> {
    let mut o = Options::new(p.nvme, NQN);
    o.digests = digests;
    o.hostnqn = format!("nqn.2014-08.io.quarry:attacker-{}", rand_suffix());
    Controller::connect(&o).await
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

async fn bystander_io(c: &mut Controller, round: u64) -> anyhow::Result<()> {
    let data = pattern(round, round, 8192);
    check(
        &c.write(0, 1, 2 * round, data.clone(), 4096, false).await?,
        "bystander write",
    )?;
    ensure!(
        c.read(0, 1, 2 * round, 2, 4096).await? == data,
        "bystander read back"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_hostile_pdus_terminate_and_others_keep_working() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let api = p.admin()?;
    api.export_volume("hv", 16 << 20, NQN, None)?;

    let mut bystander = Controller::connect(&Options::new(p.nvme, NQN)).await?;
    bystander_io(&mut bystander, 1).await?;

    // 1. Malformed: a reserved PDU type on a live I/O queue.
    let mut c = io_queue(&p, Digests::NONE).await?;
    let mut junk = vec![0x08u8, 0, 24, 0, 24, 0, 0, 0];
    junk.resize(24, 0);
    c.io[0].send_raw(&junk).await?;
    let r = reaction(&mut c.io[0], Digests::NONE).await?;
    ensure!(r == Reaction::Term { fes: 1 }, "reserved type: {r:?}");
    bystander_io(&mut bystander, 2).await?;

    // 2. Oversized PLEN (1 GiB): refused from the header alone.
    let mut c = io_queue(&p, Digests::NONE).await?;
    let mut b = Vec::new();
    tcp::encode_capsule_cmd(
        &mut b,
        &rw_sqe(io_opc::READ, 1, 0, 1, false),
        &[],
        Digests::NONE,
        0,
    );
    b[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    c.io[0].send_raw(&b).await?;
    let r = reaction(&mut c.io[0], Digests::NONE).await?;
    ensure!(r == Reaction::Term { fes: 1 }, "oversized: {r:?}");
    bystander_io(&mut bystander, 3).await?;

    // 3. Bad header digest.
    let mut c = io_queue(&p, BOTH).await?;
    let mut b = Vec::new();
    let mut sqe = rw_sqe(io_opc::READ, 1, 0, 1, false);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: SGL_ID_TRANSPORT,
    });
    tcp::encode_capsule_cmd(&mut b, &sqe, &[], BOTH, 0);
    b[72] ^= 0x5a;
    c.io[0].send_raw(&b).await?;
    let r = reaction(&mut c.io[0], BOTH).await?;
    ensure!(r == Reaction::Term { fes: 3 }, "bad header digest: {r:?}");
    bystander_io(&mut bystander, 4).await?;

    // 4. Bad data digest on in-capsule write data: the connection is dropped.
    let mut c = io_queue(&p, BOTH).await?;
    let mut b = Vec::new();
    let mut sqe = rw_sqe(io_opc::WRITE, 1, 0, 1, false);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: quarry_nvmeof::spec::SGL_ID_INCAPSULE,
    });
    tcp::encode_capsule_cmd(&mut b, &sqe, &[0xee; 4096], BOTH, 0);
    spoil_last_byte(&mut b);
    c.io[0].send_raw(&b).await?;
    let r = reaction(&mut c.io[0], BOTH).await?;
    ensure!(r == Reaction::Closed, "bad data digest: {r:?}");
    bystander_io(&mut bystander, 5).await?;

    // 4b. Bad data digest on a large H2CData PDU, whose data the target reads in place
    // rather than buffering the PDU: dropped too, and nothing of it is written.
    let mut c = io_queue(&p, BOTH).await?;
    let r2t = start_r2t_write(&mut c, 78, 256, 256 * 1024, BOTH).await?;
    let mut b = Vec::new();
    tcp::encode_h2c_data(&mut b, 78, r2t.ttag, 0, &[0xcd; 256 * 1024], true, BOTH, 0);
    spoil_last_byte(&mut b);
    c.io[0].send_raw(&b).await?;
    let r = reaction(&mut c.io[0], BOTH).await?;
    ensure!(r == Reaction::Closed, "bad data digest, large PDU: {r:?}");
    bystander_io(&mut bystander, 5).await?;
    let got = bystander.read(0, 1, 256, 64, 4096).await?;
    ensure!(
        got.iter().all(|&x| x == 0),
        "data with a bad digest was written"
    );

    // 4c. A large H2CData PDU with the wrong transfer tag: the same termination request
    // as for any H2CData PDU the command does not expect (invalid field at byte 10).
    let mut c = io_queue(&p, Digests::NONE).await?;
    let r2t = start_r2t_write(&mut c, 79, 320, 256 * 1024, Digests::NONE).await?;
    let mut b = Vec::new();
    let wrong = r2t.ttag.wrapping_add(1);
    tcp::encode_h2c_data(
        &mut b,
        79,
        wrong,
        0,
        &[0xcd; 256 * 1024],
        true,
        Digests::NONE,
        0,
    );
    c.io[0].send_raw(&b).await?;
    let r = reaction(&mut c.io[0], Digests::NONE).await?;
    ensure!(r == Reaction::Term { fes: 1 }, "wrong transfer tag: {r:?}");
    bystander_io(&mut bystander, 5).await?;

    // 4d. A 128 KiB write with its data in the capsule (read in place by the target):
    // written exactly with digests on; with a bad data digest the connection is dropped
    // and nothing is written.
    for (slba, corrupt) in [(384u64, false), (448, true)] {
        let mut c = io_queue(&p, BOTH).await?;
        let data = pattern(slba, 4, 128 * 1024);
        let mut sqe = rw_sqe(io_opc::WRITE, 1, slba, 32, false);
        sqe.set_cid(80);
        sqe.set_sgl(Sgl {
            addr: 0,
            len: 128 * 1024,
            id: quarry_nvmeof::spec::SGL_ID_INCAPSULE,
        });
        let mut b = Vec::new();
        tcp::encode_capsule_cmd(&mut b, &sqe, &data, BOTH, 0);
        if corrupt {
            spoil_last_byte(&mut b);
        }
        c.io[0].send_raw(&b).await?;
        let got = bystander_read_after(&mut c, &mut bystander, slba, corrupt).await?;
        if corrupt {
            ensure!(
                got.iter().all(|&x| x == 0),
                "in-capsule data with a bad digest was written"
            );
        } else {
            ensure!(got == data, "in-capsule 128 KiB write read back differs");
        }
    }

    // 5. Vanish mid-R2T: ask to write 512 KiB, take the R2T, send half, disconnect.
    let mut c = io_queue(&p, Digests::NONE).await?;
    let mut sqe = rw_sqe(io_opc::WRITE, 1, 64, 128, false);
    sqe.set_cid(77);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 512 * 1024,
        id: SGL_ID_TRANSPORT,
    });
    let mut b = Vec::new();
    tcp::encode_capsule_cmd(&mut b, &sqe, &[], Digests::NONE, 0);
    c.io[0].send_raw(&b).await?;
    let frame = c.io[0].read_frame().await?;
    let Pdu::R2t(r2t) = tcp::decode(&frame, &DecodeContext::default())? else {
        bail!("expected an R2T")
    };
    let mut b = Vec::new();
    tcp::encode_h2c_data(
        &mut b,
        77,
        r2t.ttag,
        0,
        &[0xab; 256 * 1024],
        false,
        Digests::NONE,
        0,
    );
    c.io[0].send_raw(&b).await?;
    drop(c);
    bystander_io(&mut bystander, 6).await?;
    // Nothing of the half-sent write reached the disk.
    let got = bystander.read(0, 1, 64, 64, 4096).await?;
    ensure!(got.iter().all(|&x| x == 0), "partial R2T data was written");

    // 6. Garbage before ICReq: closed without reply.
    let mut s = tokio::net::TcpStream::connect(p.nvme).await?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(&[0xff; 64]).await?;
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    ensure!(n == 0, "target answered garbage with {n} bytes");

    // And a brand-new controller still works.
    let mut fresh = Controller::connect(&Options::new(p.nvme, NQN)).await?;
    let data = pattern(9, 9, 4096);
    check(
        &fresh.write(0, 1, 500, data.clone(), 4096, false).await?,
        "fresh write",
    )?;
    ensure!(fresh.read(0, 1, 500, 1, 4096).await? == data);
    bystander_io(&mut bystander, 7).await?;
    Ok(())
}
