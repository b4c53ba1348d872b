//! The NVMe/TCP front end wired to the appliance: volumes from the pool become
//! namespaces, subsystems and allowed hosts come from the config DB, and every
//! `ConfigChange::{Volumes, Subsystems}` swaps in a new snapshot (raising Namespace
//! Attribute Changed notices on connected controllers). The transport also asks the
//! DB for news before every admin Connect, so a host connecting right after an API
//! call returns sees its effect.

mod device;
pub mod ports;
mod sessions;
pub mod uring;
mod uring_queue;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use quarry_nvmeof::target::{
    ConfigSource, IoCounters, NamespaceConfig, PortConfig, SubsystemConfig, Target, TargetConfig,
    TargetIdentity,
};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::db::model::Subsystem;
use crate::state::{AppState, ConfigChange};
use device::FileDevice;

/// log2 of the logical block size every namespace reports (4 KiB, as nvmet does for
/// files): one page per block, and what O_DIRECT on the pool's file system wants.
const LBA_SHIFT: u8 = 12;

/// Open volume files and their counters, kept across reloads so SMART counters and
/// file handles survive unrelated configuration changes.
#[derive(Default)]
struct VolumeCache {
    open: HashMap<String, (Arc<FileDevice>, Arc<IoCounters>)>,
}

/// What the last configuration was built from: reloads that find the same rows do
/// nothing.
type Fingerprint = (Vec<Subsystem>, Vec<(String, u64)>, Vec<PortConfig>);

/// The config DB as the target's [`ConfigSource`]: consulted on every change
/// notification and before every admin Connect.
struct DbSource {
    state: AppState,
    inner: Mutex<(VolumeCache, Option<Fingerprint>)>,
}

impl ConfigSource for DbSource {
    fn load_if_changed(&self) -> Result<Option<TargetConfig>, String> {
        let subsystems = self
            .state
            .db
            .subsystems()
            .map_err(|e| format!("reading NVMe subsystems: {e:#}"))?;
        let mut volumes: Vec<(String, u64)> = self
            .state
            .db
            .volumes()
            .map_err(|e| format!("reading volumes: {e:#}"))?
            .into_iter()
            .map(|v| (v.name.to_lowercase(), v.size_bytes))
            .collect();
        volumes.sort();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let fp = (subsystems, volumes, self.state.nvme_ports.discovery_ports());
        if inner.1.as_ref() == Some(&fp) {
            return Ok(None);
        }
        let mut cfg = build_config(&self.state, &mut inner.0, &fp.0, &fp.1);
        cfg.ports = fp.2.clone();
        inner.1 = Some(fp);
        Ok(Some(cfg))
    }
}

/// Serves NVMe/TCP on every listener in `state.nvme_ports` (and on those stored in the
/// DB, bound here) until `shutdown` is cancelled.
pub async fn run(
    state: AppState,
    engine: crate::cli::IoEngine,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut changes = state.changes.subscribe();
    let source = Arc::new(DbSource {
        state: state.clone(),
        inner: Mutex::new((VolumeCache::default(), None)),
    });
    let first = source.clone();
    let initial = tokio::task::spawn_blocking(move || first.load_if_changed())
        .await
        .context("config loader panicked")?
        .map_err(anyhow::Error::msg)?
        .unwrap_or_default();
    let hooks = Arc::new(sessions::Hooks::new(state.sessions.clone()));
    let target = Target::new(initial, TargetIdentity::default(), Some(hooks));
    target.set_source(source);
    if engine == crate::cli::IoEngine::Uring {
        match uring::UringExecutor::start() {
            Ok(e) => {
                target.set_executor(Arc::new(e));
                tracing::info!("NVMe volume I/O through io_uring");
            }
            Err(e) => {
                tracing::warn!(error = %e, "io_uring unavailable; NVMe volume I/O on the blocking pool")
            }
        }
    }

    let reload_target = target.clone();
    let reload_shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            let change = tokio::select! {
                _ = reload_shutdown.cancelled() => return,
                c = changes.recv() => c,
            };
            match change {
                Ok(ConfigChange::Volumes | ConfigChange::Subsystems)
                | Err(RecvError::Lagged(_)) => {}
                Ok(_) => continue,
                Err(RecvError::Closed) => return,
            }
            let t = reload_target.clone();
            match tokio::task::spawn_blocking(move || t.refresh()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "NVMe config reload failed; keeping the previous one")
                }
                Err(e) => tracing::warn!(error = %e, "NVMe config reload task failed"),
            }
        }
    });

    state.nvme_ports.start(target.clone(), shutdown.clone());
    bind_stored_listeners(&state).await;
    // The stored listeners change the discovery log's port list.
    let t = target.clone();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || t.refresh()).await {
        tracing::warn!(error = %e, "NVMe config reload failed");
    }
    shutdown.cancelled().await;
    Ok(())
}

