//! The state every service and API handler shares.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::api::ratelimit::LoginLimiter;
use crate::db::Db;
use crate::nvme_service::ports::NvmePorts;
use crate::pool::DirectoryPool;
use crate::sessions::SessionRegistry;

/// Capacity of the config-change channel; a receiver that lags this far behind gets
/// `Lagged` and should reload everything.
const CHANGE_CHANNEL_CAPACITY: usize = 256;

/// What kind of configuration changed (services reload the part they serve).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigChange {
    /// Users were added, removed, or changed password.
    Users,
    /// Shares were added, removed or changed.
    Shares,
    /// Volumes were added, removed or resized.
    Volumes,
    /// NVMe subsystems, hosts or namespaces changed.
    Subsystems,
}

/// Shared handles of the running appliance. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Config database.
    pub db: Db,
    /// The pool.
    pub pool: Arc<DirectoryPool>,
    /// Config-change notifications for the protocol services.
    pub changes: broadcast::Sender<ConfigChange>,
    /// Live sessions.
    pub sessions: SessionRegistry,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Failed-login throttle.
    pub login_limiter: Arc<LoginLimiter>,
    /// NVMe/TCP listeners (command-line and API-added).
    pub nvme_ports: Arc<NvmePorts>,
    /// The HTTPS certificate (set by `serve` once loaded; `None` in tests that build the
    /// state without a data directory of their own).
    pub tls: Option<Arc<crate::tls::TlsStore>>,
    /// The webhook's queue, configuration and last delivery (fed by the database's
    /// event hook, delivered by `webhook::run`).
    pub webhook: Arc<crate::webhook::Webhook>,
}

impl AppState {
    /// Builds the state over an opened database and pool.
    pub fn new(db: Db, pool: Arc<DirectoryPool>, data_dir: PathBuf) -> AppState {
        let (changes, _) = broadcast::channel(CHANGE_CHANNEL_CAPACITY);
        let webhook = Arc::new(crate::webhook::Webhook::default());
        webhook.attach(&db);
        AppState {
            db,
            pool,
            changes,
            sessions: SessionRegistry::default(),
            data_dir,
            login_limiter: Arc::new(LoginLimiter::default()),
            nvme_ports: Arc::new(NvmePorts::default()),
            tls: None,
            webhook,
        }
    }

    /// Tells the services that part of the configuration changed.
    pub fn notify(&self, change: ConfigChange) {
        // No receiver is fine: the service is not running (e.g. in API tests).
        let _ = self.changes.send(change);
    }
}
