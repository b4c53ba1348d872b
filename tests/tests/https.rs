//! HTTPS against the real binary with curl and openssl as the peers: the self-signed
//! certificate made on first start verifies for 127.0.0.1 and is the one the API
//! reports; an admin replaces it with a CA-signed one (openssl-made) that curl then
//! trusts through the CA, without a restart, and it survives a restart; a key that does
//! not match, junk, or a viewer are refused and change nothing.

use std::path::Path;
use std::process::Command;

use quarry_tests::QuarryProcess;
use serde_json::json;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `curl --cacert CA https://…/api/v1/health`: Ok(body) when the chain verifies.
fn curl_health(q: &QuarryProcess, ca: &Path) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg(format!(
            "https://127.0.0.1:{}/api/v1/health",
            q.https.port()
        ))
        .output()
        .expect("curl runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// SHA-256 fingerprint of the certificate the server presents, as lowercase hex.
fn served_fingerprint(q: &QuarryProcess) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{} -servername quarry </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256",
            q.https.port()
        ))
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .trim()
        .rsplit('=')
        .next()
        .unwrap_or("")
        .replace(':', "")
        .to_ascii_lowercase();
    assert_eq!(hex.len(), 64, "no fingerprint from openssl: {text}");
    hex
}

/// A CA and a leaf for 127.0.0.1 signed by it, made with openssl in `dir`.
fn make_ca_signed(dir: &Path) {
    let sh = format!(
        "set -e; cd {d}
         openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj /CN=Test-CA 2>/dev/null
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=storage.example 2>/dev/null
         printf 'subjectAltName=IP:127.0.0.1,DNS:storage.example\\n' > ext.cnf
         openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 10 -extfile ext.cnf 2>/dev/null
         cat leaf.pem ca.pem > chain.pem
         openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other.key -out other.pem -days 10 -subj /CN=other 2>/dev/null",
        d = dir.display()
    );
    run(Command::new("sh").arg("-c").arg(sh));
}

#[test]
fn https_serves_a_self_signed_certificate_that_admins_replace() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let q = QuarryProcess::start_in(&data).expect("quarry starts");
    let api = q.admin().unwrap();

    // First start: a self-signed certificate for 127.0.0.1, the one the API reports.
    // A copy: the file itself is replaced along with the certificate.
    let own = dir.path().join("self-signed.pem");
    std::fs::copy(data.join("tls").join("cert.pem"), &own).unwrap();
    let body = curl_health(&q, &own).expect("the self-signed certificate verifies");
    assert!(body.contains("\"ok\""), "{body}");
    let (s, info) = api.get("/api/v1/system/tls").unwrap();
    assert_eq!(s, 200, "{info}");
    assert_eq!(info["self_signed"], true, "{info}");
    assert_eq!(info["sha256_fingerprint"], served_fingerprint(&q), "{info}");
    assert!(info.get("private_key_pem").is_none());

    // Refusals change nothing.
    make_ca_signed(dir.path());
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let before = served_fingerprint(&q);
    let (s, b) = api
        .put(
            "/api/v1/system/tls",
            &json!({"certificate_pem": read("chain.pem"), "private_key_pem": read("other.key")}),
        )
        .unwrap();
    assert_eq!(s, 422, "mismatched key: {b}");
    let (s, b) = api
        .put(
            "/api/v1/system/tls",
            &json!({"certificate_pem": "junk", "private_key_pem": read("leaf.key")}),
        )
        .unwrap();
    assert_eq!(s, 422, "junk: {b}");
    api.create(
        "/api/v1/users",
        &json!({"name": "watcher", "password": "watcher-pass-1", "role": "viewer"}),
    )
    .unwrap();
    let viewer = q.login("watcher", "watcher-pass-1").unwrap();
    let (s, _) = viewer
        .put(
            "/api/v1/system/tls",
            &json!({"certificate_pem": read("chain.pem"), "private_key_pem": read("leaf.key")}),
        )
        .unwrap();
    assert_eq!(s, 403);
    assert_eq!(served_fingerprint(&q), before);

    // The admin's CA-signed certificate is served to the next connection.
    let (s, info) = api
        .put(
            "/api/v1/system/tls",
            &json!({"certificate_pem": read("chain.pem"), "private_key_pem": read("leaf.key")}),
        )
        .unwrap();
    assert_eq!(s, 200, "{info}");
    assert_eq!(info["self_signed"], false, "{info}");
    let fingerprint = served_fingerprint(&q);
    assert_ne!(fingerprint, before);
    assert_eq!(info["sha256_fingerprint"], fingerprint);
    curl_health(&q, &dir.path().join("ca.pem")).expect("trusted through the CA");
    assert!(
        curl_health(&q, &own).is_err(),
        "the old self-signed certificate must no longer verify"
    );
    let (_, audit) = api.get("/api/v1/audit").unwrap();
    assert!(audit.to_string().contains("tls.replace"), "{audit}");

    // And after a restart.
    q.stop().unwrap();
    let q = QuarryProcess::start_in(&data).expect("quarry restarts");
    assert_eq!(served_fingerprint(&q), fingerprint);
    curl_health(&q, &dir.path().join("ca.pem")).expect("still trusted after restart");
}