/// Binds the listeners added through the API in earlier runs. One that cannot be bound
/// (its address is gone, its port taken) is reported as an event, not a failed start:
/// the appliance must stay manageable.
async fn bind_stored_listeners(state: &AppState) {
    let db = state.db.clone();
    let stored = match db.call(|db| db.nvme_listeners()).await {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "reading stored NVMe listeners");
            return;
        }
    };
    for l in stored {
        let addr = std::net::SocketAddr::new(l.address, l.port);
        let subject = format!("{}://{addr}", l.transport);
        let bound = if l.transport == "rdma" {
            match tokio::task::spawn_blocking(move || quarry_nvmeof::rdma::RdmaListener::bind(addr))
                .await
            {
                Ok(Ok(listener)) => state.nvme_ports.add_bound(
                    ports::BoundListener::Rdma(listener),
                    Some(l.id),
                    ports::PortRole::Api,
                    l.advertise.clone(),
                ),
                Ok(Err(e)) => Err(std::io::Error::other(e)),
                Err(e) => Err(std::io::Error::other(e)),
            }
        } else {
            tokio::net::TcpListener::bind(addr)
                .await
                .and_then(|listener| {
                    state.nvme_ports.add(
                        listener,
                        Some(l.id),
                        ports::PortRole::Api,
                        l.advertise.clone(),
                    )
                })
        };
        let transport = if l.transport == "rdma" { "RDMA" } else { "TCP" };
        let db = state.db.clone();
        let event = match bound {
            Ok(_) => {
                tracing::info!(url = %format!("nvme+{}://{addr}", l.transport), "NVMe/{transport} listening (added through the API)");
                db.call(move |db| db.resolve_condition("nvme.listener", &subject).map(|_| ()))
                    .await
            }
            Err(e) => {
                tracing::error!(listener = %addr, error = %e, "cannot bind a stored NVMe/{transport} listener");
                let message = format!("cannot bind NVMe/{transport} listener {addr}: {e}");
                db.call(move |db| {
                    db.raise_condition(
                        crate::db::events::Severity::Warning,
                        "nvme.listener",
                        &subject,
                        &message,
                    )
                    .map(|_| ())
                })
                .await
            }
        };
        if let Err(e) = event {
            tracing::error!(error = %e, "recording a listener event");
        }
    }
}

/// Builds the target configuration from DB rows, opening the volume files they name.
fn build_config(
    state: &AppState,
    cache: &mut VolumeCache,
    subsystems: &[Subsystem],
    volumes: &[(String, u64)],
) -> TargetConfig {
    let volumes: HashMap<&str, u64> = volumes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut used = Vec::new();
    let mut out = Vec::new();
    for s in subsystems {
        let mut namespaces = Vec::new();
        for ns in &s.namespaces {
            let key = ns.volume.to_lowercase();
            let Some(&size) = volumes.get(key.as_str()) else {
                tracing::warn!(nqn = %s.nqn, volume = %ns.volume, "namespace names a missing volume; skipped");
                continue;
            };
            let entry = match cache.open.get(&key) {
                Some(e) => {
                    e.0.set_size(size);
                    e.clone()
                }
                None => {
                    let path = state.pool.volume_path(&ns.volume);
                    match FileDevice::open(&path, size) {
                        Ok(d) => {
                            tracing::info!(volume = %ns.volume, direct = d.is_direct(), "volume opened for NVMe");
                            let e = (Arc::new(d), Arc::new(IoCounters::default()));
                            crate::telemetry::track_volume(&ns.volume, &e.1);
                            cache.open.insert(key.clone(), e.clone());
                            e
                        }
                        Err(err) => {
                            tracing::warn!(path = %path.display(), error = %err, "cannot open volume; namespace skipped");
                            continue;
                        }
                    }
                }
            };
            used.push(key);
            namespaces.push(NamespaceConfig {
                nsid: ns.nsid,
                uuid: *ns.uuid.as_bytes(),
                lba_shift: LBA_SHIFT,
                size_bytes: size,
                device: entry.0,
                counters: entry.1,
                label: ns.volume.clone(),
            });
        }
        out.push(SubsystemConfig {
            nqn: s.nqn.clone(),
            serial: s.serial.clone(),
            allow_any_host: s.allow_any_host,
            hosts: s.hosts.clone(),
            namespaces,
        });
    }
    // Close files of volumes no namespace uses any more.
    cache.open.retain(|k, _| used.contains(k));
    TargetConfig {
        subsystems: out,
        ports: Vec::new(),
    }
}
