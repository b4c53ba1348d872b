//! Versioned schema migrations. `PRAGMA user_version` holds the number of migrations
//! applied; each migration runs in its own transaction, so a crash mid-upgrade leaves the
//! previous version intact. Never edit a migration that has shipped: append a new one.

use rusqlite::Connection;

/// Every migration, in order. Index + 1 is the schema version it produces.
const MIGRATIONS: &[&str] = &[
    // 1: users, tokens, shares, volumes, NVMe subsystems, audit log.
    r#"
    CREATE TABLE users (
        id            INTEGER PRIMARY KEY,
        name          TEXT NOT NULL UNIQUE COLLATE NOCASE,
        role          TEXT CHECK (role IN ('admin', 'operator', 'viewer')),
        password_hash TEXT NOT NULL,
        nt_hash       BLOB NOT NULL CHECK (length(nt_hash) = 16),
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL
    );
    CREATE TABLE api_tokens (
        id           INTEGER PRIMARY KEY,
        user_id      INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        name         TEXT NOT NULL,
        kind         TEXT NOT NULL CHECK (kind IN ('api', 'session')),
        digest       TEXT NOT NULL UNIQUE,
        csrf         TEXT,
        created_at   INTEGER NOT NULL,
        expires_at   INTEGER,
        last_used_at INTEGER
    );
    CREATE INDEX api_tokens_user ON api_tokens(user_id);
    CREATE TABLE shares (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL UNIQUE COLLATE NOCASE,
        dataset     TEXT NOT NULL UNIQUE,
        comment     TEXT NOT NULL DEFAULT '',
        quota_bytes INTEGER CHECK (quota_bytes IS NULL OR quota_bytes > 0),
        used_bytes  INTEGER NOT NULL DEFAULT 0,
        read_only   INTEGER NOT NULL DEFAULT 0,
        encrypt     INTEGER NOT NULL DEFAULT 0,
        guest_ok    INTEGER NOT NULL DEFAULT 0,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    CREATE TABLE share_users (
        share_id INTEGER NOT NULL REFERENCES shares(id) ON DELETE CASCADE,
        user_id  INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        PRIMARY KEY (share_id, user_id)
    );
    CREATE TABLE volumes (
        id         INTEGER PRIMARY KEY,
        name       TEXT NOT NULL UNIQUE COLLATE NOCASE,
        size_bytes INTEGER NOT NULL CHECK (size_bytes > 0),
        uuid       TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE nvme_subsystems (
        id             INTEGER PRIMARY KEY,
        nqn            TEXT NOT NULL UNIQUE,
        serial         TEXT NOT NULL,
        allow_any_host INTEGER NOT NULL DEFAULT 0,
        created_at     INTEGER NOT NULL
    );
    CREATE TABLE nvme_hosts (
        subsystem_id INTEGER NOT NULL REFERENCES nvme_subsystems(id) ON DELETE CASCADE,
        host_nqn     TEXT NOT NULL,
        PRIMARY KEY (subsystem_id, host_nqn)
    );
    CREATE TABLE nvme_namespaces (
        subsystem_id INTEGER NOT NULL REFERENCES nvme_subsystems(id) ON DELETE CASCADE,
        nsid         INTEGER NOT NULL CHECK (nsid > 0),
        volume_id    INTEGER NOT NULL REFERENCES volumes(id) ON DELETE RESTRICT,
        uuid         TEXT NOT NULL UNIQUE,
        PRIMARY KEY (subsystem_id, nsid)
    );
    CREATE TABLE audit_log (
        id     INTEGER PRIMARY KEY,
        at     INTEGER NOT NULL,
        actor  TEXT NOT NULL,
        remote TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX audit_log_at ON audit_log(at);
    CREATE TABLE settings (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // 2: events and alerts (pool health, device health, capacity, failed logins).
    r#"
    CREATE TABLE events (
        id          INTEGER PRIMARY KEY,
        at          INTEGER NOT NULL,
        severity    TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
        kind        TEXT NOT NULL,
        subject     TEXT NOT NULL,
        message     TEXT NOT NULL,
        acked_at    INTEGER,
        acked_by    TEXT,
        resolved_at INTEGER
    );
    CREATE INDEX events_open ON events(kind, subject) WHERE resolved_at IS NULL;
    "#,
    // 3: NVMe-oF listeners (ports) added through the API, beyond the command-line ones.
    r#"
    CREATE TABLE nvme_listeners (
        id         INTEGER PRIMARY KEY,
        transport  TEXT NOT NULL CHECK (transport IN ('tcp', 'rdma')),
        address    TEXT NOT NULL,
        port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
        advertise  TEXT,
        created_at INTEGER NOT NULL,
        UNIQUE (transport, address, port)
    );
    "#,
    // 4: the managed pool, discovered devices, long-running jobs, snapshots.
    r#"
    CREATE TABLE pool (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        kind       TEXT NOT NULL CHECK (kind IN ('btrfs')),
        uuid       TEXT NOT NULL,
        label      TEXT NOT NULL,
        profile    TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE devices (
        path       TEXT PRIMARY KEY,
        kind       TEXT NOT NULL,
        model      TEXT NOT NULL DEFAULT '',
        serial     TEXT NOT NULL DEFAULT '',
        firmware   TEXT NOT NULL DEFAULT '',
        size_bytes INTEGER NOT NULL DEFAULT 0,
        lba_bytes  INTEGER NOT NULL DEFAULT 512,
        health     TEXT NOT NULL DEFAULT '{}',
        seen_at    INTEGER NOT NULL
    );
    CREATE TABLE jobs (
        id         INTEGER PRIMARY KEY,
        kind       TEXT NOT NULL,
        state      TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
        progress   REAL NOT NULL DEFAULT 0,
        error      TEXT,
        detail     TEXT NOT NULL DEFAULT '{}',
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE snapshots (
        id         INTEGER PRIMARY KEY,
        share_id   INTEGER REFERENCES shares(id) ON DELETE CASCADE,
        volume_id  INTEGER REFERENCES volumes(id) ON DELETE CASCADE,
        name       TEXT NOT NULL,
        path       TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        CHECK ((share_id IS NULL) <> (volume_id IS NULL))
    );
    CREATE TABLE snapshot_schedules (
        id         INTEGER PRIMARY KEY,
        share_id   INTEGER REFERENCES shares(id) ON DELETE CASCADE,
        volume_id  INTEGER REFERENCES volumes(id) ON DELETE CASCADE,
        interval_s INTEGER NOT NULL CHECK (interval_s > 0),
        keep       INTEGER NOT NULL CHECK (keep > 0),
        last_run   INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        CHECK ((share_id IS NULL) <> (volume_id IS NULL))
    );
    "#,
    // 9: continuously available shares and the persistent handles they keep.
    r#"
    ALTER TABLE shares ADD COLUMN continuously_available INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE persistent_opens (
        persistent_id INTEGER PRIMARY KEY,
        share         TEXT NOT NULL,
        path          TEXT NOT NULL,
        user_name     TEXT NOT NULL,
        client_guid   BLOB NOT NULL,
        create_guid   BLOB NOT NULL,
        access        INTEGER NOT NULL,
        share_access  INTEGER NOT NULL,
        timeout_ms    INTEGER NOT NULL,
        created_at    INTEGER NOT NULL
    );
    "#,
    // 10: the byte-range locks persistent handles hold.
    r#"
    CREATE TABLE persistent_open_locks (
        persistent_id INTEGER NOT NULL REFERENCES persistent_opens(persistent_id)
                      ON DELETE CASCADE,
        seq           INTEGER NOT NULL,
        offset        INTEGER NOT NULL,
        length        INTEGER NOT NULL,
        exclusive     INTEGER NOT NULL,
        PRIMARY KEY (persistent_id, seq)
    );
    "#,
];

/// The schema version this binary writes.
pub const LATEST: usize = MIGRATIONS.len();

/// Errors while migrating.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The database was written by a newer Quarry: refuse rather than corrupt it.
    #[error("database schema version {found} is newer than this binary supports ({LATEST}); upgrade quarry")]
    TooNew {
        /// Version found on disk.
        found: usize,
    },
    /// SQLite failed while applying a migration.
    #[error("applying schema migration {version}: {source}")]
    Apply {
        /// The migration being applied.
        version: usize,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// Reading the schema version failed.
    #[error("reading schema version: {0}")]
    Read(#[from] rusqlite::Error),
}

/// Brings the schema up to [`LATEST`], one transaction per migration.
pub fn migrate(conn: &mut Connection) -> Result<usize, MigrationError> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let current = usize::try_from(current).unwrap_or(0);
    if current > LATEST {
        return Err(MigrationError::TooNew { found: current });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let version = index + 1;
        let apply = |conn: &mut Connection| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", version as i64)?;
            tx.commit()
        };
        apply(conn).map_err(|source| MigrationError::Apply { version, source })?;
    }
    Ok(LATEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_fresh_db_and_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, LATEST);
    }

    #[test]
    fn refuses_newer_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(MigrationError::TooNew { found: 999 })
        ));
    }
}
