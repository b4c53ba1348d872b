//! `quarry serve`: opens the database and pool, binds every listener (failing fast with a
//! one-line reason), runs the API and protocol services, reports to systemd, and shuts
//! down cleanly on SIGTERM/SIGINT.

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::db::{Actor, Db, Role};
use crate::nvme_service::ports::PortRole;
use crate::pool::DirectoryPool;
use crate::state::AppState;
use crate::{api, credentials, logging, nvme_service, smb_service};

/// File holding the generated first-start admin password (mode 0600).
pub const INITIAL_PASSWORD_FILE: &str = "initial-admin-password";
/// Database file name inside the data directory.
pub const DB_FILE: &str = "quarry.db";
/// How often share usage is written back to the database.
const USAGE_FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// How long shutdown waits for services to finish in-flight work.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs the appliance until a signal asks it to stop.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    logging::init(args.log_format);
    check_args(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("quarry")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

fn bind(addr: SocketAddr, flag: &str, what: &str) -> anyhow::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::PermissionDenied => format!(
                "; ports below 1024 need root or CAP_NET_BIND_SERVICE: pick another with {flag} 127.0.0.1:{}",
                10_000 + addr.port()
            ),
            std::io::ErrorKind::AddrInUse => format!("; another process uses it: pick another with {flag} ADDR:PORT"),
            _ => format!("; set another address with {flag}"),
        };
        anyhow::anyhow!("cannot bind the {what} listener on {addr}: {e}{hint}")
    })?;
    listener
        .set_nonblocking(true)
        .context("configuring listener")?;
    TcpListener::from_std(listener).context("registering listener")
}

