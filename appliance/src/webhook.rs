//! The optional webhook: every event raised or resolved (see [`crate::db::events`]) is
//! POSTed as JSON to the configured URL, signed with HMAC-SHA256 when a secret is set
//! (`X-Quarry-Signature: sha256=<hex>`).
//!
//! Raising an event never waits on the network: the database's event hook only pushes
//! the event onto a bounded queue ([`QUEUE_CAPACITY`]; when full the oldest is dropped
//! and counted), and one background task ([`run`]) delivers them in order, each with
//! [`ATTEMPTS`] tries of at most [`TIMEOUT`] (connect, TLS, request and response head)
//! and a growing pause between them. The result of the last delivery is kept in memory
//! for `GET /api/v1/events/webhook`. HTTPS verifies the receiver against the Mozilla
//! roots compiled in (`webpki-roots`); a receiver with a private CA is not supported.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::db::events::{Event, Severity};
use crate::db::webhook::{parse_url, redacted_url, Target, WebhookConfig};
use crate::db::{now, rfc3339};

/// Events waiting for delivery at most; beyond this the oldest is dropped.
pub const QUEUE_CAPACITY: usize = 256;
/// Longest one attempt may take (connect + TLS + request + response head).
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Tries per event.
pub const ATTEMPTS: u32 = 3;
/// Pause after the first failed try; doubled after each further one.
const BACKOFF: Duration = Duration::from_secs(1);
/// Longest error text kept for `GET`.
const MAX_ERROR: usize = 300;

/// The JSON body POSTed for an event.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Payload {
    /// The event's id (the same in its raise and its resolve delivery).
    pub id: i64,
    /// What happened, dotted (`auth.failed`, `pool.degraded`, ...).
    pub kind: String,
    /// How urgent.
    pub severity: Severity,
    /// What it happened to (`pool`, a device path, a share or user name).
    pub subject: String,
    /// One readable sentence.
    pub message: String,
    /// When it was raised (RFC 3339).
    pub raised_at: String,
    /// Whether this delivery says the condition cleared.
    pub resolved: bool,
    /// When it cleared (RFC 3339), for a resolve delivery.
    pub resolved_at: Option<String>,
    /// The appliance's host name.
    pub appliance: String,
}

impl Payload {
    /// The body for `event` sent by the appliance called `appliance`.
    pub fn new(event: &Event, appliance: &str) -> Payload {
        Payload {
            id: event.id,
            kind: event.kind.clone(),
            severity: event.severity,
            subject: event.subject.clone(),
            message: event.message.clone(),
            raised_at: event.at.clone(),
            resolved: event.resolved_at.is_some(),
            resolved_at: event.resolved_at.clone(),
            appliance: appliance.to_string(),
        }
    }
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, the `X-Quarry-Signature` value.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    format!(
        "sha256={}",
        hex::encode(ring::hmac::sign(&key, body).as_ref())
    )
}

/// How the last delivery went.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct LastDelivery {
    /// When it ended (RFC 3339).
    pub at: String,
    /// The event delivered (or given up on).
    pub event_id: i64,
    /// Whether the receiver answered 2xx.
    pub ok: bool,
    /// The receiver's HTTP status of the last try, if it answered.
    pub status: Option<u16>,
    /// Why the last try failed; `None` on success.
    pub error: Option<String>,
    /// Tries made.
    pub attempts: u32,
}

/// The queue, the cached configuration and the delivery record. One per process,
/// shared through `AppState`.
pub struct Webhook {
    config: RwLock<Option<WebhookConfig>>,
    queue: Mutex<VecDeque<Event>>,
    wake: Notify,
    dropped: AtomicU64,
    last: Mutex<Option<LastDelivery>>,
    appliance: String,
}

impl Default for Webhook {
    fn default() -> Self {
        Webhook {
            config: RwLock::new(None),
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            dropped: AtomicU64::new(0),
            last: Mutex::new(None),
            appliance: hostname(),
        }
    }
}

/// The host name from the kernel, or `quarry`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "quarry".into())
}

impl Webhook {
    /// Replaces the configuration deliveries use (after it was stored; `None` when
    /// removed). Disabling empties the queue.
    pub fn set_config(&self, config: Option<WebhookConfig>) {
        let active = config.as_ref().is_some_and(|c| c.enabled);
        *self
            .config
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
        if !active {
            self.queue
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clear();
        }
    }

