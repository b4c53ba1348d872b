//! The Linux kernel's own cifs client (Debian 6.1 under qemu TCG, busybox `mount -t cifs`)
//! against the real `quarry` binary on the host, through the guest lab's `cifs` check set:
//! mounts with `vers=3.1.1,seal` and with `vers=3.0` (the options verified in /proc/mounts),
//! a 64 MiB file copied in, remounted, copied out and compared by SHA-256, `ls -l`, 1,000
//! files created / renamed / deleted, `df` reporting the share's quota as the size, cleanup,
//! `sync` and a clean unmount. With the lease Quarry grants, re-reading the 64 MiB file is
//! served from the client's cache: the share's READ counter (from `/metrics`, read by the
//! guest) does not move. With the directory lease on the share root, listing it again sends
//! no QUERY_DIRECTORY, and a file created there over a second connection (a `nosharesock`
//! mount) still appears in the first mount's listing: the server broke the lease.
//!
//! Needs qemu and the guest lab cache (minutes under TCG), so it is `#[ignore]`d:
//! `cargo test -p quarry-tests --test smb_kernel_cifs cifs_linux -- --ignored --nocapture`

#[path = "../guest/harness.rs"]
mod guest;

use anyhow::ensure;
use quarry_tests::QuarryProcess;
use serde_json::json;

const USER: &str = "kernel";
const PASS: &str = "kernel-secret-7";
/// The share's quota, which `df` in the guest must report as the file system size.
const QUOTA_BYTES: u64 = 2 << 30;
/// Whole guest run limit (boot + two mounts' worth of checks) under TCG.
const GUEST_TIMEOUT_SECS: u64 = 2400;

#[test]
#[ignore = "boots a qemu TCG guest (minutes); run with --ignored"]
fn cifs_linux_kernel_client_acceptance() -> anyhow::Result<()> {
    let q = QuarryProcess::start()?;
    let api = q.admin()?;
    let (s, b) = api.post("/api/v1/users", &json!({"name": USER, "password": PASS}))?;
    ensure!(s == 201, "user: {s} {b}");
    let (s, b) = api.post(
        "/api/v1/shares",
        &json!({"name": "kdata", "quota_bytes": QUOTA_BYTES}),
    )?;
    ensure!(s == 201, "share: {s} {b}");
    let run = guest::GuestRun::new(&["cifs"])
        .param("SMB_ADDR", guest::HOST_FROM_GUEST)
        .param("SMB_PORT", &q.smb.port().to_string())
        .param("SMB_SHARE", "kdata")
        .param("SMB_USER", USER)
        .param("SMB_PASS", PASS)
        .param("SMB_EXPECT_SIZE_KIB", &(QUOTA_BYTES / 1024).to_string())
        .param(
            "SMB_METRICS_URL",
            &format!(
                "http://{}:{}/metrics",
                guest::HOST_FROM_GUEST,
                q.http.port()
            ),
        )
        .timeout_secs(GUEST_TIMEOUT_SECS)
        .run()?;
    ensure!(run.passed(), "{}", run.summary());
    for tag in ["3.1.1+seal", "3.0"] {
        for shown in ["reread_cached", "root_listing_cached", "root_listing_fresh"] {
            if let Some(c) = run.check(&format!("cifs.{tag}.{shown}")) {
                println!("{}: {}", c.name, c.detail);
            }
        }
        for step in [
            "mount_opts",
            "copy_out",
            "reread_cached",
            "root_listing_cached",
            "root_listing_fresh",
            "create",
            "rename",
            "delete",
            "df",
            "umount",
        ] {
            let name = format!("cifs.{tag}.{step}");
            ensure!(
                run.check(&name).is_some_and(|c| c.passed),
                "{name} missing or failed: {}",
                run.summary()
            );
        }
    }
    Ok(())
}
