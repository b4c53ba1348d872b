//! The foundation's acceptance flows against the real `quarry` binary: CRUD of users,
//! tokens and shares with audit rows, persistence across a restart, the 4xx contract,
//! first-start credentials, bind failures (and the harness's retry when a chosen port is
//! taken before quarry binds it), and crash safety of the config database.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, Mutex};

use quarry_tests::{quarry_bin, Api, QuarryProcess, ADMIN_PASSWORD};
use serde_json::{json, Value};

fn audit_actions(api: &Api) -> Vec<(String, String)> {
    let (status, rows) = api.get("/api/v1/audit?limit=1000").unwrap();
    assert_eq!(status, 200, "{rows}");
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_string(),
                r["target"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn admin_flow_is_complete_audited_and_persistent() {
    let dir = tempfile::tempdir().unwrap();
    let q = QuarryProcess::start_in(&dir.path().join("data")).unwrap();
    let admin = q.admin().unwrap();

    // A long-lived token works like the login token.
    let (s, tok) = admin
        .post("/api/v1/tokens", &json!({"name": "automation"}))
        .unwrap();
    assert_eq!(s, 201, "{tok}");
    let api = Api::with_token(&q, tok["token"].as_str().unwrap());
    assert_eq!(api.get("/api/v1/auth/me").unwrap().1["user"], "admin");

    let (s, u) = api
        .post(
            "/api/v1/users",
            &json!({"name": "trainer", "password": "trainer-pass-1"}),
        )
        .unwrap();
    assert_eq!(s, 201, "{u}");
    assert_eq!(u["role"], Value::Null);
    let (s, sh) = api
        .post(
            "/api/v1/shares",
            &json!({"name": "datasets", "quota_bytes": 256u64 << 20, "users": ["trainer"]}),
        )
        .unwrap();
    assert_eq!(s, 201, "{sh}");
    assert_eq!(sh["quota_bytes"], 256u64 << 20);
    assert!(q.data.join("pool/shares/datasets").is_dir());

    let (s, list) = api.get("/api/v1/shares").unwrap();
    assert_eq!(s, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["users"], json!(["trainer"]));
    assert_eq!(list[0]["used_bytes"], 0);
    let (s, users) = api.get("/api/v1/users").unwrap();
    assert_eq!(s, 200);
    assert_eq!(users.as_array().unwrap().len(), 2);

    let (s, patched) = api
        .patch(
            "/api/v1/shares/DATASETS",
            &json!({"quota_bytes": 512u64 << 20}),
        )
        .unwrap();
    assert_eq!(s, 200, "{patched}");
    assert_eq!(patched["quota_bytes"], 512u64 << 20);
    let (s, patched) = api
        .patch("/api/v1/shares/datasets", &json!({"quota_bytes": null}))
        .unwrap();
    assert_eq!(s, 200, "{patched}");
    assert_eq!(patched["quota_bytes"], Value::Null);

    // Restart: users, shares and tokens persist.
    let data = q.data.clone();
    let token = api.token().unwrap().to_string();
    assert_eq!(q_stop(q), 0);
    let q2 = QuarryProcess::start_in(&data).unwrap();
    let api = Api::with_token(&q2, &token);
    let (s, list) = api.get("/api/v1/shares").unwrap();
    assert_eq!(s, 200, "token did not survive the restart: {list}");
    assert_eq!(list[0]["name"], "datasets");
    assert_eq!(api.get("/api/v1/users/trainer").unwrap().0, 200);

    assert_eq!(api.delete("/api/v1/shares/datasets").unwrap().0, 204);
    assert!(!data.join("pool/shares/datasets").exists());
    assert_eq!(api.delete("/api/v1/users/trainer").unwrap().0, 204);
    assert_eq!(api.get("/api/v1/shares/datasets").unwrap().0, 404);

    let actions = audit_actions(&api);
    for expected in [
        ("auth.login", "admin"),
        ("token.create", "admin"),
        ("user.create", "trainer"),
        ("share.create", "datasets"),
        ("share.update", "DATASETS"),
        ("share.update", "datasets"),
        ("share.delete", "datasets"),
        ("user.delete", "trainer"),
    ] {
        assert!(
            actions
                .iter()
                .any(|(a, t)| a == expected.0 && t == expected.1),
            "audit lacks {expected:?}: {actions:?}"
        );
    }
    // Audit rows say who and from where.
    let (_, rows) = api.get("/api/v1/audit?limit=1").unwrap();
    assert_eq!(rows[0]["actor"], "admin");
    assert_eq!(rows[0]["remote"], "127.0.0.1");
}

fn q_stop(q: QuarryProcess) -> i32 {
    q.stop().unwrap()
}

#[test]
fn errors_are_4xx_problem_json() {
    let q = QuarryProcess::start().unwrap();
    let admin = q.admin().unwrap();
    let anon = Api::anonymous(&q);

    // Wrong password and wrong token: 401.
    let (s, body) = anon
        .post(
            "/api/v1/auth/login",
            &json!({"username": "admin", "password": "wrong-password"}),
        )
        .unwrap();
    assert_eq!(s, 401);
    assert_eq!(body["status"], 401);
    assert_eq!(
        Api::at(&q.url(), Some("qry_forged".into()))
            .get("/api/v1/shares")
            .unwrap()
            .0,
        401
    );
    assert_eq!(anon.get("/api/v1/shares").unwrap().0, 401);

    // A viewer may read but not create: 403.
    let (s, _) = admin
        .post(
            "/api/v1/users",
            &json!({"name": "watcher", "password": "watcher-pass", "role": "viewer"}),
        )
        .unwrap();
    assert_eq!(s, 201);
    let viewer = q.login("watcher", "watcher-pass").unwrap();
    assert_eq!(viewer.get("/api/v1/shares").unwrap().0, 200);
    let (s, body) = viewer
        .post("/api/v1/shares", &json!({"name": "nope"}))
        .unwrap();
    assert_eq!(s, 403, "{body}");
    assert_eq!(viewer.get("/api/v1/audit").unwrap().0, 403);
    let (s, users) = viewer.get("/api/v1/users").unwrap();
    assert_eq!(s, 200);
    assert_eq!(
        users.as_array().unwrap().len(),
        1,
        "a viewer sees only itself: {users}"
    );

    // Malformed bodies, unknown fields, bad names: 4xx problem+json, never 5xx.
    let cases: Vec<(&str, &[u8], u16)> = vec![
        ("application/json", b"{not json", 400),
        ("application/json", br#"{"name":"x","unknown":1}"#, 422),
        ("application/json", br#"{"name":5}"#, 422),
        ("application/json", br#"["x", null]"#, 422),
        ("application/json", br#"null"#, 422),
        ("text/plain", br#"{"name":"x"}"#, 415),
        ("application/json", br#"{"name":"IPC$"}"#, 422),
        ("application/json", br#"{"name":"a/b"}"#, 422),
        ("application/json", br#"{"name":"..\\x"}"#, 422),
        ("application/json", br#"{"name":"CON"}"#, 422),
        ("application/json", br#"{"name":"ok","quota_bytes":0}"#, 422),
        (
            "application/json",
            br#"{"name":"ok","quota_bytes":-5}"#,
            422,
        ),
        (
            "application/json",
            br#"{"name":"ok","users":["ghost"]}"#,
            422,
        ),
    ];
    let long = format!(r#"{{"name":"{}"}}"#, "x".repeat(81));
    for (ctype, body, want) in cases.iter().map(|(c, b, w)| (*c, b.to_vec(), *w)).chain([(
        "application/json",
        long.into_bytes(),
        422,
    )]) {
        let (s, problem, got_ctype) = admin.post_raw("/api/v1/shares", ctype, &body).unwrap();
        assert_eq!(s, want, "{} -> {problem}", String::from_utf8_lossy(&body));
        assert_eq!(got_ctype, "application/problem+json");
        assert_eq!(problem["status"], want);
    }
    // Oversized body: 413, answered from the declared length before any body is read.
    let mut sock = std::net::TcpStream::connect(q.http).unwrap();
    let req = format!(
        "POST /api/v1/shares HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        admin.token().unwrap(),
        2 * 1024 * 1024
    );
    std::io::Write::write_all(&mut sock, req.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    std::io::Read::read_exact(&mut sock, &mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413");
    // Duplicate: 409. Unknown route: 404 problem.
    assert_eq!(
        admin
            .post("/api/v1/shares", &json!({"name": "dup"}))
            .unwrap()
            .0,
        201
    );
    assert_eq!(
        admin
            .post("/api/v1/shares", &json!({"name": "DUP"}))
            .unwrap()
            .0,
        409
    );
    let (s, body) = admin.get("/api/v1/nope").unwrap();
    assert_eq!((s, body["status"].as_u64()), (404, Some(404)));
    // The last admin cannot be deleted.
    assert_eq!(admin.delete("/api/v1/users/admin").unwrap().0, 409);
}

#[test]
fn login_is_rate_limited() {
    let q = QuarryProcess::start().unwrap();
    let anon = Api::anonymous(&q);
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(
            anon.post(
                "/api/v1/auth/login",
                &json!({"username": "admin", "password": "guess-guess"}),
            )
            .unwrap()
            .0,
        );
    }
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(statuses[11], 429, "{statuses:?}");
    // Even the right password is refused while throttled.
    let (s, _) = anon
        .post(
            "/api/v1/auth/login",
            &json!({"username": "admin", "password": ADMIN_PASSWORD}),
        )
        .unwrap();
    assert_eq!(s, 429);
}

#[test]
fn first_start_generates_admin_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let q = QuarryProcess::start_with(&data, &[("QUARRY_ADMIN_PASSWORD", "")]).unwrap();
    let file = data.join("initial-admin-password");
    let password = std::fs::read_to_string(&file).unwrap().trim().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(password.len() >= 16);
    assert!(
        q.log_text().contains(&password),
        "the generated password is printed once in the log"
    );
    let admin = q.login("admin", &password).unwrap();
    assert!(q.login("admin", ADMIN_PASSWORD).is_err());
    // Another user's password change leaves it; the admin's own change removes it.
    let (s, b) = admin
        .post(
            "/api/v1/users",
            &json!({"name": "ops", "password": "ops-password-1"}),
        )
        .unwrap();
    assert_eq!(s, 201, "{b}");
    let (s, b) = admin
        .patch("/api/v1/users/ops", &json!({"password": "ops-password-2"}))
        .unwrap();
    assert_eq!(s, 200, "{b}");
    assert!(file.exists());
    let (s, b) = admin
        .patch(
            "/api/v1/users/admin",
            &json!({"password": "my-own-admin-pw"}),
        )
        .unwrap();
    assert_eq!(s, 200, "{b}");
    assert!(
        !file.exists(),
        "the generated password file goes once the admin sets a password"
    );
    q.login("admin", "my-own-admin-pw").unwrap();
}

#[test]
fn bind_failure_is_one_line_naming_the_flag() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(quarry_bin().unwrap())
        .args(["serve", "--data"])
        .arg(dir.path())
        .args([
            "--http-listen",
            "127.0.0.1:0",
            "--nvme-listen",
            "127.0.0.1:0",
            "--https-listen",
            "127.0.0.1:0",
        ])
        .args(["--smb-listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.trim().lines().last().unwrap_or("");
    assert!(
        last.contains("--smb-listen") && last.contains(&port.to_string()),
        "{stderr}"
    );
}

/// The test harness's start survives losing a port between choosing it and quarry binding
/// it (a parallel test can take it): the first start finds its HTTP port held by another
/// process, quarry exits with its bind error, and the harness starts it again on other
/// ports.
#[test]
fn harness_start_retries_a_port_taken_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first-start-done");
    // Holds the HTTP port it is given for 10 s, then exits.
    let holder = dir.path().join("hold.py");
    std::fs::write(
        &holder,
        "import socket, sys, time\n\
         host, port = sys.argv[1].rsplit(':', 1)\n\
         s = socket.socket(); s.bind((host, int(port))); s.listen(1)\n\
         open(sys.argv[2], 'w').close()\n\
         time.sleep(10)\n",
    )
    .unwrap();
    // On its first run the wrapper has the port taken before quarry starts.
    let wrapper = dir.path().join("quarry-once-busy");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n\
             prev=\n\
             for a in \"$@\"; do [ \"$prev\" = --http-listen ] && http=$a; prev=$a; done\n\
             if [ ! -e {first:?} ]; then\n\
               python3 {holder:?} \"$http\" {first:?} &\n\
               while [ ! -e {first:?} ]; do sleep 0.05; done\n\
             fi\n\
             exec {bin:?} \"$@\"\n",
            bin = quarry_bin().unwrap(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let q = QuarryProcess::start_binary(&wrapper).unwrap();
    assert!(first.exists(), "the first start did not meet a busy port");
    assert!(
        std::fs::read_dir(q.data.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("data.log.")
                    && std::fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .contains("cannot bind the HTTP")
            }),
        "no start failed on its busy port"
    );
    assert_eq!(q.admin().unwrap().get("/api/v1/health").unwrap().0, 200);
    assert_eq!(q_stop(q), 0);
}

/// `kill -9` during 200 concurrent writes: the database opens, passes the integrity
/// check, and holds every change that was acknowledged with a 2xx.
#[test]
fn crash_during_write_burst_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let q = QuarryProcess::start_in(&dir.path().join("data")).unwrap();
    let admin = q.admin().unwrap();
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let threads: Vec<_> = (0..20)
        .map(|t| {
            let (api, acked) = (admin.clone(), acked.clone());
            std::thread::spawn(move || {
                for i in 0..10 {
                    let name = format!("burst-{t}-{i}");
                    let body = if i % 2 == 0 {
                        json!({"name": name, "quota_bytes": 1 << 30})
                    } else {
                        json!({"name": name})
                    };
                    let path = if t % 2 == 0 {
                        "/api/v1/shares"
                    } else {
                        "/api/v1/volumes"
                    };
                    let body = if t % 2 == 0 {
                        body
                    } else {
                        json!({"name": name, "size_bytes": 1 << 20})
                    };
                    match api.post(path, &body) {
                        Ok((s, _)) if (200..300).contains(&s) => {
                            acked.lock().unwrap().insert(name);
                        }
                        _ => {}
                    }
                }
            })
        })
        .collect();
    // Let part of the burst land, then crash the appliance mid-flight.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while acked.lock().unwrap().len() < 60 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let data = q.data.clone();
    q.kill9().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 60 && acked.len() < 200,
        "the crash should land mid-burst: {} acked",
        acked.len()
    );

    let conn = rusqlite::Connection::open(data.join("quarry.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);

    let q = QuarryProcess::start_in(&data).unwrap();
    let admin = q.admin().unwrap();
    let mut present = BTreeSet::new();
    for path in ["/api/v1/shares", "/api/v1/volumes"] {
        let (s, list) = admin.get(path).unwrap();
        assert_eq!(s, 200);
        for item in list.as_array().unwrap() {
            present.insert(item["name"].as_str().unwrap().to_string());
        }
    }
    let lost: Vec<_> = acked.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "acknowledged but lost after kill -9: {lost:?}"
    );
}

/// The UI's session cookie authenticates reads; writes also need the CSRF header.
#[test]
fn cookie_sessions_require_csrf_for_writes() {
    let q = QuarryProcess::start().unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .post(format!("{}/api/v1/auth/login", q.url()))
        .send_json(json!({"username": "admin", "password": ADMIN_PASSWORD}))
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cookie = resp
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_string();
    let body: Value = resp.body_mut().read_json().unwrap();
    let csrf = body["csrf_token"].as_str().unwrap().to_string();

    let get = agent
        .get(format!("{}/api/v1/shares", q.url()))
        .header("Cookie", &session)
        .call()
        .unwrap();
    assert_eq!(get.status(), 200);
    let url = format!("{}/api/v1/shares", q.url());
    let no_csrf = agent
        .post(&url)
        .header("Cookie", &session)
        .send_json(json!({"name": "c1"}))
        .unwrap();
    assert_eq!(no_csrf.status(), 403);
    let wrong = agent
        .post(&url)
        .header("Cookie", &session)
        .header("X-CSRF-Token", "forged")
        .send_json(json!({"name": "c1"}))
        .unwrap();
    assert_eq!(wrong.status(), 403);
    let ok = agent
        .post(&url)
        .header("Cookie", &session)
        .header("X-CSRF-Token", &csrf)
        .send_json(json!({"name": "c1"}))
        .unwrap();
    assert_eq!(ok.status(), 201);
    // Logout ends the session.
    let out = agent
        .post(format!("{}/api/v1/auth/logout", q.url()))
        .header("Cookie", &session)
        .header("X-CSRF-Token", &csrf)
        .send_empty()
        .unwrap();
    assert_eq!(out.status(), 204);
    let after = agent
        .get(format!("{}/api/v1/shares", q.url()))
        .header("Cookie", &session)
        .call()
        .unwrap();
    assert_eq!(after.status(), 401);
}

/// Under systemd (`NOTIFY_SOCKET`, `WATCHDOG_USEC`) the appliance reports READY=1 once
/// it serves and pets the watchdog; SIGTERM exits 0.
#[test]
fn reports_ready_and_watchdog_to_systemd() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let q = QuarryProcess::start_with(
        &dir.path().join("data"),
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
    )
    .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 512];
    while !(seen.contains("READY=1") && seen.contains("WATCHDOG=1")) {
        let n = sock
            .recv(&mut buf)
            .expect("no sd_notify message within 20 s");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        seen.push('\n');
    }
    assert_eq!(q.stop().unwrap(), 0);
}

#[test]
fn failed_logins_raise_events_that_operators_acknowledge() {
    let q = QuarryProcess::start().unwrap();
    let admin = q.admin().unwrap();
    for (name, role) in [("vera", "viewer"), ("otto", "operator")] {
        let (s, _) = admin
            .post(
                "/api/v1/users",
                &json!({"name": name, "password": "long-enough-pass", "role": role}),
            )
            .unwrap();
        assert_eq!(s, 201);
    }
    let anon = Api::anonymous(&q);
    let (s, _) = anon
        .post(
            "/api/v1/auth/login",
            &json!({"username": "mallory", "password": "guess-guess"}),
        )
        .unwrap();
    assert_eq!(s, 401);

    let viewer = q.login("vera", "long-enough-pass").unwrap();
    let (s, events) = viewer.get("/api/v1/events?unacked=true").unwrap();
    assert_eq!(s, 200, "{events}");
    let failed: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "auth.failed" && e["subject"] == "mallory")
        .collect();
    assert_eq!(failed.len(), 1, "{events}");
    assert_eq!(failed[0]["severity"], "warning");
    assert_eq!(failed[0]["acked"], false);
    let id = failed[0]["id"].as_i64().unwrap();

    // A viewer may look but not acknowledge.
    let (s, body) = viewer
        .post(&format!("/api/v1/events/{id}/ack"), &json!({}))
        .unwrap();
    assert_eq!(s, 403, "{body}");
    let operator = q.login("otto", "long-enough-pass").unwrap();
    let (s, body) = operator
        .post(&format!("/api/v1/events/{id}/ack"), &json!({}))
        .unwrap();
    assert_eq!(s, 204, "{body}");
    let (s, body) = operator
        .post("/api/v1/events/999999/ack", &json!({}))
        .unwrap();
    assert_eq!(s, 404, "{body}");

    let (_, events) = viewer.get("/api/v1/events?unacked=true").unwrap();
    assert!(
        !events.as_array().unwrap().iter().any(|e| e["id"] == id),
        "{events}"
    );
    let (_, events) = viewer.get("/api/v1/events?severity=warning").unwrap();
    let acked = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap();
    assert_eq!(acked["acked_by"], "otto");
    let (s, _) = viewer.get("/api/v1/events?severity=loud").unwrap();
    assert_eq!(s, 400);
}
