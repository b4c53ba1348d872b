//! User accounts: SMB users (NT hash) and web/API users (slow hash + role), one table.

use rusqlite::{params, OptionalExtension, Row};

use super::{is_safe_name, now, Actor, Db, DbError, DbResult, Role, SmbUser, User};
use crate::credentials;

/// Longest user name (Windows' SAM limit is 20; we allow more for service accounts).
pub const MAX_USER_NAME: usize = 64;
/// Shortest password accepted.
pub const MIN_PASSWORD: usize = 8;
/// Longest password accepted (bounds the hashing work one request can cause).
pub const MAX_PASSWORD: usize = 256;

/// Checks a user name: 1..=64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_user_name(name: &str) -> DbResult<()> {
    if is_safe_name(name, MAX_USER_NAME) {
        Ok(())
    } else {
        Err(DbError::Invalid(format!(
            "user name must be 1-{MAX_USER_NAME} characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )))
    }
}

/// Checks a password's length (the only policy an appliance can enforce fairly).
pub fn validate_password(password: &str) -> DbResult<()> {
    let n = password.chars().count();
    if (MIN_PASSWORD..=MAX_PASSWORD).contains(&n) {
        Ok(())
    } else {
        Err(DbError::Invalid(format!(
            "password must be {MIN_PASSWORD}-{MAX_PASSWORD} characters"
        )))
    }
}

fn user_from_row(r: &Row<'_>) -> rusqlite::Result<User> {
    let role: Option<String> = r.get(2)?;
    Ok(User {
        id: r.get(0)?,
        name: r.get(1)?,
        role: role.as_deref().and_then(Role::parse),
        password_hash: r.get(3)?,
        created_at: r.get(4)?,
    })
}

const USER_COLUMNS: &str = "id, name, role, password_hash, created_at";

fn hash_error(e: credentials::CredentialError) -> DbError {
    DbError::Invalid(e.to_string())
}

impl Db {
    /// Creates a user with both password forms stored.
    pub fn create_user(
        &self,
        actor: &Actor,
        name: &str,
        password: &str,
        role: Option<Role>,
    ) -> DbResult<User> {
        validate_user_name(name)?;
        validate_password(password)?;
        let hash = credentials::hash_password(password).map_err(hash_error)?;
        let nt = credentials::nt_hash(password);
        let detail = serde_json::json!({ "role": role.map(Role::as_str) });
        self.write(actor, "user.create", name, detail, |tx| {
            let t = now();
            tx.execute(
                "INSERT INTO users(name, role, password_hash, nt_hash, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                params![name, role.map(Role::as_str), hash, nt.as_slice(), t],
            )
            .map_err(|e| DbError::from_constraint(e, &format!("user {name} already exists")))?;
            Ok(User {
                id: tx.last_insert_rowid(),
                name: name.to_string(),
                role,
                password_hash: hash.clone(),
                created_at: t,
            })
        })
    }

    /// Changes a user's password and/or role. Demoting or changing the last admin's
    /// role is refused so the appliance can never lock its owner out.
    pub fn update_user(
        &self,
        actor: &Actor,
        name: &str,
        password: Option<&str>,
        role: Option<Option<Role>>,
    ) -> DbResult<User> {
        let hashes = match password {
            Some(p) => {
                validate_password(p)?;
                Some((
                    credentials::hash_password(p).map_err(hash_error)?,
                    credentials::nt_hash(p),
                ))
            }
            None => None,
        };
        let detail = serde_json::json!({
            "password_changed": password.is_some(),
            "role": role.map(|r| r.map(Role::as_str)),
        });
        self.write(actor, "user.update", name, detail, |tx| {
            let user = tx
                .query_row(&format!("SELECT {USER_COLUMNS} FROM users WHERE name = ?1"), [name], user_from_row)
                .optional()?
                .ok_or_else(|| DbError::NotFound(format!("user {name}")))?;
            if let Some((hash, nt)) = &hashes {
                tx.execute(
                    "UPDATE users SET password_hash = ?1, nt_hash = ?2, updated_at = ?3 WHERE id = ?4",
                    params![hash, nt.as_slice(), now(), user.id],
                )?;
                // A new password ends every session and token of the old one.
                tx.execute("DELETE FROM api_tokens WHERE user_id = ?1 AND kind = 'session'", [user.id])?;
            }
            if let Some(new_role) = role {
                if user.role == Some(Role::Admin) && new_role != Some(Role::Admin) {
                    ensure_other_admin(tx, user.id)?;
                }
                tx.execute(
                    "UPDATE users SET role = ?1, updated_at = ?2 WHERE id = ?3",
                    params![new_role.map(Role::as_str), now(), user.id],
                )?;
            }
            tx.query_row(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = ?1"), [user.id], user_from_row)
                .map_err(DbError::from)
        })
    }

    /// Deletes a user (and its tokens and share grants). The last admin cannot go.
    pub fn delete_user(&self, actor: &Actor, name: &str) -> DbResult<()> {
        self.write(actor, "user.delete", name, serde_json::json!({}), |tx| {
            let user = tx
                .query_row(
                    &format!("SELECT {USER_COLUMNS} FROM users WHERE name = ?1"),
                    [name],
                    user_from_row,
                )
                .optional()?
                .ok_or_else(|| DbError::NotFound(format!("user {name}")))?;
            if user.role == Some(Role::Admin) {
                ensure_other_admin(tx, user.id)?;
            }
            tx.execute("DELETE FROM users WHERE id = ?1", [user.id])?;
            Ok(())
        })
    }

    /// All users, by name.
    pub fn users(&self) -> DbResult<Vec<User>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {USER_COLUMNS} FROM users ORDER BY name COLLATE NOCASE"
        ))?;
        let rows = stmt.query_map([], user_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// One user by name (case-insensitive).
    pub fn user(&self, name: &str) -> DbResult<Option<User>> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {USER_COLUMNS} FROM users WHERE name = ?1"),
                [name],
                user_from_row,
            )
            .optional()?)
    }

    /// Number of users (first-start detection).
    pub fn user_count(&self) -> DbResult<i64> {
        let conn = self.lock();
        Ok(conn.query_row("SELECT count(*) FROM users", [], |r| r.get(0))?)
    }

    /// The NTLM credential of an SMB user (case-insensitive name).
    pub fn smb_user(&self, name: &str) -> anyhow::Result<Option<SmbUser>> {
        let conn = self.lock();
        let row = conn
            .query_row(
                "SELECT name, nt_hash, id FROM users WHERE name = ?1",
                [name],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                },
            )
            .optional()?;
        Ok(row.and_then(|(name, hash, id)| {
            let nt_hash: [u8; 16] = hash.try_into().ok()?;
            Some(SmbUser { name, nt_hash, id })
        }))
    }

    /// Checks a web login. Returns the user only if the password matches and the user
    /// has a role. The slow hash is computed even for unknown users so timing does not
    /// reveal which names exist.
    pub fn check_login(&self, name: &str, password: &str) -> DbResult<Option<User>> {
        let user = self.user(name)?;
        let stored = user
            .as_ref()
            .map(|u| u.password_hash.clone())
            .unwrap_or_else(dummy_hash);
        let ok = credentials::verify_password(password, &stored);
        Ok(user.filter(|u| ok && u.role.is_some()))
    }
}

