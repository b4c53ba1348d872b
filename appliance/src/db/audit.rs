//! The audit log: who changed what, when, from where. Written only inside the
//! transaction of the change it describes (see `Db::write`).

use rusqlite::{params, Transaction};

use super::{now, rfc3339, Actor, AuditEntry, Db, DbResult};

/// Most rows one listing returns.
pub const MAX_PAGE: u32 = 1000;

pub(crate) fn record(
    tx: &Transaction<'_>,
    actor: &Actor,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> DbResult<()> {
    tx.execute(
        "INSERT INTO audit_log(at, actor, remote, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![now(), actor.user, actor.remote, action, target, detail.to_string()],
    )?;
    Ok(())
}

impl Db {
    /// Newest audit rows first, at most `limit` (capped at [`MAX_PAGE`]), older than
    /// `before` when given (for paging).
    pub fn audit(&self, limit: u32, before: Option<i64>) -> DbResult<Vec<AuditEntry>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT id, at, actor, remote, action, target, detail FROM audit_log
             WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(
            params![before.unwrap_or(i64::MAX), limit.min(MAX_PAGE)],
            |r| {
                let detail: String = r.get(6)?;
                Ok(AuditEntry {
                    id: r.get(0)?,
                    at: rfc3339(r.get(1)?),
                    actor: r.get(2)?,
                    remote: r.get(3)?,
                    action: r.get(4)?,
                    target: r.get(5)?,
                    detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
                })
            },
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}
