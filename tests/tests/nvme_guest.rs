//! The Linux kernel NVMe/TCP initiator (Debian 6.1 under qemu TCG, nvme-cli, fio,
//! ext4) against the real `quarry` binary on the host, through the guest lab's
//! `nvme_tcp` check set: discover, connect with and without digests, id-ctrl, id-ns,
//! smart-log, list, mkfs + mount + 64 MiB write + verify after reconnect, fio
//! crc32c-verified randwrite at 4k and 128k, a namespace added through the REST API
//! while connected, and a host NQN outside the allow list refused.
//!
//! Needs qemu and the guest lab cache (minutes under TCG), so it is `#[ignore]`d:
//! `cargo test -p quarry-tests --test nvme_guest nvme_linux -- --ignored --nocapture`
//! (the name filter skips the harness's own smoke boot, which `--ignored` would also run).

#[path = "../guest/harness.rs"]
mod guest;

use anyhow::{ensure, Context};
use quarry_tests::QuarryProcess;
use serde_json::json;

const NQN: &str = "nqn.2026-11.io.quarry:guest";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0a0b0c0d-1111-2222-3333-444455556666";
const DENIED: &str = "nqn.2014-08.org.nvmexpress:uuid:deadbeef-1111-2222-3333-444455556666";
/// Whole guest run limit (boot + both digest modes + fio) under TCG.
const GUEST_TIMEOUT_SECS: u64 = 2400;

#[test]
#[ignore = "boots a qemu TCG guest (minutes); run with --ignored"]
fn nvme_linux_kernel_initiator_acceptance() -> anyhow::Result<()> {
    // A discovery-only port, and the address the guest reaches us on advertised in
    // discovery log entries (through qemu's NAT it is not our bind address).
    let dir = tempfile::tempdir()?;
    let disc_port = quarry_tests::free_port()?;
    let disc = format!("127.0.0.1:{disc_port}");
    let p = QuarryProcess::start_with(
        &dir.path().join("data"),
        &[
            ("QUARRY_NVME_DISCOVERY_LISTEN", disc.as_str()),
            ("QUARRY_NVME_ADVERTISE", guest::HOST_FROM_GUEST),
        ],
    )?;
    let api = p.admin()?;
    api.export_volume("guest1", 512 << 20, NQN, Some(&[HOSTNQN]))?;
    api.create(
        "/api/v1/volumes",
        &json!({"name": "guest2", "size_bytes": 64u64 << 20}),
    )?;
    let token = api.token().context("no API token")?;
    let ns_add = format!(
        "wget -q -O- --header 'Authorization: Bearer {token}' --header 'Content-Type: application/json' \
         --post-data '{{\"volume\":\"guest2\"}}' http://10.0.2.2:{}/api/v1/nvme/subsystems/{NQN}/namespaces",
        p.http.port()
    );
    let run = guest::GuestRun::new(&["nvme_tcp"])
        .param("NVME_ADDR", guest::HOST_FROM_GUEST)
        .param("NVME_PORT", &p.nvme.port().to_string())
        .param("NVME_DISC_PORT", &disc_port.to_string())
        .param("NVME_EXPECT_TRADDR", guest::HOST_FROM_GUEST)
        .param("NVME_NQN", NQN)
        .param("NVME_HOSTNQN", HOSTNQN)
        .param("NVME_DENIED_HOSTNQN", DENIED)
        .param("NVME_NS_ADD_CMD", &ns_add)
        .timeout_secs(GUEST_TIMEOUT_SECS)
        .run()
        .map_err(|e| anyhow::anyhow!("guest run: {e:?}"))?;
    println!("{}", run.summary());
    ensure!(
        run.passed(),
        "guest checks failed:\n{}\nquarry log:\n{}",
        run.summary(),
        p.log_text()
    );
    // The acceptance checks this issue names must all have run and passed.
    for check in [
        "nvme_tcp.discover",
        "nvme_tcp.plain.connect",
        "nvme_tcp.digest.connect",
        "nvme_tcp.plain.id_ctrl",
        "nvme_tcp.plain.id_ns",
        "nvme_tcp.plain.smart_log",
        "nvme_tcp.plain.list",
        "nvme_tcp.plain.verify",
        "nvme_tcp.digest.verify",
        "nvme_tcp.plain.fio_4k",
        "nvme_tcp.plain.fio_128k",
        "nvme_tcp.digest.fio_4k",
        "nvme_tcp.digest.fio_128k",
        "nvme_tcp.plain.ns_add",
        "nvme_tcp.denied_host",
    ] {
        ensure!(
            run.check(check).is_some_and(|c| c.passed),
            "{check} did not pass:\n{}",
            run.summary()
        );
    }
    Ok(())
}
