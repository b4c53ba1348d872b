//! SMB interop with Samba's `smbclient` against the real `quarry` binary: file operations over
//! SMB 3.1.1 with signing and with encryption (proven from smbclient's own debug output), the
//! older dialects, and the refusals (wrong password, access list, read-only and encrypted
//! shares), each followed by a check that the server still serves.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use quarry_tests::QuarryProcess;
use serde_json::json;
use sha2::{Digest, Sha256};

const USER: &str = "alice";
const PASS: &str = "alice-secret-1";
/// Size of the file put and got in the big-transfer tests (the acceptance asks for 100 MiB).
const BIG_FILE_BYTES: usize = 100 * 1024 * 1024;

struct Out {
    ok: bool,
    text: String,
}

/// Runs smbclient against `share` with `-c cmds`; `cwd` is where local files live.
fn smbclient(
    q: &QuarryProcess,
    share: &str,
    user_pass: &str,
    extra: &[&str],
    cmds: &str,
    cwd: &Path,
) -> Out {
    let out = Command::new("smbclient")
        .arg(format!("//127.0.0.1/{share}"))
        .args(["-p", &q.smb.port().to_string(), "-U", user_pass])
        .args(extra)
        .args(["-c", cmds])
        .current_dir(cwd)
        .output()
        .expect("smbclient runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Out {
        ok: out.status.success(),
        text,
    }
}

fn setup() -> QuarryProcess {
    let q = QuarryProcess::start().expect("quarry starts");
    let api = q.admin().expect("admin login");
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    api.create(
        "/api/v1/users",
        &json!({"name": "bob", "password": "bob-secret-12"}),
    )
    .unwrap();
    for share in [
        json!({"name": "data"}),
        json!({"name": "secure", "encrypt": true}),
        json!({"name": "ro", "read_only": true}),
        json!({"name": "alicesonly", "users": [USER]}),
    ] {
        api.create("/api/v1/shares", &share).unwrap();
    }
    q
}

