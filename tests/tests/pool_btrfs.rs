//! The managed btrfs pool against the real `quarry` binary over loop devices on sparse
//! 1 GiB files: create a raid10 pool through the API, fill a quota-limited share over SMB
//! to NT_STATUS_DISK_FULL, repair a corrupted block with a scrub, detect a failed device,
//! replace it, and import the pool again after a restart. A directory pool in a folder
//! of a btrfs disk makes its volume files NOCOW as the managed pool does.
//!
//! Needs root (loop devices, mounts). Run as another user, each test prints why it is
//! skipped and returns. Loop devices and mounts are released by a guard even on failure.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use quarry_tests::{Api, QuarryProcess};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const GIB: u64 = 1 << 30;
const MIB: usize = 1 << 20;
const USER: &str = "pooluser";
const PASS: &str = "pooluser-secret-1";
/// Repeated at the start of every 4 KiB block of the file the scrub test corrupts.
const MARKER: &[u8; 16] = b"QUARRY-SCRUB-MK1";

/// True (and says so) when the test cannot run: it needs root for loop devices and mounts.
fn skipped_without_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    if !root {
        eprintln!("SKIPPED: the btrfs pool test needs root for loop devices and mounts");
    }
    !root
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Loop devices over sparse files, and the mounts over them; released on drop, the
/// mounts first, last one first.
struct Loops {
    dir: tempfile::TempDir,
    files: Vec<PathBuf>,
    devs: Vec<String>,
    mounts: Vec<PathBuf>,
}

impl Loops {
    fn new(n: usize) -> Loops {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = Loops {
            dir,
            files: Vec::new(),
            devs: Vec::new(),
            mounts: Vec::new(),
        };
        for i in 0..n {
            let f = l.dir.path().join(format!("d{i}.img"));
            std::fs::File::create(&f)
                .and_then(|h| h.set_len(GIB))
                .expect("sparse file");
            let dev = sh("losetup", &["-f", "--show", &f.to_string_lossy()]);
            l.files.push(f);
            l.devs.push(dev);
        }
        l
    }

    /// Formats loop device `i` with btrfs and mounts it at `name` in the temporary
    /// directory; the mount is released with the devices.
    fn mount_btrfs(&mut self, i: usize, name: &str) -> PathBuf {
        let mnt = self.dir.path().join(name);
        std::fs::create_dir(&mnt).expect("mount point");
        sh("mkfs.btrfs", &["-q", "-f", &self.devs[i]]);
        sh("mount", &[&self.devs[i], &mnt.to_string_lossy()]);
        self.mounts.push(mnt.clone());
        mnt
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg(m).output();
            let _ = Command::new("umount").arg("-l").arg(m).output();
        }
        for d in &self.devs {
            let _ = Command::new("losetup").args(["-d", d]).output();
        }
    }
}

fn start(data: &Path) -> QuarryProcess {
    QuarryProcess::start_with(
        data,
        &[
            ("QUARRY_ALLOW_LOOP_DEVICES", "1"),
            ("QUARRY_POOL_POLL_SECS", "1"),
        ],
    )
    .expect("quarry starts")
}

