//! Host-side NVMe/TCP check for targets the tests do not start themselves (the
//! appliance image under qemu, reached through a host forward).
//!
//! ```text
//! quarry-nvme-check ADDR:PORT SUBNQN write GENERATION   # write, read back, flush
//! quarry-nvme-check ADDR:PORT SUBNQN verify GENERATION  # read back only
//! ```
//!
//! `write` puts a 4 KiB block at LBA 0 (in-capsule) and 256 KiB at LBA 16 (R2T, FUA)
//! of namespace 1, reads both back, compares them and flushes. `verify` reads the same
//! ranges and compares them with what `write` of that GENERATION wrote (data that must
//! have survived a reboot). Exits non-zero with a one-line reason on any difference.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::{bail, ensure, Context};
use quarry_nvmeof::spec::{io_opc, Sqe};
use quarry_tests::nvme_initiator::{check, pattern, Command, Controller, Digests, Options};

/// Namespace the check uses.
const NSID: u32 = 1;
/// Block size the appliance exports.
const BLOCK: u32 = 4096;
/// First LBA of the large write.
const BIG_LBA: u64 = 16;
/// Size of the large write (several R2T rounds).
const BIG_BYTES: usize = 256 * 1024;

/// What to do.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Write,
    Verify,
}

fn usage() -> anyhow::Error {
    anyhow::anyhow!("usage: quarry-nvme-check ADDR:PORT SUBNQN write|verify GENERATION")
}

async fn run(addr: SocketAddr, nqn: &str, mode: Mode, generation: u64) -> anyhow::Result<()> {
    let mut o = Options::new(addr, nqn);
    // Digests on: a corrupted byte through the forward must fail the check.
    o.digests = Digests {
        header: true,
        data: true,
    };
    let mut c = Controller::connect(&o)
        .await
        .with_context(|| format!("connecting to {nqn} at {addr}"))?;
    let namespaces = c.namespaces().await?;
    ensure!(
        namespaces.contains(&NSID),
        "namespace {NSID} missing: {namespaces:?}"
    );
    let (blocks, bs) = c.namespace_size(NSID).await?;
    ensure!(bs == BLOCK, "block size {bs}, expected {BLOCK}");
    let big_blocks = (BIG_BYTES as u64) / u64::from(BLOCK);
    ensure!(
        blocks >= BIG_LBA + big_blocks,
        "namespace too small: {blocks} blocks"
    );

    let small = pattern(0, generation, BLOCK as usize);
    let big = pattern(BIG_LBA, generation, BIG_BYTES);
    if mode == Mode::Write {
        check(
            &c.write(0, NSID, 0, small.clone(), bs, false).await?,
            "write 4 KiB",
        )?;
        check(
            &c.write(0, NSID, BIG_LBA, big.clone(), bs, true).await?,
            "write 256 KiB",
        )?;
        let mut flush = Sqe::new(io_opc::FLUSH, 0);
        flush.set_nsid(NSID);
        let r =
            c.io.first_mut()
                .context("no I/O queue")?
                .exec(Command {
                    sqe: flush,
                    write: None,
                    read_len: 0,
                })
                .await?;
        check(&r, "flush")?;
    }
    if c.read(0, NSID, 0, 1, bs).await? != small {
        bail!("4 KiB at LBA 0 differs from generation {generation}");
    }
    let nlb = u32::try_from(big_blocks)?;
    if c.read(0, NSID, BIG_LBA, nlb, bs).await? != big {
        bail!("256 KiB at LBA {BIG_LBA} differs from generation {generation}");
    }
    println!(
        "nvme {}: {nqn} at {addr}: 4 KiB + 256 KiB of generation {generation} read back ({blocks} blocks of {bs})",
        if mode == Mode::Write {
            "write+verify"
        } else {
            "verify"
        }
    );
    Ok(())
}

fn parse() -> anyhow::Result<(SocketAddr, String, Mode, u64)> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, nqn, mode, generation] = args.as_slice() else {
        return Err(usage());
    };
    let addr: SocketAddr = addr.parse().with_context(|| format!("address {addr}"))?;
    let mode = match mode.as_str() {
        "write" => Mode::Write,
        "verify" => Mode::Verify,
        _ => return Err(usage()),
    };
    let generation = generation
        .parse()
        .with_context(|| format!("generation {generation}"))?;
    Ok((addr, nqn.clone(), mode, generation))
}

fn main() -> ExitCode {
    let result = parse().and_then(|(addr, nqn, mode, generation)| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(run(addr, &nqn, mode, generation))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quarry-nvme-check: {e:#}");
            ExitCode::FAILURE
        }
    }
}