fn random_file(path: &Path, len: usize) -> String {
    let mut f = std::fs::File::create(path).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ len as u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    let mut h = Sha256::new();
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

/// put / mkdir / rename / ls / get / rm / rmdir of a big file, SHA-256 compared.
fn file_ops(q: &QuarryProcess, share: &str, mode: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let want = random_file(&dir.path().join("big.bin"), BIG_FILE_BYTES);
    let up = format!("{USER}%{PASS}");
    let r = smbclient(
        q,
        share,
        &up,
        mode,
        "put big.bin big.bin; mkdir sub; rename big.bin sub\\moved.bin; ls sub\\*; get sub\\moved.bin back.bin",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert!(
        r.text.contains("moved.bin") && r.text.contains(&BIG_FILE_BYTES.to_string()),
        "{}",
        r.text
    );
    assert_eq!(sha256_of(&dir.path().join("back.bin")), want);
    let r = smbclient(
        q,
        share,
        &up,
        mode,
        "rm sub\\moved.bin; rmdir sub; ls",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert!(
        !r.text.contains("sub ") && !r.text.contains("moved"),
        "{}",
        r.text
    );
    // Gone for real: a get fails with the NT status for a missing name.
    let r = smbclient(q, share, &up, mode, "get sub\\moved.bin x", dir.path());
    assert!(
        r.text.contains("NT_STATUS_OBJECT_PATH_NOT_FOUND")
            || r.text.contains("NT_STATUS_OBJECT_NAME_NOT_FOUND"),
        "{}",
        r.text
    );
}

#[test]
fn smb311_signed_file_operations() {
    let q = setup();
    let args = ["-m", "SMB3_11", "--client-protection=sign"];
    file_ops(&q, "data", &args);
    // Prove the mode: smbclient itself reports 3.1.1 and AES-GMAC signatures (algorithm 2).
    let dir = tempfile::tempdir().unwrap();
    let r = smbclient(
        &q,
        "data",
        &format!("{USER}%{PASS}"),
        &[&args[..], &["-d", "10"]].concat(),
        "ls",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert!(
        r.text.contains("negotiated dialect[SMB3_11]"),
        "dialect not 3.1.1"
    );
    assert!(
        r.text.contains("signed SMB2 message (sign_algo_id=2)"),
        "not GMAC-signed"
    );
    assert!(!r.text.contains("Encrypted SMB2 message"));
}

#[test]
fn smb311_encrypted_file_operations() {
    let q = setup();
    let args = ["-m", "SMB3_11", "--client-protection=encrypt"];
    file_ops(&q, "data", &args);
    let dir = tempfile::tempdir().unwrap();
    let r = smbclient(
        &q,
        "data",
        &format!("{USER}%{PASS}"),
        &[&args[..], &["-d", "10"]].concat(),
        "ls",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert!(r.text.contains("negotiated dialect[SMB3_11]"));
    assert!(r.text.contains("Encrypted SMB2 message"), "not encrypted");
}

#[test]
fn encrypted_share_requires_encryption() {
    let q = setup();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.txt"), b"secret data").unwrap();
    let up = format!("{USER}%{PASS}");
    // 3.1.1 without asking for encryption: the share's flag makes smbclient encrypt.
    let r = smbclient(
        &q,
        "secure",
        &up,
        &["-m", "SMB3_11", "-d", "10"],
        "put s.txt s.txt; get s.txt t.txt",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert!(r.text.contains("Encrypted SMB2 message"));
    assert_eq!(
        std::fs::read(dir.path().join("t.txt")).unwrap(),
        b"secret data"
    );
    // 2.1 cannot encrypt: refused at tree connect.
    let r = smbclient(&q, "secure", &up, &["-m", "SMB2_10"], "ls", dir.path());
    assert!(!r.ok);
    assert!(r.text.contains("NT_STATUS_ACCESS_DENIED"), "{}", r.text);
}

#[test]
fn older_dialects_round_trip() {
    let q = setup();
    let dir = tempfile::tempdir().unwrap();
    let want = random_file(&dir.path().join("f.bin"), 3 * 1024 * 1024 + 17);
    let up = format!("{USER}%{PASS}");
    for (m, label) in [
        ("SMB2_02", "SMB2_02"),
        ("SMB2_10", "SMB2_10"),
        ("SMB3_00", "SMB3_00"),
        ("SMB3_02", "SMB3_02"),
    ] {
        let _ = std::fs::remove_file(dir.path().join("g.bin"));
        let r = smbclient(
            &q,
            "data",
            &up,
            &["-m", m, "--client-protection=sign"],
            &format!("put f.bin {m}.bin; get {m}.bin g.bin; rm {m}.bin"),
            dir.path(),
        );
        assert!(r.ok, "{m}: {}", r.text);
        let r = smbclient(
            &q,
            "data",
            &up,
            &["-m", m, "--client-protection=sign", "-d", "10"],
            "ls",
            dir.path(),
        );
        assert!(r.ok, "{m}: {}", r.text);
        assert!(
            r.text.contains(&format!("negotiated dialect[{label}]")),
            "{m}: dialect not negotiated"
        );
        assert!(r.text.contains("signed SMB2 message"), "{m}: not signed");
        assert_eq!(sha256_of(&dir.path().join("g.bin")), want, "{m}");
    }
}

#[test]
fn refusals_leave_the_server_serving() {
    let q = setup();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), b"hello").unwrap();
    let m = ["-m", "SMB3_11"];
    let r = smbclient(
        &q,
        "data",
        &format!("{USER}%wrong-password"),
        &m,
        "ls",
        dir.path(),
    );
    assert!(
        !r.ok && r.text.contains("NT_STATUS_LOGON_FAILURE"),
        "{}",
        r.text
    );
    let r = smbclient(&q, "data", "nobody%whatever-1", &m, "ls", dir.path());
    assert!(
        !r.ok && r.text.contains("NT_STATUS_LOGON_FAILURE"),
        "{}",
        r.text
    );
    let r = smbclient(&q, "alicesonly", "bob%bob-secret-12", &m, "ls", dir.path());
    assert!(
        !r.ok && r.text.contains("NT_STATUS_ACCESS_DENIED"),
        "{}",
        r.text
    );
    let r = smbclient(
        &q,
        "nosuchshare",
        &format!("{USER}%{PASS}"),
        &m,
        "ls",
        dir.path(),
    );
    assert!(
        !r.ok && r.text.contains("NT_STATUS_BAD_NETWORK_NAME"),
        "{}",
        r.text
    );
    let r = smbclient(
        &q,
        "ro",
        &format!("{USER}%{PASS}"),
        &m,
        "put a.txt a.txt",
        dir.path(),
    );
    assert!(r.text.contains("NT_STATUS_ACCESS_DENIED"), "{}", r.text);
    // (smbclient folds `..` away before sending, so escapes are tested with a raw client.)
    // `a:b.txt` names the stream `b.txt` of `a` (named streams are served), so the `:`
    // refusals use names where a colon is illegal even with streams: a colon inside a
    // directory component and a stream with a type other than `$DATA`.
    for bad in ["d:x\\f.txt", "a:b:c", "CON", "lpt1.txt", "bad|name"] {
        let r = smbclient(
            &q,
            "data",
            &format!("{USER}%{PASS}"),
            &m,
            &format!("put a.txt \"{bad}\""),
            dir.path(),
        );
        assert!(r.text.contains("NT_STATUS_"), "{bad}: {}", r.text);
        assert!(
            !r.text.contains("putting file"),
            "{bad} was accepted: {}",
            r.text
        );
    }
    // The colon that names a stream is served as one: the data lands in stream `b.txt` of
    // a new, empty `s`, never in a file literally called `s:b.txt`.
    let r = smbclient(
        &q,
        "data",
        &format!("{USER}%{PASS}"),
        &m,
        "put a.txt s:b.txt; allinfo s; ls",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert!(
        r.text.contains("stream: [:b.txt:$DATA], 5 bytes"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("s:b.txt  "), "{}", r.text);
    // Still serving: alice on her share, bob on the open share.
    let r = smbclient(
        &q,
        "alicesonly",
        &format!("{USER}%{PASS}"),
        &m,
        "put a.txt a.txt; ls",
        dir.path(),
    );
    assert!(r.ok && r.text.contains("a.txt"), "{}", r.text);
    let r = smbclient(&q, "data", "bob%bob-secret-12", &m, "ls", dir.path());
    assert!(r.ok, "{}", r.text);
}

#[test]
fn smbclient_lists_shares() {
    let q = setup();
    for extra in [
        &["-m", "SMB3_11"][..],
        &["-m", "SMB3_11", "--client-protection=encrypt"][..],
        &["-m", "SMB2_10"][..],
    ] {
        let out = Command::new("smbclient")
            .args([
                "-L",
                "127.0.0.1",
                "-p",
                &q.smb.port().to_string(),
                "-U",
                &format!("{USER}%{PASS}"),
            ])
            .args(extra)
            .output()
            .expect("smbclient runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        for share in ["data", "secure", "ro", "alicesonly", "IPC$"] {
            assert!(
                text.lines()
                    .any(|l| l.split_whitespace().next() == Some(share)),
                "{extra:?}: {share} missing from:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(text.contains("Disk") && text.contains("IPC"), "{text}");
    }
}

#[test]
fn quota_is_the_disk_and_disk_full_is_reported() {
    let q = setup();
    let api = q.admin().expect("admin login");
    api.create(
        "/api/v1/shares",
        &json!({"name": "tiny", "quota_bytes": 1024 * 1024}),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    random_file(&dir.path().join("big.bin"), 3 * 1024 * 1024);
    let want = random_file(&dir.path().join("small.bin"), 500_000);
    let up = format!("{USER}%{PASS}");
    let m = ["-m", "SMB3_11"];
    // The share's size is its quota: 1 MiB = 256 blocks of 4 KiB.
    let r = smbclient(&q, "tiny", &up, &m, "du", dir.path());
    assert!(
        r.ok && r
            .text
            .contains("256 blocks of size 4096. 256 blocks available"),
        "{}",
        r.text
    );
    let r = smbclient(&q, "tiny", &up, &m, "put big.bin big.bin", dir.path());
    assert!(r.text.contains("NT_STATUS_DISK_FULL"), "{}", r.text);
    // Nothing past the quota landed, and the share keeps serving within it.
    let r = smbclient(
        &q,
        "tiny",
        &up,
        &m,
        "rm big.bin; put small.bin small.bin; get small.bin back.bin; du",
        dir.path(),
    );
    assert!(r.ok, "{}", r.text);
    assert_eq!(sha256_of(&dir.path().join("back.bin")), want);
    assert!(r.text.contains("256 blocks of size 4096"), "{}", r.text);
}
