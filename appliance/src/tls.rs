//! HTTPS for the web UI and REST API: the appliance's TLS certificate and the listener that
//! serves the same router over it.
//!
//! On first start a self-signed certificate (ECDSA P-256, ten years, names `quarry`,
//! `localhost`, the host name and 127.0.0.1) is generated into `DATA/tls/` so the web UI
//! is encrypted from the first boot. An admin replaces it with one from their own CA through
//! `PUT /api/v1/system/tls`; the new certificate is checked (it parses, the key matches, it
//! has not expired), written atomically, and served to the next handshake without a
//! restart. The private key file is mode 0600 and never logged or returned by the API.

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

/// Subdirectory of the data directory holding the certificate and key.
const TLS_DIR: &str = "tls";
const CERT_FILE: &str = "cert.pem";
const KEY_FILE: &str = "key.pem";
/// Largest PEM accepted through the API (a certificate chain and a key).
pub const MAX_PEM_LEN: usize = 64 * 1024;
/// A client that does not finish its TLS handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Validity of the generated self-signed certificate.
const SELF_SIGNED_DAYS: i64 = 3650;

/// Why a certificate could not be loaded, made or replaced.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The PEM given is not a usable certificate and key (the caller's fault).
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing the files failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Generating the self-signed certificate failed.
    #[error("generating the self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> TlsError {
    let context = context.into();
    move |source| TlsError::Io { context, source }
}

/// What the API shows of the certificate in use (never the key).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CertInfo {
    /// Subject distinguished name.
    pub subject: String,
    /// Issuer distinguished name.
    pub issuer: String,
    /// Start of validity (RFC 3339).
    pub not_before: String,
    /// End of validity (RFC 3339).
    pub not_after: String,
    /// DNS names and IP addresses the certificate is valid for.
    pub names: Vec<String>,
    /// SHA-256 of the DER certificate, hex, for pinning and comparing with a browser.
    pub sha256_fingerprint: String,
    /// Whether it is the appliance's own self-signed certificate (issuer = subject).
    pub self_signed: bool,
}

/// The certificate in use, swappable while the listener runs.
#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// The appliance's TLS identity: files in `DATA/tls/`, the rustls server configuration
/// that serves them, and the facts the API reports.
pub struct TlsStore {
    dir: PathBuf,
    resolver: Arc<Resolver>,
    info: RwLock<CertInfo>,
    config: Arc<rustls::ServerConfig>,
}

/// A certificate chain and key, parsed and checked against each other.
struct Loaded {
    key: Arc<CertifiedKey>,
    info: CertInfo,
}

fn parse(cert_pem: &[u8], key_pem: &[u8]) -> Result<Loaded, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Invalid(format!("certificate PEM: {e}")))?;
    let leaf = chain
        .first()
        .ok_or_else(|| TlsError::Invalid("no CERTIFICATE block in the certificate PEM".into()))?;
    let info = describe(leaf)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsError::Invalid(format!("private key PEM: {e}")))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::Invalid(format!("private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        TlsError::Invalid(format!("the key does not belong to the certificate: {e}"))
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        info,
    })
}

fn describe(der: &CertificateDer<'_>) -> Result<CertInfo, TlsError> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der.as_ref())
        .map_err(|e| TlsError::Invalid(format!("certificate: {e}")))?;
    let validity = cert.validity();
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => names.push((*d).to_string()),
                GeneralName::IPAddress(ip) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*ip) {
                        names.push(std::net::Ipv4Addr::from(v4).to_string());
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*ip) {
                        names.push(std::net::Ipv6Addr::from(v6).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    Ok(CertInfo {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        not_before: crate::db::rfc3339(validity.not_before.timestamp()),
        not_after: crate::db::rfc3339(validity.not_after.timestamp()),
        names,
        sha256_fingerprint: hex::encode(digest.as_ref()),
        self_signed: cert.subject() == cert.issuer(),
    })
}

/// Writes `data` to `path` through a temporary file and a rename (never a torn file).
fn write_atomically(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io(format!("writing {}", tmp.display())))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("writing {}", tmp.display())))?;
    fs::rename(&tmp, path).map_err(io(format!("replacing {}", path.display())))
}

