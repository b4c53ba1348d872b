//! Many clients reading one file at once (model weights fanned out to inference nodes),
//! through the `smb` crate against the real `quarry` binary: every reader gets the file's
//! bytes, and responses that carry data another open already read (signed, sent from one
//! shared buffer, `appliance/src/smb_service/posix_fs/shared_reads.rs`) pass the client's
//! signature check. The shared-read counter in `/metrics` shows the shared path ran for the
//! signed share, and did not for an encrypted share, whose responses each seal their own
//! copy.

use std::str::FromStr;
use std::sync::Arc;

use anyhow::{ensure, Context};
use quarry_tests::smb_workloads::{crate_client, write_then_read_back};
use quarry_tests::{xorshift_bytes, QuarryProcess};
use serde_json::json;
use smb::{Client, FileAccessMask, FileCreateArgs, ReadAt, UncPath};
use tokio::sync::Barrier;

const USER: &str = "fan";
const PASS: &str = "fan-out-secret-3";
/// Readers of the one file, each its own connection and session.
const READERS: usize = 6;
/// Several 1 MiB reads, the last one short.
const FILE_LEN: usize = 6 * 1024 * 1024 + 4097;
/// Each reader's request size: above the 256 KiB from which READs may share.
const PIECE: usize = 1 << 20;
/// How long the writer's last change must lie in the past before the server keeps reads of
/// the file for others (`posix_fs::shared_reads::SETTLE`, 3 s), with a margin.
const SETTLED_AFTER: std::time::Duration = std::time::Duration::from_millis(3_200);

fn client(port: u16, encrypt: bool) -> Client {
    crate_client(port, encrypt, None)
}

/// `quarry_smb_shared_read_bytes_total` as `/metrics` reports it now.
fn shared_read_bytes(q: &QuarryProcess) -> anyhow::Result<f64> {
    let mut resp = ureq::get(format!("{}/metrics", q.url())).call()?;
    let text = resp.body_mut().read_to_string()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("quarry_smb_shared_read_bytes_total "))
        .context("no shared-read counter in /metrics")?;
    let value = line.rsplit(' ').next().unwrap_or_default();
    value
        .parse()
        .with_context(|| format!("counter value {line:?}"))
}

/// Writes the file through one client, then has [`READERS`] clients open it, wait until all
/// have it open, and read it whole at once; each compares what it read with what was written.
async fn fan_out(q: &QuarryProcess, share: &str, encrypt: bool, seed: u64) -> anyhow::Result<()> {
    let port = q.smb.port();
    let unc = UncPath::from_str(&format!(r"\\127.0.0.1:{port}\{share}"))?;
    let path = unc.clone().with_path("weights.bin");
    let data = Arc::new(xorshift_bytes(FILE_LEN, seed));
    let writer = client(port, encrypt);
    writer.share_connect(&unc, USER, PASS.to_string()).await?;
    let back = write_then_read_back(&writer, &path, &data).await?;
    ensure!(back == *data, "{share}: the writer's own read back differs");
    // Reads of a file changed within the last seconds are not kept for others: wait until
    // its times would show any further change.
    tokio::time::sleep(SETTLED_AFTER).await;
    let all_open = Arc::new(Barrier::new(READERS));
    let mut tasks = Vec::new();
    for r in 0..READERS {
        let (unc, path, data, all_open) =
            (unc.clone(), path.clone(), data.clone(), all_open.clone());
        tasks.push(tokio::spawn(async move {
            let c = client(port, encrypt);
            c.share_connect(&unc, USER, PASS.to_string()).await?;
            let file = c
                .create_file(
                    &path,
                    &FileCreateArgs::make_open_existing(
                        FileAccessMask::new().with_generic_read(true),
                    ),
                )
                .await?
                .unwrap_file();
            all_open.wait().await;
            let mut got = vec![0u8; FILE_LEN];
            let mut at = 0;
            while at < got.len() {
                let end = (at + PIECE).min(got.len());
                let n = file
                    .read_at(&mut got[at..end], at as u64)
                    .await
                    .with_context(|| format!("reader {r} at {at}"))?;
                ensure!(n > 0, "reader {r}: end of file at {at}");
                at += n;
            }
            file.close().await?;
            ensure!(
                got == *data,
                "reader {r}: the bytes read differ from the file's"
            );
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[test]
fn many_readers_of_one_file_get_its_bytes_signed_from_one_shared_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = QuarryProcess::start_with(&dir.path().join("data"), &[]).expect("quarry starts");
    let api = q.admin().expect("admin login");
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .expect("create user");
    api.create(
        "/api/v1/shares",
        &json!({"name": "models", "users": [USER]}),
    )
    .expect("create the signed share");
    api.create(
        "/api/v1/shares",
        &json!({"name": "sealed", "users": [USER], "encrypt": true}),
    )
    .expect("create the encrypted share");
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    let before = shared_read_bytes(&q).expect("scrape");
    assert_eq!(before, 0.0);
    rt.block_on(fan_out(&q, "models", false, 11))
        .unwrap_or_else(|e| panic!("signed fan-out: {e:#}\n{}", q.log_text()));
    let signed = shared_read_bytes(&q).expect("scrape");
    eprintln!(
        "{signed} of {} bytes read answered from shared reads",
        READERS * FILE_LEN
    );
    // Every range is read by all readers once all have the file open: most of the bytes
    // (all but the first reader's of each range) can come from a shared read. At least one
    // reader's worth must have, or the shared path never ran.
    assert!(
        signed >= FILE_LEN as f64,
        "only {signed} bytes answered from shared reads"
    );
    assert!(signed <= ((READERS - 1) * FILE_LEN) as f64, "{signed}");

    rt.block_on(fan_out(&q, "sealed", true, 12))
        .unwrap_or_else(|e| panic!("encrypted fan-out: {e:#}\n{}", q.log_text()));
    let sealed = shared_read_bytes(&q).expect("scrape");
    assert_eq!(
        sealed, signed,
        "a sealed response must never send shared bytes"
    );
}
