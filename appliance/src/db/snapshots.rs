//! Snapshot records: read-only subvolume snapshots of shares and reflink copies of
//! volumes, each with the path of its data inside the pool.

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;
use utoipa::ToSchema;

use super::{is_safe_name, now, rfc3339, Actor, Db, DbError, DbResult};

/// Longest snapshot name.
pub const MAX_SNAPSHOT_NAME: usize = 64;

/// A snapshot as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Snapshot {
    /// Snapshot id.
    pub id: i64,
    /// The share it is of (exactly one of `share` and `volume` is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// The volume it is of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// Name, unique per share or volume.
    pub name: String,
    /// Where its data lives, relative to the pool root.
    #[serde(skip)]
    pub path: String,
    /// RFC 3339.
    pub created_at: String,
}

const SNAPSHOT_SELECT: &str = "SELECT s.id, sh.name, v.name, s.name, s.path, s.created_at
     FROM snapshots s LEFT JOIN shares sh ON sh.id = s.share_id LEFT JOIN volumes v ON v.id = s.volume_id";

fn snapshot_from_row(r: &Row<'_>) -> rusqlite::Result<Snapshot> {
    Ok(Snapshot {
        id: r.get(0)?,
        share: r.get(1)?,
        volume: r.get(2)?,
        name: r.get(3)?,
        path: r.get(4)?,
        created_at: rfc3339(r.get(5)?),
    })
}

/// What a snapshot is of.
#[derive(Debug, Clone)]
pub enum SnapshotOf {
    /// A share, by name.
    Share(String),
    /// A volume, by name.
    Volume(String),
}