fn self_signed() -> Result<(String, String), TlsError> {
    let mut names = vec!["quarry".to_string(), "localhost".to_string()];
    if let Ok(h) = fs::read_to_string("/proc/sys/kernel/hostname") {
        let h = h.trim();
        if !h.is_empty() && !names.iter().any(|n| n == h) {
            names.push(h.to_string());
        }
    }
    names.push("127.0.0.1".to_string());
    let mut params = rcgen::CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Quarry storage appliance");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(SELF_SIGNED_DAYS);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl TlsStore {
    /// Loads `DATA/tls/{cert,key}.pem`, generating a self-signed pair on first start.
    pub fn load_or_create(data: &Path) -> Result<Arc<TlsStore>, TlsError> {
        let dir = data.join(TLS_DIR);
        fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        if !cert_path.exists() || !key_path.exists() {
            let (cert, key) = self_signed()?;
            write_atomically(&key_path, key.as_bytes(), 0o600)?;
            write_atomically(&cert_path, cert.as_bytes(), 0o644)?;
            tracing::info!(path = %cert_path.display(), "generated a self-signed TLS certificate");
        }
        let cert = fs::read(&cert_path).map_err(io(format!("reading {}", cert_path.display())))?;
        let key = fs::read(&key_path).map_err(io(format!("reading {}", key_path.display())))?;
        let loaded = parse(&cert, &key).map_err(|e| match e {
            TlsError::Invalid(why) => TlsError::Invalid(format!("{}: {why}", cert_path.display())),
            other => other,
        })?;
        let resolver = Arc::new(Resolver(RwLock::new(loaded.key)));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Invalid(format!("TLS configuration: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(TlsStore {
            dir,
            resolver,
            info: RwLock::new(loaded.info),
            config: Arc::new(config),
        }))
    }

    /// The certificate in use.
    pub fn info(&self) -> CertInfo {
        self.info.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the certificate and key: checked, written, then served to new handshakes.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<CertInfo, TlsError> {
        if cert_pem.len() > MAX_PEM_LEN || key_pem.len() > MAX_PEM_LEN {
            return Err(TlsError::Invalid(format!(
                "PEM larger than {MAX_PEM_LEN} bytes"
            )));
        }
        let loaded = parse(cert_pem.as_bytes(), key_pem.as_bytes())?;
        let now = crate::db::now();
        let expired = time::OffsetDateTime::parse(
            &loaded.info.not_after,
            &time::format_description::well_known::Rfc3339,
        )
        .map(|t| t.unix_timestamp() < now)
        .unwrap_or(false);
        if expired {
            return Err(TlsError::Invalid(format!(
                "the certificate expired at {}",
                loaded.info.not_after
            )));
        }
        write_atomically(&self.dir.join(KEY_FILE), key_pem.as_bytes(), 0o600)?;
        write_atomically(&self.dir.join(CERT_FILE), cert_pem.as_bytes(), 0o644)?;
        *self.resolver.0.write().unwrap_or_else(|p| p.into_inner()) = loaded.key;
        *self.info.write().unwrap_or_else(|p| p.into_inner()) = loaded.info.clone();
        Ok(loaded.info)
    }
}

/// Serves `app` over TLS on `listener` until `shutdown`; connections in progress are
/// closed gracefully.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    store: Arc<TlsStore>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(store.config.clone());
    loop {
        let (sock, peer) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "HTTPS accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (acceptor, app, shutdown) = (acceptor.clone(), app.clone(), shutdown.clone());
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            serve_connection(tls, peer, app, shutdown).await;
        });
    }
}

async fn serve_connection(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    peer: SocketAddr,
    app: axum::Router,
    shutdown: CancellationToken,
) {
    let app = app.layer(axum::Extension(axum::extract::ConnectInfo(peer)));
    let service = hyper_util::service::TowerToHyperService::new(app);
    let builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "HTTPS connection ended with an error");
            }
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_start_generates_and_a_restart_reloads_the_same_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let a = TlsStore::load_or_create(dir.path()).unwrap();
        let info = a.info();
        assert!(info.self_signed);
        assert!(info.names.iter().any(|n| n == "127.0.0.1"), "{info:?}");
        let key = dir.path().join(TLS_DIR).join(KEY_FILE);
        let mode = fs::metadata(&key).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let b = TlsStore::load_or_create(dir.path()).unwrap();
        assert_eq!(b.info().sha256_fingerprint, info.sha256_fingerprint);
    }

    #[test]
    fn replace_checks_the_pair_and_keeps_the_old_one_on_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let store = TlsStore::load_or_create(dir.path()).unwrap();
        let before = store.info();
        let (cert1, key1) = self_signed().unwrap();
        let (_cert2, key2) = self_signed().unwrap();
        let err = store.replace(&cert1, &key2).unwrap_err();
        assert!(matches!(err, TlsError::Invalid(_)), "{err}");
        assert!(matches!(
            store.replace("junk", &key1),
            Err(TlsError::Invalid(_))
        ));
        assert_eq!(store.info().sha256_fingerprint, before.sha256_fingerprint);
        let after = store.replace(&cert1, &key1).unwrap();
        assert_ne!(after.sha256_fingerprint, before.sha256_fingerprint);
        let reloaded = TlsStore::load_or_create(dir.path()).unwrap();
        assert_eq!(reloaded.info().sha256_fingerprint, after.sha256_fingerprint);
    }
}