    fn config(&self) -> Option<WebhookConfig> {
        self.config
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Makes `db` offer every event raised or resolved to this webhook (replacing any
    /// earlier hook).
    pub fn attach(self: &Arc<Self>, db: &crate::db::Db) {
        let hook = Arc::downgrade(self);
        db.set_event_hook(Arc::new(move |event| {
            if let Some(hook) = hook.upgrade() {
                hook.offer(event);
            }
        }));
    }

    /// Queues `event` for delivery if the webhook is on; never blocks on the network.
    pub fn offer(&self, event: &Event) {
        if !self.config().is_some_and(|c| c.enabled) {
            return;
        }
        {
            let mut queue = self
                .queue
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if queue.len() >= QUEUE_CAPACITY {
                queue.pop_front();
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n, "webhook queue full; dropped the oldest event");
                }
            }
            queue.push_back(event.clone());
        }
        self.wake.notify_one();
    }

    /// Events dropped because the queue was full, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// How the last delivery went, if one was tried since start.
    pub fn last_delivery(&self) -> Option<LastDelivery> {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn next(&self) -> Option<Event> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop_front()
    }

    /// Delivers one event with retries and records the result.
    async fn deliver(&self, event: &Event, tls: &tokio_rustls::TlsConnector) {
        let Some(config) = self.config().filter(|c| c.enabled) else {
            return;
        };
        let target = match parse_url(&config.url) {
            Ok(t) => t,
            Err(e) => {
                self.record(event.id, None, Some(e), 0);
                return;
            }
        };
        let body = match serde_json::to_vec(&Payload::new(event, &self.appliance)) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                self.record(event.id, None, Some(e.to_string()), 0);
                return;
            }
        };
        let signature = config.secret.as_deref().map(|s| signature(s, &body));
        let mut pause = BACKOFF;
        for attempt in 1..=ATTEMPTS {
            let result = tokio::time::timeout(
                TIMEOUT,
                post(
                    &target,
                    body.clone(),
                    signature.as_deref(),
                    &event.kind,
                    tls,
                ),
            )
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", TIMEOUT.as_secs())));
            let (status, error) = match result {
                Ok(status) if (200..300).contains(&status) => (Some(status), None),
                Ok(status) => (
                    Some(status),
                    Some(format!("the receiver answered {status}")),
                ),
                Err(e) => (None, Some(e)),
            };
            if error.is_none() || attempt == ATTEMPTS {
                if let Some(e) = &error {
                    tracing::warn!(url = %redacted_url(&config.url), event = event.id, error = %e,
                        "webhook delivery failed after {ATTEMPTS} tries");
                }
                self.record(event.id, status, error, attempt);
                return;
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }

    fn record(&self, event_id: i64, status: Option<u16>, error: Option<String>, attempts: u32) {
        let error = error.map(|mut e| {
            if e.len() > MAX_ERROR {
                let mut end = MAX_ERROR;
                while !e.is_char_boundary(end) {
                    end -= 1;
                }
                e.truncate(end);
            }
            e
        });
        *self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(LastDelivery {
            at: rfc3339(now()),
            event_id,
            ok: error.is_none(),
            status,
            error,
            attempts,
        });
    }
}

/// The TLS client configuration: rustls on ring, the compiled-in Mozilla roots.
fn tls_connector() -> Result<tokio_rustls::TlsConnector, rustls::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// One POST over a new HTTP/1.1 connection; the receiver's status.
async fn post(
    target: &Target,
    body: Bytes,
    signature: Option<&str>,
    kind: &str,
    tls: &tokio_rustls::TlsConnector,
) -> Result<u16, String> {
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("connecting to {}: {e}", target.authority))?;
    let _ = tcp.set_nodelay(true);
    let mut req = http::Request::post(target.path.as_str())
        .header(http::header::HOST, target.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("quarry/", env!("CARGO_PKG_VERSION")),
        )
        .header(http::header::CONNECTION, "close")
        .header("X-Quarry-Event", kind);
    if let Some(sig) = signature {
        req = req.header("X-Quarry-Signature", sig);
    }
    let req = req
        .body(Full::new(body))
        .map_err(|e| format!("building the request: {e}"))?;
    if target.https {
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|e| format!("{}: not a valid TLS server name: {e}", target.host))?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", target.authority))?;
        send(stream, req).await
    } else {
        send(tcp, req).await
    }
}

