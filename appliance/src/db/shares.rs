//! SMB shares: name rules, access lists, quota settings.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{is_safe_name, now, Actor, Db, DbError, DbResult, Share};

/// Longest share name (Windows' limit).
pub const MAX_SHARE_NAME: usize = 80;
/// Longest share comment.
pub const MAX_COMMENT: usize = 256;
/// Largest quota accepted (2^62 bytes: far beyond any pool, far below i64 overflow).
pub const MAX_QUOTA: u64 = 1 << 62;
/// Most users in one share's access list.
pub const MAX_SHARE_USERS: usize = 1000;

/// Names that SMB clients or Samba tooling treat specially.
const RESERVED_SHARE_NAMES: &[&str] = &["ipc", "admin", "print", "global", "homes", "printers"];

/// DOS device names, illegal as Windows file or share names (with any extension).
pub const DOS_DEVICE_NAMES: &[&str] = &[
    "con", "prn", "aux", "nul", "com1", "com2", "com3", "com4", "com5", "com6", "com7", "com8",
    "com9", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

/// Checks a share name: 1..=80 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit,
/// not reserved (`IPC$` and friends cannot even be spelled, `$` is not allowed), not a DOS
/// device name.
pub fn validate_share_name(name: &str) -> DbResult<()> {
    if !is_safe_name(name, MAX_SHARE_NAME) {
        return Err(DbError::Invalid(format!(
            "share name must be 1-{MAX_SHARE_NAME} characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )));
    }
    let lower = name.to_ascii_lowercase();
    let stem = lower.split('.').next().unwrap_or("");
    if RESERVED_SHARE_NAMES.contains(&lower.as_str()) || DOS_DEVICE_NAMES.contains(&stem) {
        return Err(DbError::Invalid(format!("share name {name} is reserved")));
    }
    Ok(())
}

fn validate_comment(comment: &str) -> DbResult<()> {
    if comment.chars().count() > MAX_COMMENT || comment.chars().any(char::is_control) {
        return Err(DbError::Invalid(format!(
            "comment must be at most {MAX_COMMENT} printable characters"
        )));
    }
    Ok(())
}

fn validate_quota(quota: Option<u64>) -> DbResult<()> {
    match quota {
        Some(q) if q == 0 || q > MAX_QUOTA => Err(DbError::Invalid(format!(
            "quota_bytes must be between 1 and {MAX_QUOTA}, or null for no quota"
        ))),
        _ => Ok(()),
    }
}

/// A share to create.
#[derive(Debug, Clone, Default)]
pub struct NewShare {
    /// Share name.
    pub name: String,
    /// Comment.
    pub comment: String,
    /// Quota in bytes.
    pub quota_bytes: Option<u64>,
    /// Read-only share.
    pub read_only: bool,
    /// Encryption required.
    pub encrypt: bool,
    /// Guest access allowed.
    pub guest_ok: bool,
    /// Continuously available (persistent handles).
    pub continuously_available: bool,
    /// Allowed users (empty: all SMB users).
    pub users: Vec<String>,
}

/// Changes to a share; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct ShareUpdate {
    /// New comment.
    pub comment: Option<String>,
    /// New quota (`Some(None)` removes it).
    pub quota_bytes: Option<Option<u64>>,
    /// New read-only flag.
    pub read_only: Option<bool>,
    /// New encryption flag.
    pub encrypt: Option<bool>,
    /// New guest flag.
    pub guest_ok: Option<bool>,
    /// New continuous-availability flag.
    pub continuously_available: Option<bool>,
    /// New access list.
    pub users: Option<Vec<String>>,
}

fn set_users(tx: &Transaction<'_>, share_id: i64, users: &[String]) -> DbResult<()> {
    if users.len() > MAX_SHARE_USERS {
        return Err(DbError::Invalid(format!(
            "at most {MAX_SHARE_USERS} users per share"
        )));
    }
    tx.execute("DELETE FROM share_users WHERE share_id = ?1", [share_id])?;
    for user in users {
        let id: Option<i64> = tx
            .query_row("SELECT id FROM users WHERE name = ?1", [user], |r| r.get(0))
            .optional()?;
        let id = id.ok_or_else(|| DbError::Invalid(format!("unknown user {user}")))?;
        tx.execute(
            "INSERT OR IGNORE INTO share_users(share_id, user_id) VALUES (?1, ?2)",
            [share_id, id],
        )?;
    }
    Ok(())
}

fn load_share(conn: &rusqlite::Connection, name: &str) -> DbResult<Option<Share>> {
    let row = conn
        .query_row(
            "SELECT id, name, comment, quota_bytes, read_only, encrypt, guest_ok, dataset, created_at,
                    continuously_available
             FROM shares WHERE name = ?1",
            [name],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    Share {
                        name: r.get(1)?,
                        comment: r.get(2)?,
                        quota_bytes: r.get::<_, Option<i64>>(3)?.map(|q| q.max(0) as u64),
                        read_only: r.get(4)?,
                        encrypt: r.get(5)?,
                        guest_ok: r.get(6)?,
                        continuously_available: r.get(9)?,
                        users: Vec::new(),
                        dataset: r.get(7)?,
                        created_at: r.get(8)?,
                    },
                ))
            },
        )
        .optional()?;
    let Some((id, mut share)) = row else {
        return Ok(None);
    };
    let mut stmt = conn.prepare(
        "SELECT u.name FROM share_users s JOIN users u ON u.id = s.user_id
         WHERE s.share_id = ?1 ORDER BY u.name COLLATE NOCASE",
    )?;
    share.users = stmt
        .query_map([id], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(Some(share))
}

impl Db {
    /// Creates a share. `prepare` creates its dataset in the pool and runs inside the
    /// transaction: if it fails, nothing is recorded.
    pub fn create_share(
        &self,
        actor: &Actor,
        new: &NewShare,
        prepare: impl FnOnce(&str) -> std::io::Result<()>,
    ) -> DbResult<Share> {
        validate_share_name(&new.name)?;
        validate_comment(&new.comment)?;
        validate_quota(new.quota_bytes)?;
        let detail = serde_json::json!({
            "quota_bytes": new.quota_bytes, "read_only": new.read_only, "encrypt": new.encrypt,
            "guest_ok": new.guest_ok, "users": new.users,
            "continuously_available": new.continuously_available,
        });
        let dataset = format!("shares/{}", new.name);
        self.write(actor, "share.create", &new.name, detail, |tx| {
            let t = now();
            tx.execute(
                "INSERT INTO shares(name, dataset, comment, quota_bytes, read_only, encrypt, guest_ok,
                                    continuously_available, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?9, ?8, ?8)",
                params![
                    new.name, dataset, new.comment, new.quota_bytes.map(|q| q as i64),
                    new.read_only, new.encrypt, new.guest_ok, t, new.continuously_available
                ],
            )
            .map_err(|e| DbError::from_constraint(e, &format!("share {} already exists", new.name)))?;
            set_users(tx, tx.last_insert_rowid(), &new.users)?;
            prepare(&dataset).map_err(|e| DbError::io(format!("creating dataset {dataset}"), e))?;
            load_share(tx, &new.name)?.ok_or_else(|| DbError::NotFound(format!("share {}", new.name)))
        })
    }

    /// Applies a partial update to a share.
    pub fn update_share(&self, actor: &Actor, name: &str, update: &ShareUpdate) -> DbResult<Share> {
        if let Some(c) = &update.comment {
            validate_comment(c)?;
        }
        if let Some(q) = update.quota_bytes {
            validate_quota(q)?;
        }
        let detail = serde_json::json!({
            "quota_bytes": update.quota_bytes, "read_only": update.read_only, "encrypt": update.encrypt,
            "guest_ok": update.guest_ok, "users": update.users, "comment_changed": update.comment.is_some(),
            "continuously_available": update.continuously_available,
        });
        self.write(actor, "share.update", name, detail, |tx| {
            let id: i64 = tx
                .query_row("SELECT id FROM shares WHERE name = ?1", [name], |r| {
                    r.get(0)
                })
                .optional()?
                .ok_or_else(|| DbError::NotFound(format!("share {name}")))?;
            let t = now();
            if let Some(c) = &update.comment {
                tx.execute(
                    "UPDATE shares SET comment = ?1, updated_at = ?2 WHERE id = ?3",
                    params![c, t, id],
                )?;
            }
            if let Some(q) = update.quota_bytes {
                tx.execute(
                    "UPDATE shares SET quota_bytes = ?1, updated_at = ?2 WHERE id = ?3",
                    params![q.map(|q| q as i64), t, id],
                )?;
            }
            for (column, value) in [
                ("read_only", update.read_only),
                ("encrypt", update.encrypt),
                ("guest_ok", update.guest_ok),
                ("continuously_available", update.continuously_available),
            ] {
                if let Some(v) = value {
                    tx.execute(
                        &format!("UPDATE shares SET {column} = ?1, updated_at = ?2 WHERE id = ?3"),
                        params![v, t, id],
                    )?;
                }
            }
            if let Some(users) = &update.users {
                set_users(tx, id, users)?;
            }
            load_share(tx, name)?.ok_or_else(|| DbError::NotFound(format!("share {name}")))
        })
    }

    /// Deletes a share's record. Returns it so the caller can remove its dataset.
    pub fn delete_share(&self, actor: &Actor, name: &str) -> DbResult<Share> {
        self.write(actor, "share.delete", name, serde_json::json!({}), |tx| {
            let share =
                load_share(tx, name)?.ok_or_else(|| DbError::NotFound(format!("share {name}")))?;
            tx.execute("DELETE FROM shares WHERE name = ?1", [name])?;
            Ok(share)
        })
    }

    /// One share (case-insensitive name).
    pub fn share(&self, name: &str) -> anyhow::Result<Option<Share>> {
        Ok(self.find_share(name)?)
    }

    /// One share (case-insensitive name), with the database's own error type.
    pub fn find_share(&self, name: &str) -> DbResult<Option<Share>> {
        load_share(&self.lock(), name)
    }

    /// All shares, by name.
    pub fn shares(&self) -> anyhow::Result<Vec<Share>> {
        Ok(self.list_shares()?)
    }

    /// All shares, by name, with the database's own error type.
    pub fn list_shares(&self) -> DbResult<Vec<Share>> {
        let conn = self.lock();
        let names: Vec<String> = conn
            .prepare("SELECT name FROM shares ORDER BY name COLLATE NOCASE")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(share) = load_share(&conn, &name)? {
                out.push(share);
            }
        }
        Ok(out)
    }

    /// Records the usage the pool measured, so listings survive a restart before the
    /// next scan finishes.
    pub fn record_share_usage(&self, usage: &[(String, u64)]) -> DbResult<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        for (name, used) in usage {
            tx.execute(
                "UPDATE shares SET used_bytes = ?1 WHERE name = ?2",
                params![(*used).min(i64::MAX as u64) as i64, name],
            )?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Role;

    #[test]
    fn share_names() {
        for bad in [
            "",
            "IPC$",
            "ipc",
            "a b",
            "con",
            "COM1.txt",
            "-x",
            "a/b",
            "..",
            &"x".repeat(81),
            "Homes",
        ] {
            assert!(validate_share_name(bad).is_err(), "{bad:?}");
        }
        for good in ["data", "Train-Set_01", "models.v2", &"x".repeat(80)] {
            assert!(validate_share_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn create_update_delete_with_users() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        db.create_user(&a, "alice", "password1", None).unwrap();
        let new = NewShare {
            name: "data".into(),
            quota_bytes: Some(1 << 20),
            users: vec!["alice".into()],
            ..Default::default()
        };
        let s = db.create_share(&a, &new, |_| Ok(())).unwrap();
        assert_eq!(s.users, ["alice"]);
        assert!(matches!(
            db.create_share(
                &a,
                &NewShare {
                    name: "DATA".into(),
                    ..Default::default()
                },
                |_| Ok(())
            ),
            Err(DbError::Conflict(_))
        ));
        let bad_user = NewShare {
            name: "x".into(),
            users: vec!["nobody".into()],
            ..Default::default()
        };
        assert!(matches!(
            db.create_share(&a, &bad_user, |_| Ok(())),
            Err(DbError::Invalid(_))
        ));
        let s = db
            .update_share(
                &a,
                "Data",
                &ShareUpdate {
                    quota_bytes: Some(None),
                    read_only: Some(true),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(s.quota_bytes, None);
        assert!(s.read_only);
        db.delete_share(&a, "data").unwrap();
        assert!(db.share("data").unwrap().is_none());
        let _ = Role::Admin;
    }

    #[test]
    fn failed_prepare_records_nothing() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        let new = NewShare {
            name: "data".into(),
            ..Default::default()
        };
        let err = db.create_share(&a, &new, |_| Err(std::io::Error::other("disk on fire")));
        assert!(matches!(err, Err(DbError::Io { .. })));
        assert!(db.share("data").unwrap().is_none());
        assert!(db.audit(10, None).unwrap().is_empty());
    }
}
