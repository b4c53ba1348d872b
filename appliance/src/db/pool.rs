//! The managed pool's records: the pool itself (identified by its btrfs UUID), the
//! devices discovery has seen with their health, and long-running jobs.

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;
use utoipa::ToSchema;

use super::{now, Actor, Db, DbError, DbResult};

/// The managed pool as recorded when it was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRecord {
    /// btrfs file system UUID.
    pub uuid: String,
    /// btrfs label.
    pub label: String,
    /// Data profile (`single`, `raid0`, `raid1`, `raid10`).
    pub profile: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// State of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting to start.
    Queued,
    /// Running.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished with an error.
    Failed,
}

impl JobState {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> JobState {
        match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "succeeded" => JobState::Succeeded,
            _ => JobState::Failed,
        }
    }
}

/// A long-running operation (pool creation, device replace, scrub, ...).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Job {
    /// Job id.
    pub id: i64,
    /// What it does (`pool.create`, `pool.replace`, `pool.scrub`, ...).
    pub kind: String,
    /// Where it is.
    pub state: JobState,
    /// 0.0 to 1.0.
    pub progress: f64,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Kind-specific details and results (for a scrub: the error counts).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
}

fn job_from_row(r: &Row<'_>) -> rusqlite::Result<Job> {
    let state: String = r.get(2)?;
    let detail: String = r.get(5)?;
    Ok(Job {
        id: r.get(0)?,
        kind: r.get(1)?,
        state: JobState::parse(&state),
        progress: r.get::<_, f64>(3)?.clamp(0.0, 1.0),
        error: r.get(4)?,
        detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
        created_at: r.get(6)?,
        updated_at: r.get(7)?,
    })
}

const JOB_COLUMNS: &str = "id, kind, state, progress, error, detail, created_at, updated_at";

/// Most jobs one listing returns (newest first).
pub const MAX_JOBS_LISTED: u32 = 200;

