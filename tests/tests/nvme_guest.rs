//! The Linux kernel NVMe/TCP initiator (Debian 6.1 under qemu TCG, nvme-cli, fio,
//! ext4) against the real `quarry` binary on the host, through the guest lab's
//! `nvme_tcp` check set: discover, connect with and without digests, id-ctrl, id-ns,
//! smart-log, list, mkfs + mount + 64 MiB write + verify after reconnect, fio
//! crc32c-verified randwrite at 4k and 128k, a namespace added through the REST API
//! while connected, and a host NQN outside the allow list refused.
//!
//! Needs qemu and the guest lab cache (minutes under TCG), so it is `#[ignore]`d:
//! `cargo test -p quarry-tests --test nvme_guest -- --ignored --nocapture`.

use std::process::Command;

use anyhow::{ensure, Context};
use quarry_tests::QuarryProcess;
use serde_json::json;

const NQN: &str = "nqn.2026-11.io.quarry:guest";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0a0b0c0d-1111-2222-3333-444455556666";
const DENIED: &str = "nqn.2014-08.org.nvmexpress:uuid:deadbeef-1111-2222-3333-444455556666";
/// Whole guest run limit (boot + both digest modes + fio) under TCG.
const GUEST_TIMEOUT_SECS: &str = "2400";

#[test]
#[ignore = "boots a qemu TCG guest (minutes); run with --ignored"]
fn nvme_linux_kernel_initiator_acceptance() -> anyhow::Result<()> {
    let p = QuarryProcess::start()?;
    let api = p.admin()?;
    for (name, size) in [("guest1", 512u64 << 20), ("guest2", 64u64 << 20)] {
        let (s, b) = api.post(
            "/api/v1/volumes",
            &json!({"name": name, "size_bytes": size}),
        )?;
        ensure!(s < 300, "volume {name}: {s} {b}");
    }
    let (s, b) = api.post(
        "/api/v1/nvme/subsystems",
        &json!({"nqn": NQN, "allow_any_host": false, "hosts": [HOSTNQN]}),
    )?;
    ensure!(s < 300, "subsystem: {s} {b}");
    let (s, b) = api.post(
        &format!("/api/v1/nvme/subsystems/{NQN}/namespaces"),
        &json!({"volume": "guest1"}),
    )?;
    ensure!(s < 300, "namespace: {s} {b}");
    let token = api.token().context("no API token")?;
    let ns_add = format!(
        "wget -q -O- --header 'Authorization: Bearer {token}' --header 'Content-Type: application/json' \
         --post-data '{{\"volume\":\"guest2\"}}' http://10.0.2.2:{}/api/v1/nvme/subsystems/{NQN}/namespaces",
        p.http.port()
    );
    let dir = tempfile::tempdir()?;
    let params = dir.path().join("params");
    std::fs::write(
        &params,
        format!(
            "NVME_ADDR=10.0.2.2\nNVME_PORT={}\nNVME_NQN={NQN}\nNVME_HOSTNQN={HOSTNQN}\n\
             NVME_DENIED_HOSTNQN={DENIED}\nNVME_NS_ADD_CMD={ns_add}\n",
            p.nvme.port()
        ),
    )?;
    let run = concat!(env!("CARGO_MANIFEST_DIR"), "/guest/run.sh");
    let out = Command::new(run)
        .args([
            "--checks",
            "nvme_tcp",
            "--quiet",
            "--timeout",
            GUEST_TIMEOUT_SECS,
        ])
        .arg("--params-file")
        .arg(&params)
        .output()
        .context("running tests/guest/run.sh")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    ensure!(
        out.status.success(),
        "guest checks failed ({}):\n{stdout}\n{}\nquarry log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
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
            stdout.contains(&format!("GUEST-CHECK {check} PASS")),
            "{check} did not pass:\n{stdout}"
        );
    }
    Ok(())
}