fn wait_job(api: &Api, job: &Value) -> Value {
    let id = job["id"].as_i64().expect("job id");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (s, j) = api.get(&format!("/api/v1/jobs/{id}")).unwrap();
        assert_eq!(s, 200, "{j}");
        match j["state"].as_str() {
            Some("succeeded") => return j,
            Some("failed") => panic!("job failed: {j}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "job did not finish: {j}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `GET path` until its answer satisfies `f`, for up to 20 s, and returns that
/// answer; on the deadline fails with the last answer and the appliance's log.
fn wait_get(
    q: &QuarryProcess,
    api: &Api,
    path: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, v) = api.get(path).unwrap();
        assert_eq!(s, 200, "{v}");
        if f(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never showed {what}: {v}\n--- appliance log ---\n{}",
            q.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_pool(q: &QuarryProcess, api: &Api, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_get(q, api, "/api/v1/pool", what, f)
}

/// Waits for the event list to satisfy `f`: the health poller raises and resolves
/// conditions on its own tick, after the pool's state has already changed.
fn wait_events(q: &QuarryProcess, api: &Api, what: &str, f: impl Fn(&[Value]) -> bool) {
    wait_get(q, api, "/api/v1/events", what, |events| {
        let list = events
            .as_array()
            .unwrap_or_else(|| panic!("events are not a list: {events}"));
        f(list)
    });
}

fn smbclient(q: &QuarryProcess, share: &str, cmds: &str, cwd: &Path) -> String {
    let out = Command::new("smbclient")
        .arg(format!("//127.0.0.1/{share}"))
        .args([
            "-p",
            &q.smb.port().to_string(),
            "-U",
            &format!("{USER}%{PASS}"),
        ])
        .args(["-m", "SMB3_11", "-c", cmds])
        .current_dir(cwd)
        .output()
        .expect("smbclient runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

fn pattern_file(path: &Path, len: usize, seed: u64) -> String {
    let mut f = std::fs::File::create(path).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
    let mut buf = vec![0u8; MIB];
    let mut h = Sha256::new();
    let mut left = len;
    while left > 0 {
        for b in buf.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        let n = left.min(buf.len());
        f.write_all(&buf[..n]).unwrap();
        h.update(&buf[..n]);
        left -= n;
    }
    hex::encode(h.finalize())
}

fn sha256_of(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

/// Finds a 4 KiB block starting with [`MARKER`] in one of the backing files.
fn find_marker(files: &[PathBuf]) -> Option<(PathBuf, u64)> {
    for f in files {
        let mut h = std::fs::File::open(f).ok()?;
        let mut buf = vec![0u8; 4 * MIB];
        let mut off = 0u64;
        loop {
            let n = h.read(&mut buf).ok()?;
            if n == 0 {
                break;
            }
            for blk in (0..n).step_by(4096) {
                if buf[blk..].starts_with(MARKER) {
                    return Some((f.clone(), off + blk as u64));
                }
            }
            off += n as u64;
        }
    }
    None
}

fn drop_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

#[test]
fn btrfs_raid10_pool_quota_scrub_failure_replace_restart() {
    if skipped_without_root() {
        return;
    }
    let mut loops = Loops::new(6);
    let pool_devs = loops.devs[..4].to_vec();
    let spare = loops.devs[4].clone();
    let data = loops.dir.path().join("data");
    loops.mounts.push(data.join("pool"));
    let q = start(&data);
    let api = q.admin().unwrap();

    // Impossible requests are refused with a clear 4xx and touch nothing.
    let (s, b) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": [pool_devs[0]], "profile": "raid1"}),
        )
        .unwrap();
    assert_eq!(s, 422, "raid1 over one device: {b}");
    let (s, b) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": ["/dev/not-a-disk"], "profile": "single"}),
        )
        .unwrap();
    assert_eq!(s, 422, "unknown device: {b}");
    // A device of this test's own, mounted, is shown busy and refused even with force.
    // (Never another process's device: a test must not format what it does not own.)
    let busy = loops.devs[5].clone();
    let busy_mnt = loops.mount_btrfs(5, "busy");
    let (s, devices) = api.get("/api/v1/devices").unwrap();
    assert_eq!(s, 200, "{devices}");
    let shown = devices
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == busy.as_str())
        .unwrap_or_else(|| panic!("{busy} not listed: {devices}"));
    assert!(
        shown["busy"]
            .as_str()
            .is_some_and(|b| b.contains("mounted")),
        "{shown}"
    );
    let (s, b) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": [busy], "profile": "single", "force": true}),
        )
        .unwrap();
    assert_eq!(s, 409, "device in use: {b}");
    sh("umount", &[&busy_mnt.to_string_lossy()]);
    assert!(
        devices
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == pool_devs[0] && d["kind"] == "loop"),
        "{devices}"
    );

    // Create the raid10 pool.
    let (s, job) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": pool_devs, "profile": "raid10"}),
        )
        .unwrap();
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    let p = wait_pool(&q, &api, "healthy", |p| p["state"] == "healthy");
    assert_eq!(p["kind"], "btrfs", "{p}");
    assert_eq!(p["profile"], "raid10", "{p}");
    assert_eq!(p["devices"].as_array().unwrap().len(), 4, "{p}");
    let (s, b) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": [spare], "profile": "single"}),
        )
        .unwrap();
    assert_eq!(s, 409, "second pool: {b}");

    // A share with a 256 MiB quota, filled over SMB to DISK_FULL.
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    api.create(
        "/api/v1/shares",
        &json!({"name": "q", "quota_bytes": 256 * MIB}),
    )
    .unwrap();
    let share_dir = data.join("pool/shares/q");
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(&share_dir).unwrap().ino(),
            256,
            "the share is a btrfs subvolume"
        );
    }
    let local = tempfile::tempdir().unwrap();
    let a_sum = pattern_file(&local.path().join("a.bin"), 64 * MIB, 1);
    pattern_file(&local.path().join("big.bin"), 220 * MIB, 2);
    let out = smbclient(&q, "q", "put a.bin a.bin", local.path());
    assert!(!out.contains("NT_STATUS"), "{out}");
    let out = smbclient(&q, "q", "put big.bin big.bin", local.path());
    assert!(out.contains("NT_STATUS_DISK_FULL"), "{out}");
    // What reached the pool before the error is exactly the start of the file.
    if let Ok(partial) = std::fs::read(share_dir.join("big.bin")) {
        let source = std::fs::read(local.path().join("big.bin")).unwrap();
        assert!(partial.len() <= 256 * MIB, "quota held: {}", partial.len());
        // Every block is the source's (or a hole a refused write never filled).
        for (i, (got, want)) in partial.chunks(4096).zip(source.chunks(4096)).enumerate() {
            assert!(
                got == &want[..got.len()] || got.iter().all(|&b| b == 0),
                "block {i} of the partial upload ({} bytes) differs from the source",
                partial.len()
            );
        }
    }
    let out = smbclient(&q, "q", "get a.bin a.back", local.path());
    assert!(!out.contains("NT_STATUS"), "{out}");
    assert_eq!(
        sha256_of(&local.path().join("a.back")),
        a_sum,
        "a.bin intact after DISK_FULL"
    );

    // Corrupt one mirror of a data block behind btrfs's back; a scrub repairs it.
    let mut block = vec![0u8; 4096];
    let mut marked = Vec::with_capacity(MIB);
    for i in 0..(MIB / 4096) {
        block[..16].copy_from_slice(MARKER);
        block[16..24].copy_from_slice(&(i as u64).to_le_bytes());
        marked.extend_from_slice(&block);
    }
    std::fs::write(share_dir.join("marked.bin"), &marked).unwrap();
    drop_caches();
    let (file, off) = find_marker(&loops.files).expect("marker block found on a device");
    {
        let mut h = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        h.seek(SeekFrom::Start(off)).unwrap();
        h.write_all(&[0xAA; 4096]).unwrap();
        h.sync_all().unwrap();
    }
    drop_caches();
    let (s, job) = api.post("/api/v1/pool/scrub", &json!({})).unwrap();
    assert_eq!(s, 202, "{job}");
    let done = wait_job(&api, &job);
    assert!(
        done["detail"]["corrected_errors"].as_u64().unwrap_or(0) >= 1,
        "scrub repaired the block: {done}"
    );
    assert_eq!(done["detail"]["uncorrectable_errors"], 0, "{done}");
    drop_caches();
    assert_eq!(std::fs::read(share_dir.join("marked.bin")).unwrap(), marked);

    // A device fails (its medium disappears): the appliance notices by itself.
    let victim = 3;
    std::fs::File::options()
        .write(true)
        .open(&loops.files[victim])
        .and_then(|f| f.set_len(0))
        .unwrap();
    sh("losetup", &["-c", &pool_devs[victim]]);
    let p = wait_pool(&q, &api, "degraded", |p| p["state"] == "degraded");
    assert!(
        p["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == pool_devs[victim] && d["state"] == "failed"),
        "{p}"
    );
    wait_events(&q, &api, "an unresolved pool.degraded", |events| {
        events
            .iter()
            .any(|e| e["kind"] == "pool.degraded" && e["resolved_at"].is_null())
    });
    let out = smbclient(&q, "q", "get a.bin a.degraded", local.path());
    assert!(!out.contains("NT_STATUS"), "{out}");
    assert_eq!(sha256_of(&local.path().join("a.degraded")), a_sum);

    // Replace it through the API.
    let (s, job) = api
        .post(
            "/api/v1/pool/replace",
            &json!({"old": pool_devs[victim], "new": spare}),
        )
        .unwrap();
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    let p = wait_pool(&q, &api, "healthy again", |p| p["state"] == "healthy");
    assert!(
        p["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == spare),
        "{p}"
    );
    wait_events(&q, &api, "every pool.degraded resolved", |events| {
        events
            .iter()
            .filter(|e| e["kind"] == "pool.degraded")
            .all(|e| e["resolved_at"].is_string())
    });

    // Restart as after a reboot (pool unmounted): imported without admin action.
    assert_eq!(q.stop().unwrap(), 0);
    sh("umount", &[&data.join("pool").to_string_lossy()]);
    let q = start(&data);
    let api = q.admin().unwrap();
    let p = wait_pool(&q, &api, "imported", |p| {
        p["kind"] == "btrfs" && p["state"] == "healthy"
    });
    assert_eq!(p["devices"].as_array().unwrap().len(), 4, "{p}");
    let out = smbclient(&q, "q", "get a.bin a.restart", local.path());
    assert!(!out.contains("NT_STATUS"), "{out}");
    assert_eq!(sha256_of(&local.path().join("a.restart")), a_sum);
    drop(q);
}

/// SHA-256 of every regular file under `dir`, by relative path.
fn tree_sums(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, sha256_of(&p));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn btrfs_snapshots_restore_and_volume_clone_over_nvme() -> anyhow::Result<()> {
    use quarry_tests::nvme_initiator::{check, pattern, Controller, Options};
    if skipped_without_root() {
        return Ok(());
    }
    let mut loops = Loops::new(2);
    let data = loops.dir.path().join("data");
    loops.mounts.push(data.join("pool"));
    let q = start(&data);
    let api = q.admin()?;

    // Snapshots need the managed pool.
    let (s, b) = api.post("/api/v1/snapshots", &json!({"volume": "none"}))?;
    assert_eq!(s, 409, "{b}");
    let (s, job) = api.post(
        "/api/v1/pool",
        &json!({"devices": loops.devs, "profile": "raid1"}),
    )?;
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);

    // Share: snapshot, change and delete files, restore, compare checksums.
    api.create("/api/v1/shares", &json!({"name": "snap"}))?;
    let root = data.join("pool/shares/snap");
    std::fs::create_dir(root.join("dir"))?;
    pattern_file(&root.join("a.bin"), 3 * MIB, 11);
    pattern_file(&root.join("b.bin"), MIB, 12);
    pattern_file(&root.join("dir/c.bin"), 2 * MIB, 13);
    let before = tree_sums(&root);
    let (s, snap) = api.post(
        "/api/v1/snapshots",
        &json!({"share": "snap", "name": "before"}),
    )?;
    assert_eq!(s, 201, "{snap}");
    let (s, b) = api.post(
        "/api/v1/snapshots",
        &json!({"share": "snap", "name": "before"}),
    )?;
    assert_eq!(s, 409, "duplicate snapshot: {b}");
    pattern_file(&root.join("a.bin"), MIB, 21);
    std::fs::remove_file(root.join("b.bin"))?;
    std::fs::remove_dir_all(root.join("dir"))?;
    pattern_file(&root.join("new.bin"), MIB, 22);
    assert_ne!(tree_sums(&root), before);

    // The snapshot is a previous version over SMB: allinfo lists its @GMT token (from
    // FSCTL_SRV_ENUMERATE_SNAPSHOTS), the old contents, deleted files included, read back
    // through it (smbclient sends the timewarp context), and it cannot be written.
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))?;
    let work = tempfile::tempdir()?;
    let out = smbclient(&q, "snap", "allinfo a.bin", work.path());
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("@GMT-"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no previous version listed: {out}"));
    let out = smbclient(
        &q,
        "snap",
        &format!(
            "get {token}\\a.bin old-a.bin; get {token}\\dir\\c.bin old-c.bin; get a.bin new-a.bin"
        ),
        work.path(),
    );
    assert_eq!(
        sha256_of(&work.path().join("old-a.bin")),
        before["a.bin"],
        "{out}"
    );
    assert_eq!(
        sha256_of(&work.path().join("old-c.bin")),
        before[&format!("dir{}c.bin", std::path::MAIN_SEPARATOR)],
        "{out}"
    );
    assert_eq!(
        sha256_of(&work.path().join("new-a.bin")),
        sha256_of(&root.join("a.bin"))
    );
    let out = smbclient(
        &q,
        "snap",
        &format!("put old-a.bin {token}\\x.bin"),
        work.path(),
    );
    assert!(
        out.contains("NT_STATUS_ACCESS_DENIED") || out.contains("NT_STATUS_MEDIA_WRITE_PROTECTED"),
        "a write into a previous version: {out}"
    );
    let out = smbclient(
        &q,
        "snap",
        "get @GMT-2001.01.01-00.00.00\\a.bin x",
        work.path(),
    );
    assert!(
        out.contains("NT_STATUS_OBJECT_NAME_NOT_FOUND"),
        "no such version: {out}"
    );

    let (s, b) = api.post(
        &format!("/api/v1/snapshots/{}/restore", snap["id"]),
        &json!({}),
    )?;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        tree_sums(&root),
        before,
        "restored contents match the snapshot"
    );

    // Volume: write over NVMe, snapshot, overwrite, clone the snapshot as a second
    // namespace and read the old data from it; restore the original and read it back.
    let nqn = "nqn.2026-11.io.quarry:pool";
    api.create(
        "/api/v1/volumes",
        &json!({"name": "v", "size_bytes": 64 * MIB}),
    )?;
    api.create(
        "/api/v1/nvme/subsystems",
        &json!({"nqn": nqn, "allow_any_host": true}),
    )?;
    let (s, b) = api.post(
        &format!("/api/v1/nvme/subsystems/{nqn}/namespaces"),
        &json!({"volume": "v"}),
    )?;
    assert!(s < 300, "{b}");
    let mut c = Controller::connect(&Options::new(q.nvme, nqn)).await?;
    let (_, bs) = c.namespace_size(1).await?;
    let original = pattern(0, 1, 64 * 1024);
    check(
        &c.write(0, 1, 0, original.clone(), bs, true).await?,
        "write",
    )?;
    let (s, vsnap) = api.post("/api/v1/snapshots", &json!({"volume": "v"}))?;
    assert_eq!(s, 201, "{vsnap}");
    let newer = pattern(0, 2, 64 * 1024);
    check(
        &c.write(0, 1, 0, newer.clone(), bs, true).await?,
        "overwrite",
    )?;
    assert_eq!(c.read(0, 1, 0, 16, bs).await?, newer);
    let b = api.create(
        "/api/v1/volumes",
        &json!({"name": "vclone", "from_snapshot": vsnap["id"]}),
    )?;
    assert_eq!(b["size_bytes"], 64 * MIB, "{b}");
    let (s, b) = api.post(
        &format!("/api/v1/nvme/subsystems/{nqn}/namespaces"),
        &json!({"volume": "vclone", "nsid": 2}),
    )?;
    assert!(s < 300, "{b}");
    let mut c2 = Controller::connect(&Options::new(q.nvme, nqn)).await?;
    assert_eq!(c2.namespaces().await?, vec![1, 2]);
    assert_eq!(
        c2.read(0, 2, 0, 16, bs).await?,
        original,
        "the clone holds the snapshot"
    );
    let (s, b) = api.post(
        &format!("/api/v1/snapshots/{}/restore", vsnap["id"]),
        &json!({}),
    )?;
    assert_eq!(s, 200, "{b}");
    assert_eq!(c2.read(0, 1, 0, 16, bs).await?, original, "volume restored");

    // Listing and deleting.
    let (s, list) = api.get("/api/v1/snapshots?volume=v")?;
    assert_eq!(s, 200, "{list}");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let (s, b) = api.delete(&format!("/api/v1/snapshots/{}", snap["id"]))?;
    assert_eq!(s, 204, "{b}");
    assert!(!data.join("pool/.snapshots/shares/snap/before").exists());
    let (s, _) = api.delete(&format!("/api/v1/snapshots/{}", snap["id"]))?;
    assert_eq!(s, 404);
    drop(c);
    drop(c2);

    // Add a third device (data rebalanced), then remove one (data migrated); a raid1
    // pool of two devices cannot lose one.
    let third = Loops::new(1);
    let (s, job) = api.post("/api/v1/pool/devices", &json!({"path": third.devs[0]}))?;
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    let p = wait_pool(&q, &api, "three devices", |p| {
        p["devices"].as_array().map(Vec::len) == Some(3)
    });
    assert_eq!(p["state"], "healthy", "{p}");
    let escaped = loops.devs[0].replace('/', "%2F");
    let (s, job) = api.delete(&format!("/api/v1/pool/devices/{escaped}"))?;
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    let p = wait_pool(&q, &api, "two devices", |p| {
        p["devices"].as_array().map(Vec::len) == Some(2)
    });
    assert!(
        p["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["path"] != loops.devs[0]),
        "{p}"
    );
    let escaped = loops.devs[1].replace('/', "%2F");
    let (s, b) = api.delete(&format!("/api/v1/pool/devices/{escaped}"))?;
    assert_eq!(s, 409, "raid1 cannot shrink to one device: {b}");

    // Expand: both remaining devices grow to 2 GiB, the pool follows.
    let size_before = api.get("/api/v1/pool")?.1["size_bytes"]
        .as_u64()
        .unwrap_or(0);
    for (file, dev) in [
        (&loops.files[1], &loops.devs[1]),
        (&third.files[0], &third.devs[0]),
    ] {
        std::fs::File::options()
            .write(true)
            .open(file)?
            .set_len(2 * GIB)?;
        sh("losetup", &["-c", dev]);
    }
    let (s, job) = api.post("/api/v1/pool/expand", &json!({}))?;
    assert_eq!(s, 202, "{job}");
    let done = wait_job(&api, &job);
    let raw = |k: &str| done["detail"][k].as_u64().unwrap_or(0);
    assert_eq!(raw("raw_bytes_after"), 4 * GIB, "{done}");
    assert!(raw("raw_bytes_before") < raw("raw_bytes_after"), "{done}");
    // The job's end is recorded after the pool's health is re-checked: the status
    // read right away already shows the grown devices.
    let p = api.get("/api/v1/pool")?.1;
    assert!(
        p["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["size_bytes"] == 2 * GIB),
        "{p}"
    );
    assert!(
        p["size_bytes"].as_u64().unwrap_or(0) > size_before,
        "{p} vs {size_before}"
    );
    assert_eq!(
        tree_sums(&root),
        before,
        "share intact after add and remove"
    );

    // Restart as after a reboot: the pool is imported and the volumes served again.
    assert_eq!(q.stop()?, 0);
    sh("umount", &[&data.join("pool").to_string_lossy()]);
    let q = start(&data);
    let api = q.admin()?;
    wait_pool(&q, &api, "imported", |p| {
        p["kind"] == "btrfs" && p["state"] == "healthy"
    });
    let mut c = Controller::connect(&Options::new(q.nvme, nqn)).await?;
    assert_eq!(
        c.read(0, 2, 0, 16, bs).await?,
        original,
        "clone served after restart"
    );
    assert_eq!(
        c.read(0, 1, 0, 16, bs).await?,
        original,
        "volume served after restart"
    );
    assert_eq!(tree_sums(&root), before);
    drop(c);
    drop(q);
    drop(third);
    Ok(())
}

#[test]
fn btrfs_scheduled_snapshots_keep_their_retention_and_scrubs_run() {
    if skipped_without_root() {
        return;
    }
    let mut loops = Loops::new(1);
    let data = loops.dir.path().join("data");
    loops.mounts.push(data.join("pool"));
    let q = QuarryProcess::start_with(
        &data,
        &[
            ("QUARRY_ALLOW_LOOP_DEVICES", "1"),
            ("QUARRY_POOL_POLL_SECS", "1"),
            ("QUARRY_SCHEDULE_MIN_SECS", "1"),
        ],
    )
    .expect("quarry starts");
    let api = q.admin().unwrap();
    let (s, job) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": loops.devs, "profile": "single"}),
        )
        .unwrap();
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    api.create("/api/v1/shares", &json!({"name": "sched"}))
        .unwrap();
    std::fs::write(data.join("pool/shares/sched/f.txt"), b"scheduled").unwrap();
    api.create(
        "/api/v1/snapshots/schedules",
        &json!({"share": "sched", "interval_s": 1, "keep": 2}),
    )
    .unwrap();
    api.create(
        "/api/v1/snapshots",
        &json!({"share": "sched", "name": "manual"}),
    )
    .unwrap();

    let autos = |api: &Api| -> Vec<i64> {
        let (_, list) = api.get("/api/v1/snapshots?share=sched").unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"].as_str().unwrap_or("").starts_with("auto-"))
            .map(|s| s["id"].as_i64().unwrap())
            .collect()
    };
    // The scheduler takes a new snapshot before it prunes the oldest (so that a failed
    // snapshot never leaves fewer than `keep`): between the two, a third one shows.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let a = autos(&api);
        if a.len() == 2 {
            break a;
        }
        assert!(a.len() <= 3 && Instant::now() < deadline, "{a:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = autos(&api);
        assert!(
            a.len() <= 3,
            "retention keeps 2 (and the one being taken): {a:?}"
        );
        if a.len() == 2 && !a.contains(&first[0]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old scheduled snapshots never pruned: {a:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, list) = api.get("/api/v1/snapshots?share=sched").unwrap();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "manual"),
        "manual snapshots are never pruned: {list}"
    );
    let (s, scheds) = api.get("/api/v1/snapshots/schedules").unwrap();
    assert_eq!(s, 200);
    let id = scheds[0]["id"].as_i64().unwrap();
    let (s, _) = api
        .delete(&format!("/api/v1/snapshots/schedules/{id}"))
        .unwrap();
    assert_eq!(s, 204);

    // Scheduled scrub.
    let (s, b) = api
        .put("/api/v1/pool/scrub/schedule", &json!({"interval_s": 1}))
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, jobs) = api.get("/api/v1/jobs").unwrap();
        if jobs
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["kind"] == "pool.scrub" && j["state"] == "succeeded")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no scheduled scrub ran: {jobs}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let (s, b) = api
        .put("/api/v1/pool/scrub/schedule", &json!({"interval_s": 0}))
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let (_, events) = api.get("/api/v1/events").unwrap();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "pool.scrub"),
        "{events}"
    );
    drop(q);
}

