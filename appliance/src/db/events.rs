//! Events and alerts: things an admin should see (a degraded pool, a wearing drive, a
//! share near its quota, failed logins). A *condition* event (kind + subject, e.g.
//! `pool.degraded` on `pool`) is raised once while the condition lasts and resolved when
//! it clears, so a poller may call [`Db::raise_condition`] on every tick without
//! flooding the list. One-off events (a failed login) use [`Db::raise_event`].
//! Acknowledging is an admin decision and is audited; raising is not (the appliance
//! raises events, nobody changes configuration).

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{now, rfc3339, Actor, Db, DbError, DbResult};

/// Most rows one listing returns.
pub const MAX_PAGE: u32 = 1000;

/// Longest message kept; longer ones are cut (events come from the appliance, but a
/// device model string or a user name inside a message must not grow the DB unbounded).
const MAX_MESSAGE: usize = 1024;

/// Most events kept; the oldest beyond this are deleted as new ones arrive, so a flood
/// of failed logins cannot grow the database without bound.
pub const MAX_KEPT: i64 = 10_000;

/// How urgent an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing (a scrub finished, a device was added).
    Info,
    /// Needs attention soon (a share at 90 % of its quota, failed logins).
    Warning,
    /// Needs attention now (pool degraded, a device failing).
    Critical,
}

impl Severity {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    fn parse(s: &str) -> Severity {
        match s {
            "critical" => Severity::Critical,
            "warning" => Severity::Warning,
            _ => Severity::Info,
        }
    }
}

/// One event as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Event {
    /// Row id, increasing.
    pub id: i64,
    /// When it was raised (RFC 3339).
    pub at: String,
    /// How urgent.
    pub severity: Severity,
    /// What happened, dotted (`pool.degraded`, `device.health`, `share.quota`, `auth.failed`).
    pub kind: String,
    /// What it happened to (`pool`, a device path, a share name, a user name).
    pub subject: String,
    /// One readable sentence.
    pub message: String,
    /// Whether an admin has acknowledged it.
    pub acked: bool,
    /// Who acknowledged it.
    pub acked_by: Option<String>,
    /// When it was acknowledged (RFC 3339).
    pub acked_at: Option<String>,
    /// When the condition cleared (RFC 3339); `None` while it lasts or for one-off events.
    pub resolved_at: Option<String>,
}

/// Which events a listing returns.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventFilter {
    /// Only events not yet acknowledged.
    pub unacked_only: bool,
    /// Only events at or above this severity.
    pub min_severity: Option<Severity>,
}

fn cut(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Columns [`event_row`] reads, in order.
const COLUMNS: &str = "id, at, severity, kind, subject, message, acked_at, acked_by, resolved_at";

fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let severity: String = r.get(2)?;
    let acked_at: Option<i64> = r.get(6)?;
    let resolved_at: Option<i64> = r.get(8)?;
    Ok(Event {
        id: r.get(0)?,
        at: rfc3339(r.get(1)?),
        severity: Severity::parse(&severity),
        kind: r.get(3)?,
        subject: r.get(4)?,
        message: r.get(5)?,
        acked: acked_at.is_some(),
        acked_by: r.get(7)?,
        acked_at: acked_at.map(rfc3339),
        resolved_at: resolved_at.map(rfc3339),
    })
}

fn insert(
    conn: &rusqlite::Connection,
    severity: Severity,
    kind: &str,
    subject: &str,
    message: &str,
) -> DbResult<Event> {
    let event = conn.query_row(
        &format!(
            "INSERT INTO events(at, severity, kind, subject, message) VALUES (?1, ?2, ?3, ?4, ?5)
             RETURNING {COLUMNS}"
        ),
        params![now(), severity.as_str(), kind, cut(subject), cut(message)],
        event_row,
    )?;
    conn.execute("DELETE FROM events WHERE id <= ?1", [event.id - MAX_KEPT])?;
    Ok(event)
}

