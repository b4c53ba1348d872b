//! NVMe/TCP ports against the real binary: a discovery-only listener, an advertised
//! address for NAT, listeners added and removed through the REST API (bound before the
//! answer, listed in the discovery log, bound again after a restart).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context};
use quarry_tests::nvme_initiator::{
    check, discover, pattern, Controller, Digests, Options, TEST_HOSTNQN,
};
use quarry_tests::{free_port, QuarryProcess};
use serde_json::json;

const NQN: &str = "nqn.2026-11.io.quarry:ports";

fn provision(p: &QuarryProcess) -> anyhow::Result<()> {
    p.admin()?.export_volume("pv", 8 << 20, NQN, None)
}

async fn write_and_read(addr: SocketAddr, generation: u64) -> anyhow::Result<()> {
    let mut c = Controller::connect(&Options::new(addr, NQN)).await?;
    let data = pattern(3, generation, 16 * 1024);
    check(&c.write(0, 1, 3, data.clone(), 4096, false).await?, "write")?;
    ensure!(c.read(0, 1, 3, 4, 4096).await? == data, "read back differs");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn discovery_port_advertised_address_and_api_listeners() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let discovery: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let disc = discovery.to_string();
    let env = [
        ("QUARRY_NVME_DISCOVERY_LISTEN", disc.as_str()),
        ("QUARRY_NVME_ADVERTISE", "127.0.0.1"),
    ];
    let p = QuarryProcess::start_with(&data, &env)?;
    provision(&p)?;
    let api = p.admin()?;

    // The discovery-only port answers discovery and lists the I/O port, not itself.
    let entries = discover(discovery, TEST_HOSTNQN, Digests::NONE).await?;
    let ours: Vec<_> = entries.iter().filter(|e| e.subnqn == NQN).collect();
    ensure!(ours.len() == 1, "{entries:?}");
    ensure!(ours[0].trsvcid == p.nvme.port().to_string(), "{entries:?}");
    ensure!(ours[0].traddr == "127.0.0.1", "{entries:?}");

    // Add a listener on all addresses with an address advertised for NAT.
    let extra_port = free_port()?;
    let b = api.create("/api/v1/nvme/listeners",
        &json!({"transport": "tcp", "address": "0.0.0.0", "port": extra_port, "advertise": "10.0.2.2"}),)?;
    let id = b["id"].as_i64().context("listener id")?;
    let extra: SocketAddr = ([127, 0, 0, 1], extra_port).into();
    write_and_read(extra, 1).await?;
    let entries = discover(discovery, TEST_HOSTNQN, Digests::NONE).await?;
    let mut ports: Vec<(String, String)> = entries
        .iter()
        .filter(|e| e.subnqn == NQN)
        .map(|e| (e.traddr.clone(), e.trsvcid.clone()))
        .collect();
    ports.sort();
    let mut want = vec![
        ("127.0.0.1".to_string(), p.nvme.port().to_string()),
        ("10.0.2.2".to_string(), extra_port.to_string()),
    ];
    want.sort();
    ensure!(ports == want, "{ports:?} != {want:?}");

    // Impossible requests are refused, and nothing is listed for them.
    for (body, want) in [
        (
            json!({"transport": "tcp", "address": "0.0.0.0", "port": extra_port}),
            409,
        ),
        (
            json!({"transport": "rdma", "address": "127.0.0.1", "port": 4420}),
            422,
        ),
        (
            json!({"transport": "tcp", "address": "storage.lab", "port": 4421}),
            422,
        ),
        (
            json!({"transport": "tcp", "address": "127.0.0.1", "port": 0}),
            422,
        ),
    ] {
        let (s, b) = api.post("/api/v1/nvme/listeners", &body)?;
        ensure!(s == want, "{body}: {s} {b}");
        if body["transport"] == "rdma" {
            // This host has no RDMA device (or the build has no RDMA): the answer
            // says why, as the one startup line does.
            ensure!(
                b.to_string().contains("RDMA listeners unavailable: "),
                "{b}"
            );
        }
    }
    let log = p.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("RDMA listeners unavailable: "))
        .collect();
    ensure!(
        lines.len() == 1,
        "want one startup line about RDMA: {lines:?}\n{log}"
    );
    let (s, list) = api.get("/api/v1/nvme/listeners")?;
    ensure!(
        s == 200 && list.as_array().map(Vec::len) == Some(3),
        "{list}"
    );

    // Restart: the stored listener is bound again without admin action.
    drop(api);
    p.stop()?;
    let p = QuarryProcess::start_with(&data, &env)?;
    write_and_read(extra, 2).await?;

    // Delete it: new connections are refused.
    let api = p.admin()?;
    let (s, b) = api.delete(&format!("/api/v1/nvme/listeners/{id}"))?;
    ensure!(s == 204, "delete listener: {s} {b}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    ensure!(
        tokio::net::TcpStream::connect(extra).await.is_err(),
        "the removed listener still accepts"
    );
    let (s, _) = api.delete(&format!("/api/v1/nvme/listeners/{id}"))?;
    ensure!(s == 404);
    let (s, list) = api.get("/api/v1/nvme/listeners")?;
    ensure!(
        s == 200 && list.as_array().map(Vec::len) == Some(2),
        "{list}"
    );
    Ok(())
}