#[test]
fn btrfs_missing_device_at_import_mounts_degraded_and_is_replaced() {
    if skipped_without_root() {
        return;
    }
    let mut loops = Loops::new(3);
    let data = loops.dir.path().join("data");
    loops.mounts.push(data.join("pool"));
    let (a, b, spare) = (
        loops.devs[0].clone(),
        loops.devs[1].clone(),
        loops.devs[2].clone(),
    );
    let q = start(&data);
    let api = q.admin().unwrap();
    let (s, job) = api
        .post(
            "/api/v1/pool",
            &json!({"devices": [a, b], "profile": "raid1"}),
        )
        .unwrap();
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    let (s, body) = api.post("/api/v1/shares", &json!({"name": "m"})).unwrap();
    assert_eq!(s, 201, "{body}");
    let file = data.join("pool/shares/m/x.bin");
    let sum = pattern_file(&file, 8 * MIB, 5);

    // Power off, one drive pulled, power on: the pool comes up degraded by itself.
    assert_eq!(q.stop().unwrap(), 0);
    sh("umount", &[&data.join("pool").to_string_lossy()]);
    sh("losetup", &["-d", &b]);
    loops.devs.retain(|d| *d != b);
    let q = start(&data);
    let api = q.admin().unwrap();
    let p = wait_pool(&q, &api, "degraded", |p| p["state"] == "degraded");
    let missing = p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["state"] == "missing")
        .unwrap_or_else(|| panic!("a missing device: {p}"))["path"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(missing.starts_with("devid:"), "{missing}");
    wait_events(&q, &api, "an unresolved pool.degraded", |events| {
        events
            .iter()
            .any(|e| e["kind"] == "pool.degraded" && e["resolved_at"].is_null())
    });
    assert_eq!(sha256_of(&file), sum, "data readable while degraded");

    let (s, job) = api
        .post(
            "/api/v1/pool/replace",
            &json!({"old": missing, "new": spare}),
        )
        .unwrap();
    assert_eq!(s, 202, "{job}");
    wait_job(&api, &job);
    let p = wait_pool(&q, &api, "healthy", |p| p["state"] == "healthy");
    assert_eq!(p["devices"].as_array().unwrap().len(), 2, "{p}");
    assert_eq!(sha256_of(&file), sum);
    // Chunks written while degraded were converted back: full redundancy again.
    let df = sh(
        "btrfs",
        &["filesystem", "df", &data.join("pool").to_string_lossy()],
    );
    assert!(
        df.lines()
            .filter(|l| !l.starts_with("GlobalReserve"))
            .all(|l| l.contains("RAID1")),
        "{df}"
    );
    drop(q);
}

/// A directory pool (no managed pool) in a folder of a btrfs disk: its volume files are
/// NOCOW like a managed pool's, so NVMe writes go direct and do not fragment the file.
#[test]
fn btrfs_directory_pool_makes_volumes_nocow() {
    if skipped_without_root() {
        return;
    }
    let mut loops = Loops::new(1);
    let mnt = loops.mount_btrfs(0, "disk");
    let data = mnt.join("data");
    let q = QuarryProcess::start_in(&data).expect("quarry starts");
    let api = q.admin().expect("admin");
    api.create(
        "/api/v1/volumes",
        &json!({"name": "dirvol", "size_bytes": 64 * MIB}),
    )
    .expect("volume");
    let vols: Vec<PathBuf> = std::fs::read_dir(data.join("pool/volumes"))
        .expect("volumes directory")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(vols.len(), 1, "{vols:?}");
    let attrs = sh("lsattr", &[&vols[0].to_string_lossy()]);
    let flags = attrs.split_whitespace().next().unwrap_or_default();
    assert!(flags.contains('C'), "volume file not NOCOW: {attrs}");
    drop(q);
}