/// Checks a snapshot name (it becomes a directory or file name).
pub fn validate_snapshot_name(name: &str) -> DbResult<()> {
    if is_safe_name(name, MAX_SNAPSHOT_NAME) {
        Ok(())
    } else {
        Err(DbError::Invalid(format!(
            "snapshot name must be 1-{MAX_SNAPSHOT_NAME} characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )))
    }
}

impl Db {
    /// Records a snapshot; `take` makes it (given the path relative to the pool root)
    /// inside the transaction, so a failed snapshot leaves no record.
    pub fn create_snapshot(
        &self,
        actor: &Actor,
        of: &SnapshotOf,
        name: &str,
        take: impl FnOnce(&str, &str) -> std::io::Result<()>,
    ) -> DbResult<Snapshot> {
        validate_snapshot_name(name)?;
        let (what, owner) = match of {
            SnapshotOf::Share(s) => ("share", s.as_str()),
            SnapshotOf::Volume(v) => ("volume", v.as_str()),
        };
        self.write(
            actor,
            "snapshot.create",
            owner,
            serde_json::json!({ "of": what, "name": name }),
            |tx| {
                let table = if what == "share" { "shares" } else { "volumes" };
                let row: Option<(i64, String)> = tx
                    .query_row(
                        &format!("SELECT id, name FROM {table} WHERE name = ?1"),
                        [owner],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?;
                let (id, canonical) =
                    row.ok_or_else(|| DbError::NotFound(format!("{what} {owner}")))?;
                let path = if what == "share" {
                    format!(".snapshots/shares/{}/{name}", canonical.to_ascii_lowercase())
                } else {
                    format!(".snapshots/volumes/{}/{name}.vol", canonical.to_ascii_lowercase())
                };
                let (share_id, volume_id) = if what == "share" {
                    (Some(id), None)
                } else {
                    (None, Some(id))
                };
                let dup: Option<i64> = tx
                    .query_row("SELECT id FROM snapshots WHERE path = ?1", [&path], |r| {
                        r.get(0)
                    })
                    .optional()?;
                if dup.is_some() {
                    return Err(DbError::Conflict(format!(
                        "{what} {owner} has a snapshot named {name} already"
                    )));
                }
                let t = now();
                tx.execute(
                    "INSERT INTO snapshots(share_id, volume_id, name, path, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![share_id, volume_id, name, path, t],
                )?;
                let sid = tx.last_insert_rowid();
                take(&canonical, &path).map_err(|e| DbError::io(format!("snapshotting {what} {owner}"), e))?;
                Ok(Snapshot {
                    id: sid,
                    share: (what == "share").then(|| canonical.clone()),
                    volume: (what == "volume").then(|| canonical.clone()),
                    name: name.to_string(),
                    path,
                    created_at: rfc3339(t),
                })
            },
        )
    }

    /// One snapshot.
    pub fn snapshot(&self, id: i64) -> DbResult<Option<Snapshot>> {
        Ok(self
            .lock()
            .query_row(
                &format!("{SNAPSHOT_SELECT} WHERE s.id = ?1"),
                [id],
                snapshot_from_row,
            )
            .optional()?)
    }

    /// Snapshots, oldest first, optionally of one share or volume.
    pub fn list_snapshots(
        &self,
        share: Option<&str>,
        volume: Option<&str>,
    ) -> DbResult<Vec<Snapshot>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "{SNAPSHOT_SELECT} WHERE (?1 IS NULL OR sh.name = ?1 COLLATE NOCASE)
               AND (?2 IS NULL OR v.name = ?2 COLLATE NOCASE) ORDER BY s.id"
        ))?;
        let rows = stmt.query_map(params![share, volume], snapshot_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// When each snapshot of share `share` was taken (seconds since the epoch) and where
    /// its data lives, newest first: the share's previous versions over SMB.
    pub fn share_snapshot_times(&self, share: &str) -> DbResult<Vec<(i64, String)>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT s.created_at, s.path FROM snapshots s JOIN shares sh ON sh.id = s.share_id
              WHERE sh.name = ?1 COLLATE NOCASE ORDER BY s.created_at DESC, s.id DESC",
        )?;
        let rows = stmt.query_map(params![share], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Deletes a snapshot record; `remove` deletes its data inside the transaction.
    pub fn delete_snapshot(
        &self,
        actor: &Actor,
        id: i64,
        remove: impl FnOnce(&Snapshot) -> std::io::Result<()>,
    ) -> DbResult<Snapshot> {
        let snap = self
            .snapshot(id)?
            .ok_or_else(|| DbError::NotFound(format!("snapshot {id}")))?;
        self.write(
            actor,
            "snapshot.delete",
            &snap.name,
            serde_json::json!({ "id": id }),
            |tx| {
                tx.execute("DELETE FROM snapshots WHERE id = ?1", [id])?;
                remove(&snap).map_err(|e| DbError::io(format!("deleting snapshot {id}"), e))?;
                Ok(snap.clone())
            },
        )
    }

    /// Records a restore (audited).
    pub fn record_restore(&self, actor: &Actor, snap: &Snapshot) -> DbResult<()> {
        self.write(
            actor,
            "snapshot.restore",
            &snap.name,
            serde_json::json!({ "id": snap.id, "share": snap.share, "volume": snap.volume }),
            |_| Ok(()),
        )
    }
}

/// Prefix of the names scheduled snapshots get; retention only prunes these.
pub const AUTO_PREFIX: &str = "auto-";

/// A snapshot schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Schedule {
    /// Schedule id.
    pub id: i64,
    /// The share it snapshots (exactly one of `share` and `volume` is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// The volume it snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// Seconds between snapshots.
    pub interval_s: u64,
    /// Scheduled snapshots kept; older ones are deleted.
    pub keep: u32,
    /// Unix seconds of the last run (0 = never).
    pub last_run: i64,
}

const SCHEDULE_SELECT: &str = "SELECT c.id, sh.name, v.name, c.interval_s, c.keep, c.last_run
     FROM snapshot_schedules c LEFT JOIN shares sh ON sh.id = c.share_id LEFT JOIN volumes v ON v.id = c.volume_id";

fn schedule_from_row(r: &Row<'_>) -> rusqlite::Result<Schedule> {
    Ok(Schedule {
        id: r.get(0)?,
        share: r.get(1)?,
        volume: r.get(2)?,
        interval_s: r.get::<_, i64>(3)?.max(0) as u64,
        keep: r.get::<_, i64>(4)?.clamp(0, i64::from(u32::MAX)) as u32,
        last_run: r.get(5)?,
    })
}

impl Db {
    /// Adds a snapshot schedule (audited).
    pub fn create_schedule(
        &self,
        actor: &Actor,
        of: &SnapshotOf,
        interval_s: u64,
        keep: u32,
    ) -> DbResult<Schedule> {
        let (what, owner) = match of {
            SnapshotOf::Share(s) => ("share", s.as_str()),
            SnapshotOf::Volume(v) => ("volume", v.as_str()),
        };
        let id = self.write(
            actor,
            "snapshot.schedule.create",
            owner,
            serde_json::json!({ "of": what, "interval_s": interval_s, "keep": keep }),
            |tx| {
                let table = if what == "share" { "shares" } else { "volumes" };
                let id: Option<i64> = tx
                    .query_row(&format!("SELECT id FROM {table} WHERE name = ?1"), [owner], |r| r.get(0))
                    .optional()?;
                let id = id.ok_or_else(|| DbError::NotFound(format!("{what} {owner}")))?;
                let (share_id, volume_id) = if what == "share" { (Some(id), None) } else { (None, Some(id)) };
                tx.execute(
                    "INSERT INTO snapshot_schedules(share_id, volume_id, interval_s, keep, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![share_id, volume_id, interval_s.min(i64::MAX as u64) as i64, keep, now()],
                )?;
                Ok(tx.last_insert_rowid())
            },
        )?;
        self.list_schedules()?
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| DbError::NotFound(format!("schedule {id}")))
    }

    /// Every snapshot schedule.
    pub fn list_schedules(&self) -> DbResult<Vec<Schedule>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!("{SCHEDULE_SELECT} ORDER BY c.id"))?;
        let rows = stmt.query_map([], schedule_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Deletes a schedule (its snapshots stay).
    pub fn delete_schedule(&self, actor: &Actor, id: i64) -> DbResult<()> {
        self.write(
            actor,
            "snapshot.schedule.delete",
            &id.to_string(),
            serde_json::json!({}),
            |tx| {
                let n = tx.execute("DELETE FROM snapshot_schedules WHERE id = ?1", [id])?;
                if n == 0 {
                    return Err(DbError::NotFound(format!("schedule {id}")));
                }
                Ok(())
            },
        )
    }

    /// Records that a schedule ran at `at`.
    pub fn schedule_ran(&self, id: i64, at: i64) -> DbResult<()> {
        self.lock().execute(
            "UPDATE snapshot_schedules SET last_run = ?1 WHERE id = ?2",
            params![at, id],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_records() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        db.create_volume(&a, "Vol1", 1 << 20, || Ok(())).unwrap();
        let of = SnapshotOf::Volume("vol1".into());
        assert!(db.create_snapshot(&a, &of, "../x", |_, _| Ok(())).is_err());
        assert!(matches!(
            db.create_snapshot(&a, &SnapshotOf::Share("none".into()), "s", |_, _| Ok(())),
            Err(DbError::NotFound(_))
        ));
        assert!(db
            .create_snapshot(&a, &of, "s1", |_, _| Err(std::io::Error::other("no")))
            .is_err());
        let s = db.create_snapshot(&a, &of, "s1", |_, _| Ok(())).unwrap();
        assert_eq!(s.path, ".snapshots/volumes/vol1/s1.vol");
        assert_eq!(s.volume.as_deref(), Some("Vol1"));
        assert!(matches!(
            db.create_snapshot(&a, &of, "s1", |_, _| Ok(())),
            Err(DbError::Conflict(_))
        ));
        assert_eq!(db.list_snapshots(None, Some("VOL1")).unwrap().len(), 1);
        assert_eq!(db.list_snapshots(Some("x"), None).unwrap().len(), 0);
        db.delete_snapshot(&a, s.id, |_| Ok(())).unwrap();
        assert!(db.snapshot(s.id).unwrap().is_none());
        let c = db.create_schedule(&a, &of, 3600, 24).unwrap();
        assert_eq!(
            (c.volume.as_deref(), c.interval_s, c.keep, c.last_run),
            (Some("Vol1"), 3600, 24, 0)
        );
        db.schedule_ran(c.id, 5).unwrap();
        assert_eq!(db.list_schedules().unwrap()[0].last_run, 5);
        db.delete_schedule(&a, c.id).unwrap();
        assert!(matches!(
            db.delete_schedule(&a, c.id),
            Err(DbError::NotFound(_))
        ));
    }
}