async fn send<S>(stream: S, req: http::Request<Full<Bytes>>) -> Result<u16, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = sender.send_request(req).await;
    let out = match result {
        Ok(resp) => {
            let status = resp.status().as_u16();
            // Read (and discard) a little of the answer so the receiver is not cut off
            // mid-write; the whole attempt is under the timeout anyway.
            let mut body = resp.into_body();
            let mut seen = 0usize;
            while seen < 64 * 1024 {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        seen += frame.data_ref().map_or(0, |d| d.len());
                    }
                    _ => break,
                }
            }
            Ok(status)
        }
        Err(e) => Err(format!("sending the request: {e}")),
    };
    driver.abort();
    out
}

/// Delivers queued events until `shutdown`.
pub async fn run(hook: Arc<Webhook>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let tls = match tls_connector() {
        Ok(t) => t,
        Err(e) => {
            // Only a rustls bug gets here; plain HTTP still works without TLS, so go on
            // without HTTPS rather than stopping the appliance.
            tracing::error!(error = %e, "webhook TLS setup failed; https webhooks will fail");
            tokio_rustls::TlsConnector::from(Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
            ))
        }
    };
    loop {
        while let Some(event) = hook.next() {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = hook.deliver(&event, &tls) => {}
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = hook.wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(resolved: bool) -> Event {
        Event {
            id: 7,
            at: "2026-01-02T03:04:05Z".into(),
            severity: Severity::Critical,
            kind: "pool.degraded".into(),
            subject: "pool".into(),
            message: "a device is missing".into(),
            acked: false,
            acked_by: None,
            acked_at: None,
            resolved_at: resolved.then(|| "2026-01-02T04:00:00Z".to_string()),
        }
    }

    #[test]
    fn body_carries_the_event_and_the_appliance() {
        let body = serde_json::to_value(Payload::new(&event(false), "nas1")).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "id": 7, "kind": "pool.degraded", "severity": "critical", "subject": "pool",
                "message": "a device is missing", "raised_at": "2026-01-02T03:04:05Z",
                "resolved": false, "resolved_at": null, "appliance": "nas1",
            })
        );
        let body = serde_json::to_value(Payload::new(&event(true), "nas1")).unwrap();
        assert_eq!(body["resolved"], true);
        assert_eq!(body["resolved_at"], "2026-01-02T04:00:00Z");
    }

    #[test]
    fn signature_is_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn queue_is_bounded_drops_the_oldest_and_is_off_when_disabled() {
        let hook = Webhook::default();
        hook.offer(&event(false));
        assert!(hook.next().is_none(), "queued while not configured");
        hook.set_config(Some(WebhookConfig {
            url: "http://127.0.0.1:9/".into(),
            enabled: true,
            secret: None,
        }));
        for id in 0..(QUEUE_CAPACITY as i64 + 5) {
            let mut e = event(false);
            e.id = id;
            hook.offer(&e);
        }
        assert_eq!(hook.dropped(), 5);
        assert_eq!(hook.next().map(|e| e.id), Some(5));
        hook.set_config(None);
        assert!(hook.next().is_none());
    }

    #[tokio::test]
    async fn failed_delivery_is_recorded_after_all_tries() {
        let hook = Webhook::default();
        // A port nothing listens on: connection refused at once.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        hook.set_config(Some(WebhookConfig {
            url: format!("http://127.0.0.1:{port}/x"),
            enabled: true,
            secret: Some("k".into()),
        }));
        let tls = tls_connector().unwrap();
        hook.deliver(&event(false), &tls).await;
        let last = hook.last_delivery().unwrap();
        assert!(!last.ok);
        assert_eq!(last.attempts, ATTEMPTS);
        assert_eq!(last.event_id, 7);
        assert!(last.error.unwrap().contains("connecting"));
    }

    #[tokio::test]
    async fn https_checks_the_receivers_certificate() {
        // A TLS receiver with a self-signed certificate, which no compiled-in root signs.
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        let target = parse_url(&format!("https://localhost:{port}/hook")).unwrap();
        let err = post(
            &target,
            Bytes::from_static(b"{}"),
            None,
            "x",
            &tls_connector().unwrap(),
        )
        .await
        .unwrap_err();
        assert!(err.starts_with("TLS with"), "{err}");
        assert!(err.contains("certificate"), "{err}");
    }
}
