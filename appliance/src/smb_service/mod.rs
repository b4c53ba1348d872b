//! The SMB front end, wired to the appliance's state: the SMB server of `quarry-smb` gets its
//! users and shares from the config database, its storage from the pool ([`posix_fs`]), and
//! reports its sessions to the live-session registry.

pub mod posix_fs;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use quarry_smb::server::{self, Backend, ServerConfig, SessionObserver, ShareConfig};
use quarry_smb::vfs::{FsError, ShareFs};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::sessions::{Protocol, SessionGuard};
use crate::state::{AppState, ConfigChange};
use posix_fs::{PosixShareConfig, PosixShareFs};

/// Serves SMB on `listeners` until `shutdown` is cancelled.
pub async fn run(
    listeners: Vec<TcpListener>,
    state: AppState,
    ciphers: Vec<quarry_smb::crypto::Cipher>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let backend = Arc::new(AppBackend {
        state: state.clone(),
        open_shares: Mutex::new(HashMap::new()),
    });
    // Share storage is cached per share; any share change drops the cache so a recreated or
    // reconfigured share is reopened.
    let mut changes = state.changes.subscribe();
    let b = backend.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                c = changes.recv() => match c {
                    Ok(ConfigChange::Shares) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => b.forget_shares(),
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    let config = ServerConfig {
        ciphers,
        machine_sid: machine_sid(&state)?,
        ..ServerConfig::new()
    };
    server::serve(listeners, backend, config, shutdown).await?;
    Ok(())
}

/// Settings key of the machine SID users' SIDs are formed under.
const MACHINE_SID_SETTING: &str = "smb.machine_sid";

/// The appliance's machine SID: made once, on the first start, and kept in the config DB,
/// since stored security descriptors name users by it.
fn machine_sid(state: &AppState) -> anyhow::Result<quarry_smb::security::Sid> {
    use anyhow::Context;
    if let Some(text) = state.db.setting(MACHINE_SID_SETTING)? {
        return quarry_smb::security::Sid::parse(&text)
            .with_context(|| format!("setting {MACHINE_SID_SETTING} holds no SID: {text:?}"));
    }
    let sid = quarry_smb::server::random_machine_sid();
    state.db.set_setting(
        &crate::db::Actor::system(),
        MACHINE_SID_SETTING,
        &sid.to_string(),
    )?;
    Ok(sid)
}

/// The appliance as the SMB server's [`Backend`].
struct AppBackend {
    state: AppState,
    open_shares: Mutex<HashMap<String, (bool, Arc<PosixShareFs>)>>,
}

impl AppBackend {
    fn forget_shares(&self) {
        self.open_shares
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Share `name`'s storage, opened once and cached (reopened when its read-only flag
    /// changes).
    fn posix_share(&self, name: &str) -> Result<Arc<PosixShareFs>, FsError> {
        let share = self
            .state
            .db
            .share(name)
            .map_err(|e| db_failed(format!("share {name}"), e))?
            .ok_or_else(|| FsError::NotFound(name.to_string()))?;
        let key = share.name.to_lowercase();
        let mut cache = self.open_shares.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((ro, fs)) = cache.get(&key) {
            if *ro == share.read_only {
                return Ok(fs.clone());
            }
        }
        let root = self.state.pool.share_root(&share.name);
        let quota = self.state.pool.share_quota(&share.name);
        let fs = Arc::new(PosixShareFs::open(
            &root,
            quota,
            PosixShareConfig {
                label: share.name.clone(),
                read_only: share.read_only,
            },
        )?);
        cache.insert(key, (share.read_only, fs.clone()));
        Ok(fs)
    }
}

/// A configuration-database failure as the SMB server's storage error.
fn db_failed(context: String, e: impl std::fmt::Display) -> FsError {
    FsError::Io {
        context,
        source: std::io::Error::other(e.to_string()),
    }
}

fn to_config(s: crate::db::model::Share) -> ShareConfig {
    ShareConfig {
        name: s.name,
        comment: s.comment,
        read_only: s.read_only,
        encrypt: s.encrypt,
        guest_ok: s.guest_ok,
        users: s.users,
        continuously_available: s.continuously_available,
    }
}

impl Backend for AppBackend {
    fn nt_hash(&self, user: &str) -> Option<[u8; 16]> {
        match self.state.db.smb_user(user) {
            Ok(u) => u.map(|u| u.nt_hash),
            Err(e) => {
                tracing::error!(error = %e, "SMB user lookup failed");
                None
            }
        }
    }

    fn user_rid(&self, user: &str) -> Option<u32> {
        match self.state.db.smb_user(user) {
            // Windows numbers accounts from 1000; row ids start at 1.
            Ok(u) => u.and_then(|u| u32::try_from(u.id).ok()?.checked_add(1000)),
            Err(e) => {
                tracing::error!(error = %e, "SMB user lookup failed");
                None
            }
        }
    }

    fn share(&self, name: &str) -> Option<ShareConfig> {
        match self.state.db.share(name) {
            Ok(s) => s.map(to_config),
            Err(e) => {
                tracing::error!(error = %e, "share lookup failed");
                None
            }
        }
    }

    fn shares(&self) -> Vec<ShareConfig> {
        match self.state.db.shares() {
            Ok(v) => v.into_iter().map(to_config).collect(),
            Err(e) => {
                tracing::error!(error = %e, "share list failed");
                Vec::new()
            }
        }
    }

    fn share_snapshots(&self, name: &str) -> Vec<i64> {
        match self.state.db.share_snapshot_times(name) {
            Ok(v) => {
                let mut times: Vec<i64> = v.into_iter().map(|(t, _)| t).collect();
                // Two snapshots in one second share a token: the newest answers for it.
                times.dedup();
                times
            }
            Err(e) => {
                tracing::error!(error = %e, share = name, "snapshot list failed");
                Vec::new()
            }
        }
    }

    fn persist_open(&self, open: &quarry_smb::server::durable::PersistedOpen) {
        if let Err(e) = self.state.db.persist_open(open) {
            tracing::error!(error = %e, share = open.share, "recording a persistent handle failed");
        }
    }

    fn persist_open_locks(
        &self,
        persistent_id: u64,
        locks: &[quarry_smb::server::durable::PersistedLock],
    ) {
        if let Err(e) = self.state.db.persist_open_locks(persistent_id, locks) {
            tracing::warn!(error = %e, "could not record a persistent handle's locks");
        }
    }

    fn forget_persisted_open(&self, persistent_id: u64) {
        if let Err(e) = self.state.db.forget_persisted_open(persistent_id) {
            tracing::error!(error = %e, "forgetting a persistent handle failed");
        }
    }

    fn persisted_opens(&self) -> Vec<quarry_smb::server::durable::PersistedOpen> {
        self.state.db.persisted_opens().unwrap_or_else(|e| {
            tracing::error!(error = %e, "reading persistent handles failed");
            Vec::new()
        })
    }

    fn snapshot_fs(&self, name: &str, at: i64) -> Result<Arc<dyn ShareFs>, FsError> {
        let snaps = self
            .state
            .db
            .share_snapshot_times(name)
            .map_err(|e| db_failed(format!("snapshots of share {name}"), e))?;
        let Some((_, rel)) = snaps.into_iter().find(|(t, _)| *t == at) else {
            return Err(FsError::NotFound(format!("{name} at {at}")));
        };
        let root = self.state.pool.snapshot_root(&rel);
        let fs = PosixShareFs::open(
            &root,
            self.state.pool.share_quota(name),
            PosixShareConfig {
                label: name.to_string(),
                read_only: true,
            },
        )?;
        Ok(Arc::new(fs))
    }

    fn share_fs(&self, name: &str) -> Result<Arc<dyn ShareFs>, FsError> {
        Ok(self.posix_share(name)?)
    }

    fn watch_outside_changes(
        &self,
        name: &str,
        sink: quarry_smb::notify::OutsideChangeSink,
    ) -> Option<Box<dyn quarry_smb::notify::OutsideWatcher>> {
        let watched = self
            .posix_share(name)
            .map_err(|e| e.to_string())
            .and_then(|fs| fs.watch_outside_changes(sink).map_err(|e| e.to_string()));
        match watched {
            Ok(w) => Some(Box::new(w)),
            Err(why) => {
                tracing::warn!(share = name, %why, "changes made outside SMB are not reported to CHANGE_NOTIFY");
                None
            }
        }
    }

    fn session_started(&self, user: &str, peer: SocketAddr) -> Box<dyn SessionObserver> {
        let (guard, cancel) =
            self.state
                .sessions
                .register(Protocol::Smb, user.to_string(), peer, String::new());
        Box::new(Observer { guard, cancel })
    }

    fn auth_failed(&self, user: Option<&str>, peer: SocketAddr) {
        crate::alerts::smb_login_failed(&self.state, user, peer);
    }
}

/// A live SMB session in the appliance's registry.
struct Observer {
    guard: SessionGuard,
    cancel: CancellationToken,
}

impl SessionObserver for Observer {
    fn add_read(&self, bytes: u64) {
        self.guard.add_read(bytes);
        crate::telemetry::smb_bytes(crate::telemetry::Direction::Read, bytes);
    }
    fn add_written(&self, bytes: u64) {
        self.guard.add_written(bytes);
        crate::telemetry::smb_bytes(crate::telemetry::Direction::Write, bytes);
    }
    fn set_target(&self, target: String) {
        self.guard.set_target(target);
    }
    fn channel_added(&self, traffic: Arc<server::ChannelTraffic>) {
        self.guard.add_channel(traffic);
    }
    fn cancelled(&self) -> CancellationToken {
        self.cancel.clone()
    }
    fn tree_observer(&self, share: &str) -> Option<Arc<dyn server::OpObserver>> {
        Some(Arc::new(TreeOps {
            share: crate::telemetry::share_ops(share),
            client: self.guard.counters(),
        }))
    }
    fn set_security(&self, security: server::SessionSecurity) {
        self.guard.set_security(crate::sessions::Security {
            dialect: dialect_name(security.dialect).to_string(),
            signing: security.signing.name().to_string(),
            cipher: security.cipher.map(|c| c.name().to_string()),
            encrypt_all: security.encrypt_all,
        });
    }
}

/// Counts a tree's requests for its share and its session's client.
struct TreeOps {
    share: Arc<crate::telemetry::ShareOps>,
    client: crate::sessions::ClientCounters,
}

impl server::OpObserver for TreeOps {
    fn completed(&self, op: server::OpKind, bytes: u64, elapsed: std::time::Duration, status: u32) {
        let failed = crate::telemetry::smb_op(&self.share, op, bytes, elapsed, status);
        self.client.op(failed);
    }
}

/// The dialect as admins write it (`3.1.1`).
fn dialect_name(dialect: u16) -> &'static str {
    match dialect {
        0x0202 => "2.0.2",
        0x0210 => "2.1",
        0x0300 => "3.0",
        0x0302 => "3.0.2",
        0x0311 => "3.1.1",
        _ => "unknown",
    }
}