/// A valid hash of a random value, computed once, used to equalise login timing.
fn dummy_hash() -> String {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY
        .get_or_init(|| {
            credentials::hash_password("not-a-real-password-at-all")
                .unwrap_or_else(|_| "pbkdf2-sha256$600000$AAAA$AAAA".into())
        })
        .clone()
}

fn ensure_other_admin(tx: &rusqlite::Transaction<'_>, user_id: i64) -> DbResult<()> {
    let admins: i64 = tx.query_row(
        "SELECT count(*) FROM users WHERE role = 'admin' AND id != ?1",
        [user_id],
        |r| r.get(0),
    )?;
    if admins == 0 {
        Err(DbError::Conflict(
            "the last admin cannot be removed or demoted".into(),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor() -> Actor {
        Actor::system()
    }

    #[test]
    fn create_login_and_smb_lookup() {
        let db = Db::open_in_memory().unwrap();
        db.create_user(&actor(), "alice", "password1", Some(Role::Operator))
            .unwrap();
        assert!(db.check_login("ALICE", "password1").unwrap().is_some());
        assert!(db.check_login("alice", "password2").unwrap().is_none());
        let smb = db.smb_user("Alice").unwrap().unwrap();
        assert_eq!(smb.nt_hash, credentials::nt_hash("password1"));
        assert!(matches!(
            db.create_user(&actor(), "ALICE", "password1", None),
            Err(DbError::Conflict(_))
        ));
    }

    #[test]
    fn smb_only_user_cannot_log_in_to_api() {
        let db = Db::open_in_memory().unwrap();
        db.create_user(&actor(), "bob", "password1", None).unwrap();
        assert!(db.check_login("bob", "password1").unwrap().is_none());
    }

    #[test]
    fn last_admin_is_protected() {
        let db = Db::open_in_memory().unwrap();
        db.create_user(&actor(), "admin", "password1", Some(Role::Admin))
            .unwrap();
        assert!(matches!(
            db.delete_user(&actor(), "admin"),
            Err(DbError::Conflict(_))
        ));
        assert!(matches!(
            db.update_user(&actor(), "admin", None, Some(Some(Role::Viewer))),
            Err(DbError::Conflict(_))
        ));
        db.create_user(&actor(), "root2", "password1", Some(Role::Admin))
            .unwrap();
        db.delete_user(&actor(), "admin").unwrap();
    }

    #[test]
    fn names_and_passwords_are_validated() {
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(65)] {
            assert!(validate_user_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_user_name("svc.train_01-a").is_ok());
        assert!(validate_password("short").is_err());
    }

    #[test]
    fn every_change_is_audited() {
        let db = Db::open_in_memory().unwrap();
        db.create_user(&actor(), "carol", "password1", None)
            .unwrap();
        db.update_user(&actor(), "carol", Some("password2"), None)
            .unwrap();
        db.delete_user(&actor(), "carol").unwrap();
        let actions: Vec<String> = db
            .audit(10, None)
            .unwrap()
            .into_iter()
            .map(|a| a.action)
            .collect();
        assert_eq!(actions, ["user.delete", "user.update", "user.create"]);
    }
}
