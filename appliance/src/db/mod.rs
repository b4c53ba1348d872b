//! The config database: SQLite through rusqlite, WAL mode, foreign keys on, versioned
//! migrations. One connection behind a mutex: config changes are rare and small, and a
//! single writer makes "one API change = one transaction + one audit row" trivial.
//!
//! Every mutating method takes an [`Actor`] and writes its audit row inside the same
//! transaction, so the audit log can never disagree with the data.

pub mod audit;
pub mod events;
pub mod migrations;
pub mod model;
pub mod nvme;
pub mod nvme_listeners;
pub mod persistent_opens;
pub mod pool;
pub mod shares;
pub mod snapshots;
pub mod tokens;
pub mod users;
pub mod volumes;
pub mod webhook;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use rusqlite::{Connection, Transaction};

pub use model::*;

/// How long a statement waits for a lock held by another connection (e.g. `sqlite3` run
/// by an admin) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors from the config database, split by who is at fault.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The named object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The change conflicts with existing state (duplicate name, object in use).
    #[error("{0}")]
    Conflict(String),
    /// The request is well-formed but not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// SQLite failed.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Opening or migrating failed.
    #[error(transparent)]
    Migration(#[from] migrations::MigrationError),
    /// A filesystem side effect of the change failed (e.g. creating a share directory).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The background task running the query died.
    #[error("database task failed: {0}")]
    Task(String),
}

impl DbError {
    /// Maps SQLite constraint violations to [`DbError::Conflict`] with a readable reason.
    pub(crate) fn from_constraint(err: rusqlite::Error, what: &str) -> DbError {
        match &err {
            rusqlite::Error::SqliteFailure(e, _)
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                DbError::Conflict(what.to_string())
            }
            _ => DbError::Sqlite(err),
        }
    }

    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> DbError {
        DbError::Io {
            context: context.into(),
            source,
        }
    }
}

/// The alphabet shared by share, user and volume names, which become directory and file
/// names: 1..=`max` bytes of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
pub fn is_safe_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Result alias for database calls.
pub type DbResult<T> = Result<T, DbError>;

/// Called after an event is raised or resolved (see [`Db::set_event_hook`]). It runs on
/// the thread that raised the event, after the change committed and the connection was
/// released, so it must return at once (the webhook only queues the event).
pub type EventHook = Arc<dyn Fn(&events::Event) + Send + Sync>;

/// A cheap-to-clone handle to the config database.
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
    event_hook: Arc<RwLock<Option<EventHook>>>,
}

/// Current time as Unix seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Formats Unix seconds as RFC 3339 (UTC).
pub fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string())
}

impl Db {
    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open(path: &Path) -> DbResult<Db> {
        let conn = Connection::open(path)?;
        Self::setup(conn)
    }

    /// An in-memory database for tests.
    pub fn open_in_memory() -> DbResult<Db> {
        Self::setup(Connection::open_in_memory()?)
    }

    fn setup(mut conn: Connection) -> DbResult<Db> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // WAL: readers never block the writer; FULL: an acknowledged change survives a
        // power cut, not only a process kill.
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrations::migrate(&mut conn)?;
        Ok(Db {
            conn: Arc::new(Mutex::new(conn)),
            event_hook: Arc::new(RwLock::new(None)),
        })
    }

    /// Locks the connection. A poisoned lock is recovered: SQLite rolls back any
    /// transaction the panicking holder left open when it was dropped.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the function told about every event raised or resolved from now on (the
    /// webhook's queue), replacing any earlier one.
    pub fn set_event_hook(&self, hook: EventHook) {
        *self
            .event_hook
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(hook);
    }

    /// Tells the hook, if any, about events that were just raised or resolved. Call it
    /// after the change committed and without holding the connection.
    pub(crate) fn announce(&self, events: &[events::Event]) {
        let hook = self
            .event_hook
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if let Some(hook) = hook {
            for event in events {
                hook(event);
            }
        }
    }

    /// Runs `f` on a blocking thread so async callers never stall the reactor.
    pub async fn call<T, F>(&self, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db) -> DbResult<T> + Send + 'static,
    {
        let db = self.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| DbError::Task(e.to_string()))?
    }

    /// Runs one audited change: `f` and the audit row commit together or not at all.
    pub(crate) fn write<T>(
        &self,
        actor: &Actor,
        action: &str,
        target: &str,
        detail: serde_json::Value,
        f: impl FnOnce(&Transaction<'_>) -> DbResult<T>,
    ) -> DbResult<T> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let out = f(&tx)?;
        audit::record(&tx, actor, action, target, &detail)?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs `PRAGMA integrity_check`; `Ok(())` when the database is sound.
    pub fn integrity_check(&self) -> DbResult<()> {
        let conn = self.lock();
        let result: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if result == "ok" {
            Ok(())
        } else {
            Err(DbError::Invalid(format!(
                "integrity check failed: {result}"
            )))
        }
    }

    /// Reads a setting.
    pub fn setting(&self, key: &str) -> DbResult<Option<String>> {
        use rusqlite::OptionalExtension;
        let conn = self.lock();
        Ok(conn
            .query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// Writes a setting (audited).
    pub fn set_setting(&self, actor: &Actor, key: &str, value: &str) -> DbResult<()> {
        self.write(actor, "setting.set", key, serde_json::json!({}), |tx| {
            tx.execute(
                "INSERT INTO settings(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [key, value],
            )?;
            Ok(())
        })
    }
}
