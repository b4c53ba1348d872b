//! The NVMe/TCP front end wired to the appliance: volumes from the pool become
//! namespaces, subsystems and allowed hosts come from the config DB, and every
//! `ConfigChange::{Volumes, Subsystems}` swaps in a new snapshot (raising Namespace
//! Attribute Changed notices on connected controllers).

mod device;
mod sessions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use quarry_nvmeof::target::{
    IoCounters, NamespaceConfig, SubsystemConfig, Target, TargetConfig, TargetIdentity,
};
use tokio::net::TcpListener;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

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

/// Serves NVMe/TCP on `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let cache = Arc::new(Mutex::new(VolumeCache::default()));
    let mut changes = state.changes.subscribe();
    let initial = load(&state, &cache).await?;
    let hooks = Arc::new(sessions::Hooks::new(state.sessions.clone()));
    let target = Target::new(initial, TargetIdentity::default(), Some(hooks));

    let reload_target = target.clone();
    let reload_state = state.clone();
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
            match load(&reload_state, &cache).await {
                Ok(cfg) => reload_target.update_config(cfg),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "NVMe config reload failed; keeping the previous one")
                }
            }
        }
    });

    quarry_nvmeof::transport::serve(listener, target, None, shutdown)
        .await
        .context("NVMe/TCP listener failed")
}

/// Reads subsystems and volumes from the DB (on the blocking pool) and opens the
/// volume files they name.
async fn load(state: &AppState, cache: &Arc<Mutex<VolumeCache>>) -> anyhow::Result<TargetConfig> {
    let state = state.clone();
    let cache = cache.clone();
    tokio::task::spawn_blocking(move || build_config(&state, &cache))
        .await
        .context("config loader panicked")?
}

fn build_config(state: &AppState, cache: &Mutex<VolumeCache>) -> anyhow::Result<TargetConfig> {
    let subsystems = state.db.subsystems().context("reading NVMe subsystems")?;
    let volumes: HashMap<String, u64> = state
        .db
        .volumes()
        .context("reading volumes")?
        .into_iter()
        .map(|v| (v.name.to_lowercase(), v.size_bytes))
        .collect();
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    let mut used = Vec::new();
    let mut out = Vec::new();
    for s in subsystems {
        let mut namespaces = Vec::new();
        for ns in &s.namespaces {
            let key = ns.volume.to_lowercase();
            let Some(&size) = volumes.get(&key) else {
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
                device: entry.0,
                counters: entry.1,
                label: ns.volume.clone(),
            });
        }
        out.push(SubsystemConfig {
            nqn: s.nqn,
            serial: s.serial,
            allow_any_host: s.allow_any_host,
            hosts: s.hosts,
            namespaces,
        });
    }
    // Close files of volumes no namespace uses any more.
    cache.open.retain(|k, _| used.contains(k));
    Ok(TargetConfig { subsystems: out })
}
