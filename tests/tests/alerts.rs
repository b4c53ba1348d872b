//! Alert conditions against the real binary: a share's `share.quota` warning is raised
//! once its usage reaches 90% of its quota (written over SMB by smbclient), and resolved
//! when a delete brings it below.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use quarry_tests::{Api, QuarryProcess};
use serde_json::{json, Value};

const QUOTA: u64 = 1 << 20;

fn smbclient(q: &QuarryProcess, dir: &std::path::Path, cmds: &str) -> anyhow::Result<()> {
    let out = Command::new("smbclient")
        .arg("//127.0.0.1/q")
        .args(["-p", &q.smb.port().to_string(), "-U", "qa%qa-secret-123"])
        .args(["-c", cmds])
        .current_dir(dir)
        .output()?;
    ensure!(
        out.status.success(),
        "smbclient {cmds}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Waits up to 10 s for the share's quota event to satisfy `want`.
fn wait_event(api: &Api, want: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, b) = api.get("/api/v1/events")?;
        ensure!(s == 200, "{b}");
        let ev = b
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|e| e["kind"] == "share.quota" && e["subject"] == "q")
                    .cloned()
            })
            .unwrap_or(Value::Null);
        if want(&ev) {
            return Ok(ev);
        }
        if Instant::now() > deadline {
            bail!("quota event never reached the wanted state: {b}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn share_quota_alert_raised_at_90_percent_and_resolved_below() -> anyhow::Result<()> {
    let q = QuarryProcess::start()?;
    let api = q.admin()?;
    api.create(
        "/api/v1/users",
        &json!({"name": "qa", "password": "qa-secret-123"}),
    )?;
    api.create(
        "/api/v1/shares",
        &json!({"name": "q", "quota_bytes": QUOTA}),
    )?;
    let dir = tempfile::tempdir()?;
    // 85%: no alert.
    std::fs::write(
        dir.path().join("a.bin"),
        vec![1u8; (QUOTA * 85 / 100) as usize],
    )?;
    smbclient(&q, dir.path(), "put a.bin")?;
    std::thread::sleep(Duration::from_millis(2500));
    let (_, b) = api.get("/api/v1/events")?;
    ensure!(
        !b.as_array()
            .is_some_and(|a| a.iter().any(|e| e["kind"] == "share.quota")),
        "alert below 90%: {b}"
    );
    // 85% + 7% = 92%: raised.
    std::fs::write(
        dir.path().join("b.bin"),
        vec![2u8; (QUOTA * 7 / 100) as usize],
    )?;
    smbclient(&q, dir.path(), "put b.bin")?;
    let ev = wait_event(&api, |e| e.is_object())?;
    ensure!(
        ev["severity"] == "warning" && ev["resolved_at"].is_null(),
        "{ev}"
    );
    // Delete one file: resolved.
    smbclient(&q, dir.path(), "del b.bin")?;
    wait_event(&api, |e| e["resolved_at"].is_string())?;
    Ok(())
}

#[test]
fn failed_smb_login_raises_auth_failed_event() -> anyhow::Result<()> {
    let q = QuarryProcess::start()?;
    let api = q.admin()?;
    api.create(
        "/api/v1/users",
        &json!({"name": "qa", "password": "qa-secret-123"}),
    )?;
    api.create("/api/v1/shares", &json!({"name": "q"}))?;
    let out = Command::new("smbclient")
        .arg("//127.0.0.1/q")
        .args(["-p", &q.smb.port().to_string(), "-U", "qa%wrong-password"])
        .args(["-c", "ls"])
        .output()?;
    ensure!(!out.status.success(), "wrong password accepted");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, b) = api.get("/api/v1/events")?;
        ensure!(s == 200, "{b}");
        let found = b.as_array().is_some_and(|a| {
            a.iter().any(|e| {
                e["kind"] == "auth.failed"
                    && e["subject"] == "qa"
                    && e["message"].as_str().is_some_and(|m| m.contains("SMB"))
            })
        });
        if found {
            break;
        }
        if Instant::now() > deadline {
            bail!("no auth.failed event for the SMB login: {b}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The server still serves the right password.
    smbclient(&q, std::path::Path::new("/tmp"), "ls")?;
    Ok(())
}
