//! The events webhook against the real binary: an admin points it at a tiny HTTP
//! receiver on 127.0.0.1 with a secret; a failed login raises `auth.failed`, which the
//! receiver gets as a signed JSON POST. The secret is never shown back, a viewer may not
//! change the webhook, and a bad URL is a 422 problem.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use hmac::{Hmac, Mac};
use quarry_tests::{Api, QuarryProcess};
use serde_json::{json, Value};

const SECRET: &str = "webhook-shared-secret-42";

/// One request the receiver got.
struct Received {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> anyhow::Result<Received> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (n, v) = line.split_once(':').context("malformed header")?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse())
        .transpose()?
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    Ok(Received {
        request_line: request_line.trim_end().to_string(),
        headers,
        body,
    })
}

/// A receiver on 127.0.0.1 answering every request 200; returns its port and what it got.
fn receiver() -> anyhow::Result<(u16, mpsc::Receiver<Received>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Ok(req) = read_request(&mut stream) {
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
                if tx.send(req).is_err() {
                    return;
                }
            }
        }
    });
    Ok((port, rx))
}

fn expected_signature(body: &[u8]) -> String {
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length works");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[test]
fn failed_login_is_posted_signed_to_the_webhook() -> anyhow::Result<()> {
    let q = QuarryProcess::start()?;
    let admin = q.admin()?;
    let (s, b) = admin.post(
        "/api/v1/users",
        &json!({"name": "vera", "password": "long-enough-pass", "role": "viewer"}),
    )?;
    ensure!(s == 201, "{b}");
    let (port, received) = receiver()?;
    let url = format!("http://127.0.0.1:{port}/hooks/quarry?src=test");

    // Nothing configured yet.
    let (s, b) = admin.get("/api/v1/events/webhook")?;
    ensure!(s == 200, "{b}");
    ensure!(
        b["url"].is_null() && b["enabled"] == false && b["secret_set"] == false,
        "{b}"
    );
    ensure!(b["last_delivery"].is_null(), "{b}");

    // Bad URLs are 422 problems.
    for bad in [
        "ftp://127.0.0.1/x",
        "127.0.0.1/x",
        "http://",
        "http://u:p@host/",
    ] {
        let (s, b) = admin.put(
            "/api/v1/events/webhook",
            &json!({"url": bad, "enabled": true}),
        )?;
        ensure!(s == 422, "{bad}: {s} {b}");
        ensure!(b["status"] == 422 && b["detail"].is_string(), "{bad}: {b}");
    }
    let long = format!("http://example.com/{}", "a".repeat(3000));
    let (s, b) = admin.put(
        "/api/v1/events/webhook",
        &json!({"url": long, "enabled": true}),
    )?;
    ensure!(s == 422, "{s} {b}");

    // A viewer may neither read nor change it.
    let viewer = q.login("vera", "long-enough-pass")?;
    let (s, b) = viewer.put(
        "/api/v1/events/webhook",
        &json!({"url": url, "enabled": true, "secret": "x"}),
    )?;
    ensure!(s == 403, "{s} {b}");
    let (s, b) = viewer.get("/api/v1/events/webhook")?;
    ensure!(s == 403, "{s} {b}");
    let (s, b) = viewer.delete("/api/v1/events/webhook")?;
    ensure!(s == 403, "{s} {b}");

    // The admin sets it with a secret, which is never shown back.
    let (s, b) = admin.put(
        "/api/v1/events/webhook",
        &json!({"url": url, "enabled": true, "secret": SECRET}),
    )?;
    ensure!(s == 200, "{b}");
    ensure!(
        b["url"] == url.as_str() && b["enabled"] == true && b["secret_set"] == true,
        "{b}"
    );
    ensure!(!b.to_string().contains(SECRET), "secret shown: {b}");

    // A failed login raises auth.failed, which the receiver gets.
    let anon = Api::anonymous(&q);
    let (s, _) = anon.post(
        "/api/v1/auth/login",
        &json!({"username": "mallory", "password": "guess-guess"}),
    )?;
    ensure!(s == 401);
    let deadline = Instant::now() + Duration::from_secs(15);
    let (req, event) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let req = received
            .recv_timeout(left)
            .context("no webhook delivery within 15 s")?;
        let event: Value = serde_json::from_slice(&req.body)?;
        if event["kind"] == "auth.failed" && event["subject"] == "mallory" {
            break (req, event);
        }
    };
    ensure!(
        req.request_line == "POST /hooks/quarry?src=test HTTP/1.1",
        "{}",
        req.request_line
    );
    ensure!(req.header("content-type") == Some("application/json"));
    ensure!(req.header("host") == Some(format!("127.0.0.1:{port}").as_str()));
    ensure!(
        req.header("x-quarry-signature") == Some(expected_signature(&req.body).as_str()),
        "bad signature {:?}",
        req.header("x-quarry-signature")
    );
    ensure!(event["severity"] == "warning", "{event}");
    ensure!(event["resolved"] == false, "{event}");
    ensure!(
        event["id"].is_i64() && event["raised_at"].is_string(),
        "{event}"
    );
    ensure!(
        event["message"]
            .as_str()
            .is_some_and(|m| m.contains("mallory")),
        "{event}"
    );
    ensure!(
        event["appliance"].as_str().is_some_and(|a| !a.is_empty()),
        "{event}"
    );
    // The same event in the list.
    let (_, events) = admin.get("/api/v1/events")?;
    ensure!(
        events.as_array().is_some_and(|a| a
            .iter()
            .any(|e| e["id"] == event["id"] && e["kind"] == "auth.failed")),
        "{events}"
    );

    // GET shows the delivery, still not the secret; nor does the audit log.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, b) = admin.get("/api/v1/events/webhook")?;
        ensure!(s == 200, "{b}");
        ensure!(!b.to_string().contains(SECRET), "secret shown: {b}");
        let last = &b["last_delivery"];
        if last["ok"] == true {
            ensure!(last["status"] == 200 && last["error"].is_null(), "{b}");
            ensure!(last["at"].is_string(), "{b}");
            break;
        }
        if Instant::now() > deadline {
            bail!("delivery never recorded: {b}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, audit) = admin.get("/api/v1/audit")?;
    ensure!(s == 200, "{audit}");
    ensure!(
        !audit.to_string().contains(SECRET),
        "secret in the audit log"
    );
    ensure!(
        audit
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["action"] == "webhook.set")),
        "{audit}"
    );
    ensure!(!q.log_text().contains(SECRET), "secret in the log");

    // Removed: no more deliveries.
    let (s, b) = admin.delete("/api/v1/events/webhook")?;
    ensure!(s == 204, "{b}");
    let (s, b) = admin.get("/api/v1/events/webhook")?;
    ensure!(
        s == 200 && b["url"].is_null() && b["enabled"] == false,
        "{b}"
    );
    let (s, _) = anon.post(
        "/api/v1/auth/login",
        &json!({"username": "eve", "password": "guess-guess"}),
    )?;
    ensure!(s == 401);
    if let Ok(req) = received.recv_timeout(Duration::from_secs(2)) {
        bail!(
            "delivered after removal: {}",
            String::from_utf8_lossy(&req.body)
        );
    }
    Ok(())
}