impl Db {
    /// Records a one-off event and returns its id.
    pub fn raise_event(
        &self,
        severity: Severity,
        kind: &str,
        subject: &str,
        message: &str,
    ) -> DbResult<i64> {
        let event = insert(&self.lock(), severity, kind, subject, message)?;
        self.announce(std::slice::from_ref(&event));
        Ok(event.id)
    }

    /// Raises a condition event unless one with the same kind and subject is still open;
    /// returns the new event's id, or `None` when the condition was already raised.
    pub fn raise_condition(
        &self,
        severity: Severity,
        kind: &str,
        subject: &str,
        message: &str,
    ) -> DbResult<Option<i64>> {
        let event = {
            let mut conn = self.lock();
            let tx = conn.transaction()?;
            let open: Option<i64> = tx
                .query_row(
                    "SELECT id FROM events WHERE kind = ?1 AND subject = ?2 AND resolved_at IS NULL
                 ORDER BY id DESC LIMIT 1",
                    params![kind, subject],
                    |r| r.get(0),
                )
                .optional()?;
            if open.is_some() {
                return Ok(None);
            }
            let event = insert(&tx, severity, kind, subject, message)?;
            tx.commit()?;
            event
        };
        self.announce(std::slice::from_ref(&event));
        Ok(Some(event.id))
    }

    /// Marks the open condition events of this kind and subject as cleared; returns how
    /// many were open.
    pub fn resolve_condition(&self, kind: &str, subject: &str) -> DbResult<usize> {
        let resolved = {
            let conn = self.lock();
            let mut stmt = conn.prepare(&format!(
                "UPDATE events SET resolved_at = ?1
                 WHERE kind = ?2 AND subject = ?3 AND resolved_at IS NULL
                 RETURNING {COLUMNS}"
            ))?;
            let rows = stmt.query_map(params![now(), kind, subject], event_row)?;
            rows.collect::<Result<Vec<_>, _>>()?
        };
        self.announce(&resolved);
        Ok(resolved.len())
    }

