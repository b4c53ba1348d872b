//! NVMe/RDMA acceptance: Quarry (built with the `rdma` feature) runs INSIDE the guest
//! lab's Debian 6.1 kernel under qemu TCG, on Soft-RoCE (rdma_rxe on eth0), and the
//! kernel's own nvme-rdma initiator discovers it, connects, mkfs + writes + verifies
//! after a reconnect, runs fio with crc32c verification at 4k random and 128k
//! sequential writes, disconnects, reconnects and verifies the 128k data again; then
//! the same namespace is connected over NVMe/TCP and NVMe/RDMA at once and each path
//! reads what the other wrote, the discovery log lists both transports, and the idle
//! target uses (almost) no CPU; a host that deletes its controller in the middle of
//! 128k writes leaves no registered memory behind. Check sets: quarry_target,
//! nvme_rdma, nvme_dual, nvme_rdma_abort, quarry_stop (tests/guest/README.md).
//!
//! The binary: `$QUARRY_GUEST_BIN` if set, else `cargo build --release -p quarry
//! --features rdma` into `target/guest-rdma` (needs libibverbs-dev, librdmacm-dev,
//! libclang-dev). Boots a guest (minutes), so `#[ignore]`d:
//! `cargo test -p quarry-tests --test nvme_rdma_guest -- --ignored --nocapture`.

#[path = "../guest/harness.rs"]
mod guest;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context};

const NQN: &str = "nqn.2026-11.io.quarry:rdma-guest";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0a0b0c0d-7777-2222-3333-444455556666";
/// Whole guest run limit (boot + in-guest Quarry + nvme-rdma + dual path) under TCG.
const GUEST_TIMEOUT_SECS: u64 = 2400;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A `quarry` binary with the NVMe/RDMA transport.
fn rdma_binary() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("QUARRY_GUEST_BIN") {
        return Ok(PathBuf::from(p));
    }
    let target_dir = workspace().join("target").join("guest-rdma");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace())
        .args(["build", "--release", "-p", "quarry", "--features", "rdma"])
        .arg("--target-dir")
        .arg(&target_dir)
        .status()
        .context("running cargo build")?;
    ensure!(status.success(), "cargo build --features rdma failed");
    Ok(target_dir.join("release").join("quarry"))
}

#[test]
#[ignore = "builds quarry with RDMA and boots a qemu TCG guest (minutes); run with --ignored"]
fn nvme_rdma_linux_initiator_against_quarry_in_guest() -> anyhow::Result<()> {
    let bin = rdma_binary()?;
    let dir = tempfile::tempdir()?;
    let overlay = dir.path().join("quarry.cpio");
    let status = Command::new(workspace().join("tests/guest/quarry_overlay.sh"))
        .arg(&bin)
        .arg(&overlay)
        .status()
        .context("running quarry_overlay.sh")?;
    ensure!(status.success(), "quarry_overlay.sh failed");
    let run = guest::GuestRun::new(&[
        "quarry_target",
        "nvme_rdma",
        "nvme_dual",
        "nvme_rdma_abort",
        "quarry_stop",
    ])
    .extra_cpio(&overlay)
    .param("NVME_NQN", NQN)
    .param("NVME_HOSTNQN", HOSTNQN)
    .param("NVME_RDMA_ADDR", "10.0.2.15")
    .param("NVME_RDMA_PORT", "4421")
    .param("NVME_DATA_MIB", "16")
    .param("NVME_RDMA_FIO_4K_MIB", "8")
    .param("NVME_RDMA_FIO_128K_MIB", "32")
    .param("NVME_RDMA_FIO_128K_RW", "write")
    .param("NVME_RDMA_FIO_REVERIFY", "1")
    .timeout_secs(GUEST_TIMEOUT_SECS)
    .run()
    .map_err(|e| anyhow::anyhow!("guest run: {e:?}"))?;
    println!("{}", run.summary());
    ensure!(run.passed(), "guest checks failed:\n{}", run.summary());
    for check in [
        "quarry_target.rdma_status",
        "quarry_target.rdma_listener",
        "quarry_target.listeners",
        "nvme_rdma.discover",
        "nvme_rdma.plain.connect",
        "nvme_rdma.plain.id_ctrl",
        "nvme_rdma.plain.verify",
        "nvme_rdma.plain.fio_4k",
        "nvme_rdma.plain.fio_128k",
        "nvme_rdma.plain.fio_reconnect",
        "nvme_rdma.plain.fio_reverify",
        "nvme_rdma.plain.disconnect_final",
        "nvme_dual.both_live",
        "nvme_dual.tcp_to_rdma",
        "nvme_dual.rdma_to_tcp",
        "nvme_dual.discovery_tcp",
        "nvme_dual.discovery_rdma",
        "nvme_dual.idle_cpu",
        "nvme_rdma_abort.abort",
        "nvme_rdma_abort.released",
        "nvme_rdma_abort.fio_after",
        "quarry_stop.no_panic",
        "quarry_stop.exit",
    ] {
        ensure!(
            run.check(check).is_some_and(|c| c.passed),
            "{check} did not pass:\n{}",
            run.summary()
        );
    }
    Ok(())
}