/// Creates the `admin` account on first start, with `QUARRY_ADMIN_PASSWORD` or a
/// generated password written to `DIR/initial-admin-password`.
fn ensure_admin(db: &Db, data: &Path) -> anyhow::Result<()> {
    if db.user_count()? > 0 {
        return Ok(());
    }
    let (password, generated) = match std::env::var("QUARRY_ADMIN_PASSWORD") {
        Ok(p) if !p.is_empty() => (p, false),
        _ => (credentials::random_password()?, true),
    };
    db.create_user(&Actor::system(), "admin", &password, Some(Role::Admin))
        .context("creating the admin account (QUARRY_ADMIN_PASSWORD must be 8-256 characters)")?;
    if generated {
        let path = data.join(INITIAL_PASSWORD_FILE);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(f, "{password}")?;
        // Printed once, on first start only, so the person who started it can log in.
        tracing::warn!(user = "admin", password = %password, file = %path.display(), "first start: generated the admin password");
    } else {
        tracing::info!(
            user = "admin",
            "first start: admin password taken from QUARRY_ADMIN_PASSWORD"
        );
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    fs::create_dir_all(&args.data)
        .with_context(|| format!("creating data directory {}", args.data.display()))?;
    let data = fs::canonicalize(&args.data)
        .with_context(|| format!("resolving {}", args.data.display()))?;

    // Bind first: a port problem is the most common start failure, and should be the
    // first and only thing reported.
    let http = bind(args.http_listen, "--http-listen", "HTTP")?;
    let smb = args
        .smb_listen
        .iter()
        .map(|a| bind(*a, "--smb-listen", "SMB"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let nvme = bind(args.nvme_listen, "--nvme-listen", "NVMe/TCP")?;
    let https = match args.https_listen.0 {
        Some(addr) => Some(bind(addr, "--https-listen", "HTTPS")?),
        None => None,
    };
    let nvme_discovery = match args.nvme_discovery_listen {
        Some(addr) => Some(bind(addr, "--nvme-discovery-listen", "NVMe/TCP discovery")?),
        None => None,
    };

    let db = Db::open(&data.join(DB_FILE))
        .with_context(|| format!("opening {}", data.join(DB_FILE).display()))?;
    ensure_admin(&db, &data)?;
    // The webhook hears events from here on, those of the pool import included; they
    // wait in its queue until its task starts.
    let webhook = Arc::new(crate::webhook::Webhook::default());
    webhook.set_config(db.webhook().context("reading the webhook setting")?);
    webhook.attach(&db);
    let pool =
        Arc::new(DirectoryPool::open(&data.join("pool")).context("opening the pool directory")?);
    {
        // Import the managed pool (mount it on DATA/pool) before any share is touched.
        let (db, pool) = (db.clone(), pool.clone());
        tokio::task::spawn_blocking(move || crate::pool::managed::import(&db, &pool))
            .await
            .context("importing the pool")??;
    }
    {
        let (db, pool) = (db.clone(), pool.clone());
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            if !pool.is_mounted() {
                // The import failed (raised as pool.failed): start anyway so the API can
                // show why, but serve no share from beneath the missing mount.
                tracing::error!("the managed pool is not mounted; shares are not served");
                return Ok(());
            }
            for share in db.list_shares()? {
                pool.create_dataset(&share.dataset)?;
                pool.register_share(&share);
            }
            Ok(())
        })
        .await
        .context("scanning shares")??;
    }
    let mut state = AppState::new(db.clone(), pool.clone(), data.clone());
    let tls = {
        let data = data.clone();
        tokio::task::spawn_blocking(move || crate::tls::TlsStore::load_or_create(&data))
            .await
            .context("loading the TLS certificate")?
            .context("loading the TLS certificate (delete DATA/tls to generate a new one)")?
    };
    state.tls = Some(tls.clone());
    state.webhook = webhook;
    state.webhook.attach(&db);
    state
        .nvme_ports
        .add(nvme, None, PortRole::Cli, args.nvme_advertise.clone())
        .context("registering the NVMe/TCP listener")?;
    if let Some(listener) = nvme_discovery {
        state
            .nvme_ports
            .add(listener, None, PortRole::Discovery, None)
            .context("registering the NVMe/TCP discovery listener")?;
    }
    let shutdown = CancellationToken::new();

    tracing::info!(url = %format!("http://{}/", args.http_listen), "web UI and REST API listening (API at /api/v1)");
    for addr in &args.smb_listen {
        tracing::info!(url = %format!("smb://{addr}/"), "SMB listening");
    }
    tracing::info!(url = %format!("nvme+tcp://{}", args.nvme_listen), "NVMe/TCP listening");
    if let Some(addr) = args.nvme_discovery_listen {
        tracing::info!(url = %format!("nvme+tcp://{addr}"), "NVMe/TCP discovery listening");
    }
    match quarry_nvmeof::rdma::availability() {
        Ok(devices) => {
            tracing::info!(devices = %devices.join(","), "RDMA listeners available (add them with POST /api/v1/nvme/listeners)")
        }
        Err(why) => tracing::info!("RDMA listeners unavailable: {why}"),
    }
    if let Some(addr) = args.https_listen.0 {
        let cert = tls.info();
        tracing::info!(url = %format!("https://{addr}/"), sha256 = %cert.sha256_fingerprint, "web UI and REST API listening over HTTPS");
    }

    let mut tasks = tokio::task::JoinSet::new();
    {
        let app = api::router(state.clone());
        let token = shutdown.clone();
        tasks.spawn(async move {
            axum::serve(
                http,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await
            .context("HTTP server")
        });
        if let Some(listener) = https {
            let (tls, token) = (tls.clone(), shutdown.clone());
            let app = api::router(state.clone());
            tasks.spawn(async move {
                crate::tls::serve(listener, app, tls, token)
                    .await
                    .context("HTTPS server")
            });
        }
    }
    tasks.spawn(smb_service::run(
        smb,
        state.clone(),
        args.smb_ciphers.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(nvme_service::run(
        state.clone(),
        args.nvme_io_engine,
        shutdown.clone(),
    ));
    tasks.spawn(flush_usage_periodically(state.clone(), shutdown.clone()));
    tasks.spawn(crate::pool::managed::run_poller(
        state.clone(),
        shutdown.clone(),
    ));
    {
        let st = state.clone();
        if let Err(e) = crate::pool::managed::recover_jobs(&st) {
            tracing::warn!(error = %e, "recovering unfinished jobs failed");
        }
    }
    tasks.spawn(watchdog(shutdown.clone()));
    tasks.spawn(crate::telemetry::sample_every_second(shutdown.clone()));
    tasks.spawn(crate::alerts::watch_quotas(state.clone(), shutdown.clone()));
    tasks.spawn(crate::webhook::run(state.webhook.clone(), shutdown.clone()));

    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!(error = %e, "telling systemd we are ready failed");
    }
    tracing::info!(data = %data.display(), version = env!("CARGO_PKG_VERSION"), "quarry is ready");

    let mut failure = None;
    tokio::select! {
        reason = wait_for_signal() => tracing::info!(signal = reason, "shutting down"),
        Some(result) = tasks.join_next() => {
            // A service ended on its own: that is fatal for an appliance; systemd restarts us.
            failure = Some(match result {
                Ok(Ok(())) => anyhow::anyhow!("a service stopped unexpectedly"),
                Ok(Err(e)) => e,
                Err(e) => anyhow::anyhow!("a service panicked: {e}"),
            });
        }
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    shutdown.cancel();
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        tracing::warn!("services did not stop within {SHUTDOWN_GRACE:?}; exiting anyway");
    }
    flush_usage(&state).await;
    match failure {
        Some(e) => Err(e),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers we can still be killed; just wait forever.
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

async fn flush_usage(state: &AppState) {
    let (db, pool) = (state.db.clone(), state.pool.clone());
    let shares = match db.call(|db| db.list_shares()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "listing shares for usage flush failed");
            return;
        }
    };
    let usage: Vec<(String, u64)> = shares
        .iter()
        .map(|s| (s.name.clone(), pool.share_quota(&s.name).used()))
        .collect();
    if let Err(e) = db.call(move |db| db.record_share_usage(&usage)).await {
        tracing::warn!(error = %e, "recording share usage failed");
    }
}

async fn flush_usage_periodically(
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(USAGE_FLUSH_INTERVAL) => flush_usage(&state).await,
        }
    }
}

/// Pets the systemd watchdog at half its interval, when one is configured.
async fn watchdog(shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        shutdown.cancelled().await;
        return Ok(());
    }
    let period = Duration::from_micros(usec / 2);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(period) => { let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]); }
        }
    }
}

/// Refuses obviously wrong argument combinations before anything starts.
pub fn check_args(args: &ServeArgs) -> anyhow::Result<()> {
    if args.smb_listen.is_empty() {
        bail!("--smb-listen needs at least one ADDR:PORT");
    }
    let mut addrs = vec![args.http_listen, args.nvme_listen];
    addrs.extend(args.smb_listen.iter().copied());
    addrs.extend(args.nvme_discovery_listen);
    for (i, a) in addrs.iter().enumerate() {
        if a.port() != 0 && addrs.iter().take(i).any(|b| b == a) {
            bail!("two listeners share {a}: give --http-listen, --smb-listen, --nvme-listen and --nvme-discovery-listen different ports");
        }
    }
    Ok(())
}