    /// Newest events first, at most `limit` (capped at [`MAX_PAGE`]), older than
    /// `before` when given.
    pub fn events(
        &self,
        filter: EventFilter,
        limit: u32,
        before: Option<i64>,
    ) -> DbResult<Vec<Event>> {
        let min_rank = filter.min_severity.unwrap_or(Severity::Info) as i64;
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS}
             FROM events
             WHERE id < ?1 AND (?2 = 0 OR acked_at IS NULL)
               AND (CASE severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END) >= ?3
             ORDER BY id DESC LIMIT ?4"
        ))?;
        let rows = stmt.query_map(
            params![
                before.unwrap_or(i64::MAX),
                filter.unacked_only,
                min_rank,
                limit.min(MAX_PAGE)
            ],
            event_row,
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// How many events are not yet acknowledged, by severity (info, warning, critical).
    pub fn unacked_event_counts(&self) -> DbResult<[u64; 3]> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT severity, count(*) FROM events WHERE acked_at IS NULL GROUP BY severity",
        )?;
        let mut counts = [0u64; 3];
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (severity, n) = row?;
            if let Some(count) = counts.get_mut(Severity::parse(&severity) as usize) {
                *count = u64::try_from(n).unwrap_or(0);
            }
        }
        Ok(counts)
    }

    /// Acknowledges an event (audited). Acknowledging twice is allowed and keeps the
    /// first acknowledgement.
    pub fn ack_event(&self, actor: &Actor, id: i64) -> DbResult<()> {
        self.write(actor, "event.ack", &id.to_string(), serde_json::json!({}), |tx| {
            let found = tx.execute(
                "UPDATE events SET acked_at = COALESCE(acked_at, ?1), acked_by = COALESCE(acked_by, ?2)
                 WHERE id = ?3",
                params![now(), actor.user, id],
            )?;
            if found == 0 {
                return Err(DbError::NotFound(format!("event {id}")));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin() -> Actor {
        Actor {
            user: "admin".into(),
            remote: "test".into(),
        }
    }

    #[test]
    fn condition_is_raised_once_until_resolved() {
        let db = Db::open_in_memory().unwrap();
        let first = db
            .raise_condition(
                Severity::Critical,
                "pool.degraded",
                "pool",
                "device missing",
            )
            .unwrap();
        assert!(first.is_some());
        let again = db
            .raise_condition(
                Severity::Critical,
                "pool.degraded",
                "pool",
                "device missing",
            )
            .unwrap();
        assert_eq!(again, None);
        assert_eq!(db.resolve_condition("pool.degraded", "pool").unwrap(), 1);
        let after = db
            .raise_condition(
                Severity::Critical,
                "pool.degraded",
                "pool",
                "device missing",
            )
            .unwrap();
        assert!(after.is_some() && after != first);
        let all = db.events(EventFilter::default(), 100, None).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all[1].resolved_at.is_some());
        assert!(all[0].resolved_at.is_none());
    }

    #[test]
    fn ack_filters_and_counts() {
        let db = Db::open_in_memory().unwrap();
        let info = db
            .raise_event(Severity::Info, "scrub.done", "pool", "ok")
            .unwrap();
        let warn = db
            .raise_event(Severity::Warning, "auth.failed", "bob", "bad password")
            .unwrap();
        assert_eq!(db.unacked_event_counts().unwrap(), [1, 1, 0]);
        db.ack_event(&admin(), warn).unwrap();
        assert_eq!(db.unacked_event_counts().unwrap(), [1, 0, 0]);
        let open = db
            .events(
                EventFilter {
                    unacked_only: true,
                    min_severity: None,
                },
                100,
                None,
            )
            .unwrap();
        assert_eq!(open.iter().map(|e| e.id).collect::<Vec<_>>(), vec![info]);
        let serious = db
            .events(
                EventFilter {
                    unacked_only: false,
                    min_severity: Some(Severity::Warning),
                },
                100,
                None,
            )
            .unwrap();
        assert_eq!(serious.len(), 1);
        assert!(serious[0].acked);
        assert_eq!(serious[0].acked_by.as_deref(), Some("admin"));
        assert!(matches!(
            db.ack_event(&admin(), 999),
            Err(DbError::NotFound(_))
        ));
        let audit = db.audit(10, None).unwrap();
        assert_eq!(audit[0].action, "event.ack");
    }

    #[test]
    fn hook_hears_raised_and_resolved_events_once() {
        use std::sync::{Arc, Mutex};
        let db = Db::open_in_memory().unwrap();
        let heard: Arc<Mutex<Vec<(i64, String, bool)>>> = Arc::default();
        let sink = heard.clone();
        db.set_event_hook(Arc::new(move |e: &Event| {
            sink.lock()
                .unwrap()
                .push((e.id, e.kind.clone(), e.resolved_at.is_some()))
        }));
        let one = db
            .raise_event(Severity::Warning, "auth.failed", "bob", "bad password")
            .unwrap();
        let cond = db
            .raise_condition(Severity::Critical, "pool.failed", "pool", "gone")
            .unwrap()
            .unwrap();
        assert_eq!(
            db.raise_condition(Severity::Critical, "pool.failed", "pool", "gone")
                .unwrap(),
            None
        );
        assert_eq!(db.resolve_condition("pool.failed", "pool").unwrap(), 1);
        assert_eq!(db.resolve_condition("pool.failed", "pool").unwrap(), 0);
        assert_eq!(
            *heard.lock().unwrap(),
            vec![
                (one, "auth.failed".to_string(), false),
                (cond, "pool.failed".to_string(), false),
                (cond, "pool.failed".to_string(), true),
            ]
        );
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let db = Db::open_in_memory().unwrap();
        let long = "é".repeat(MAX_MESSAGE);
        db.raise_event(Severity::Info, "x", "y", &long).unwrap();
        let ev = &db.events(EventFilter::default(), 1, None).unwrap()[0];
        assert!(ev.message.len() <= MAX_MESSAGE + '…'.len_utf8());
    }
}