impl Db {
    /// The managed pool, if one was created.
    pub fn pool_record(&self) -> DbResult<Option<PoolRecord>> {
        Ok(self
            .lock()
            .query_row(
                "SELECT uuid, label, profile, created_at FROM pool WHERE id = 1",
                [],
                |r| {
                    Ok(PoolRecord {
                        uuid: r.get(0)?,
                        label: r.get(1)?,
                        profile: r.get(2)?,
                        created_at: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }

    /// Records the managed pool (audited). Refused when one is recorded already.
    pub fn record_pool(&self, actor: &Actor, rec: &PoolRecord) -> DbResult<()> {
        self.write(
            actor,
            "pool.create",
            &rec.uuid,
            serde_json::json!({ "profile": rec.profile, "label": rec.label }),
            |tx| {
                tx.execute(
                    "INSERT INTO pool(id, kind, uuid, label, profile, created_at) VALUES (1, 'btrfs', ?1, ?2, ?3, ?4)",
                    params![rec.uuid, rec.label, rec.profile, rec.created_at],
                )
                .map_err(|e| DbError::from_constraint(e, "a managed pool exists already"))?;
                Ok(())
            },
        )
    }

    /// Starts a job record in state `queued` (audited: a job is an admin's change).
    pub fn create_job(
        &self,
        actor: &Actor,
        kind: &str,
        detail: serde_json::Value,
    ) -> DbResult<Job> {
        let d = detail.to_string();
        self.write(actor, kind, "job", detail.clone(), |tx| {
            let t = now();
            tx.execute(
                "INSERT INTO jobs(kind, state, progress, detail, created_at, updated_at) VALUES (?1, 'queued', 0, ?2, ?3, ?3)",
                params![kind, d, t],
            )?;
            Ok(Job {
                id: tx.last_insert_rowid(),
                kind: kind.to_string(),
                state: JobState::Queued,
                progress: 0.0,
                error: None,
                detail,
                created_at: t,
                updated_at: t,
            })
        })
    }

    /// Updates a job's state, progress, error and (when given) detail.
    pub fn update_job(
        &self,
        id: i64,
        state: JobState,
        progress: f64,
        error: Option<&str>,
        detail: Option<&serde_json::Value>,
    ) -> DbResult<()> {
        let conn = self.lock();
        conn.execute(
            "UPDATE jobs SET state = ?1, progress = ?2, error = ?3, updated_at = ?4,
                 detail = COALESCE(?5, detail) WHERE id = ?6",
            params![
                state.as_str(),
                progress.clamp(0.0, 1.0),
                error,
                now(),
                detail.map(|d| d.to_string()),
                id
            ],
        )?;
        Ok(())
    }

    /// One job.
    pub fn job(&self, id: i64) -> DbResult<Option<Job>> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"),
                [id],
                job_from_row,
            )
            .optional()?)
    }

    /// The newest jobs, newest first.
    pub fn list_jobs(&self, limit: u32) -> DbResult<Vec<Job>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs ORDER BY id DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map([limit.min(MAX_JOBS_LISTED)], job_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Jobs left queued or running by a previous process (it stopped or crashed).
    pub fn unfinished_jobs(&self) -> DbResult<Vec<Job>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ('queued', 'running') ORDER BY id"
        ))?;
        let rows = stmt.query_map([], job_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Whether a job of one of `kinds` is queued or running.
    pub fn job_active(&self, kinds: &[&str]) -> DbResult<bool> {
        Ok(self
            .unfinished_jobs()?
            .iter()
            .any(|j| kinds.contains(&j.kind.as_str())))
    }

    /// Records what discovery found about a device, with its health as JSON.
    pub fn upsert_device(
        &self,
        d: &crate::pool::devices::BlockDevice,
        health: &serde_json::Value,
    ) -> DbResult<()> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO devices(path, kind, model, serial, firmware, size_bytes, lba_bytes, health, seen_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(path) DO UPDATE SET kind = excluded.kind, model = excluded.model,
                 serial = excluded.serial, firmware = excluded.firmware,
                 size_bytes = excluded.size_bytes, lba_bytes = excluded.lba_bytes,
                 health = excluded.health, seen_at = excluded.seen_at",
            params![
                d.path,
                d.kind.as_str(),
                d.model,
                d.serial,
                d.firmware,
                d.size_bytes as i64,
                d.lba_bytes as i64,
                health.to_string(),
                now()
            ],
        )?;
        Ok(())
    }

    /// Health JSON last recorded for a device path.
    pub fn device_health(&self, path: &str) -> DbResult<Option<serde_json::Value>> {
        let h: Option<String> = self
            .lock()
            .query_row("SELECT health FROM devices WHERE path = ?1", [path], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(h.and_then(|s| serde_json::from_str(&s).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_record_and_jobs() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        assert!(db.pool_record().unwrap().is_none());
        let rec = PoolRecord {
            uuid: "u".into(),
            label: "quarry".into(),
            profile: "raid10".into(),
            created_at: 1,
        };
        db.record_pool(&a, &rec).unwrap();
        assert!(matches!(
            db.record_pool(&a, &rec),
            Err(DbError::Conflict(_))
        ));
        assert_eq!(db.pool_record().unwrap(), Some(rec));
        let j = db
            .create_job(&a, "pool.scrub", serde_json::json!({}))
            .unwrap();
        assert!(db.job_active(&["pool.scrub"]).unwrap());
        db.update_job(j.id, JobState::Running, 0.5, None, None)
            .unwrap();
        db.update_job(
            j.id,
            JobState::Succeeded,
            1.0,
            None,
            Some(&serde_json::json!({"corrected": 1})),
        )
        .unwrap();
        let j = db.job(j.id).unwrap().unwrap();
        assert_eq!(j.state, JobState::Succeeded);
        assert_eq!(j.detail["corrected"], 1);
        assert!(!db.job_active(&["pool.scrub"]).unwrap());
        assert_eq!(db.list_jobs(10).unwrap().len(), 1);
    }
}
