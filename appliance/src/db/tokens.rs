//! API and session tokens. Only the SHA-256 digest is stored; the plain token is
//! returned once, at creation.

use rusqlite::{params, OptionalExtension, Row};

use super::{now, Actor, Db, DbError, DbResult, Principal, Role, TokenInfo};
use crate::credentials;

/// Lifetime of a login session token.
pub const SESSION_TTL_SECS: i64 = 12 * 3600;
/// Longest token label.
pub const MAX_TOKEN_NAME: usize = 100;
/// Most live tokens one user may hold (bounds the table against a looping script).
pub const MAX_TOKENS_PER_USER: i64 = 1000;
/// `last_used_at` is refreshed at most this often, so reads stay reads.
const LAST_USED_GRANULARITY_SECS: i64 = 60;

/// Which kind of token to mint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Long-lived automation token.
    Api,
    /// Login session (cookie or bearer), expires after [`SESSION_TTL_SECS`], carries a CSRF secret.
    Session,
}

/// A token just created: the only time the secret is visible.
pub struct CreatedToken {
    /// Metadata as stored.
    pub info: TokenInfo,
    /// The secret.
    pub plain: String,
    /// CSRF secret (session tokens).
    pub csrf: Option<String>,
}

fn info_from_row(r: &Row<'_>) -> rusqlite::Result<TokenInfo> {
    Ok(TokenInfo {
        id: r.get(0)?,
        user: r.get(1)?,
        name: r.get(2)?,
        kind: r.get(3)?,
        created_at: r.get(4)?,
        expires_at: r.get(5)?,
        last_used_at: r.get(6)?,
    })
}

const INFO_SELECT: &str =
    "SELECT t.id, u.name, t.name, t.kind, t.created_at, t.expires_at, t.last_used_at
     FROM api_tokens t JOIN users u ON u.id = t.user_id";

impl Db {
    /// Mints a token for `user_id`. `expires_in` of `None` means no expiry (API tokens).
    pub fn create_token(
        &self,
        actor: &Actor,
        user_id: i64,
        name: &str,
        kind: TokenKind,
        expires_in: Option<i64>,
    ) -> DbResult<CreatedToken> {
        if name.is_empty()
            || name.chars().count() > MAX_TOKEN_NAME
            || name.chars().any(char::is_control)
        {
            return Err(DbError::Invalid(format!(
                "token name must be 1-{MAX_TOKEN_NAME} printable characters"
            )));
        }
        let token = credentials::new_token().map_err(|e| DbError::Invalid(e.to_string()))?;
        let (kind_str, csrf) = match kind {
            TokenKind::Api => ("api", None),
            TokenKind::Session => (
                "session",
                Some(credentials::random_id().map_err(|e| DbError::Invalid(e.to_string()))?),
            ),
        };
        let action = if kind == TokenKind::Session {
            "auth.login"
        } else {
            "token.create"
        };
        let detail = serde_json::json!({ "name": name, "kind": kind_str });
        self.write(actor, action, &actor.user, detail, |tx| {
            // Expired sessions are swept here, on the write path, instead of by a timer.
            tx.execute(
                "DELETE FROM api_tokens WHERE expires_at IS NOT NULL AND expires_at < ?1",
                [now()],
            )?;
            let count: i64 = tx.query_row(
                "SELECT count(*) FROM api_tokens WHERE user_id = ?1",
                [user_id],
                |r| r.get(0),
            )?;
            if count >= MAX_TOKENS_PER_USER {
                return Err(DbError::Conflict(format!(
                    "user already holds {MAX_TOKENS_PER_USER} tokens; delete some first"
                )));
            }
            let t = now();
            let expires_at = expires_in.map(|s| t.saturating_add(s));
            tx.execute(
                "INSERT INTO api_tokens(user_id, name, kind, digest, csrf, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![user_id, name, kind_str, token.digest, csrf, t, expires_at],
            )?;
            let id = tx.last_insert_rowid();
            let info = tx.query_row(
                &format!("{INFO_SELECT} WHERE t.id = ?1"),
                [id],
                info_from_row,
            )?;
            Ok(CreatedToken {
                info,
                plain: token.plain.clone(),
                csrf: csrf.clone(),
            })
        })
    }

    /// Resolves a presented token to its principal, if valid, unexpired, and the user
    /// still has a role.
    pub fn authenticate_token(&self, plain: &str) -> DbResult<Option<Principal>> {
        let digest = credentials::token_digest(plain);
        let conn = self.lock();
        let row = conn
            .query_row(
                "SELECT t.id, u.id, u.name, u.role, t.csrf, t.expires_at, t.last_used_at
                 FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.digest = ?1",
                [&digest],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                    ))
                },
            )
            .optional()?;
        let Some((token_id, user_id, user, role, csrf, expires_at, last_used)) = row else {
            return Ok(None);
        };
        let t = now();
        if expires_at.is_some_and(|e| e < t) {
            return Ok(None);
        }
        let Some(role) = role.as_deref().and_then(Role::parse) else {
            return Ok(None);
        };
        if last_used.is_none_or(|l| t - l >= LAST_USED_GRANULARITY_SECS) {
            conn.execute(
                "UPDATE api_tokens SET last_used_at = ?1 WHERE id = ?2",
                [t, token_id],
            )?;
        }
        Ok(Some(Principal {
            user_id,
            user,
            role,
            token_id,
            csrf,
        }))
    }

    /// Tokens of one user, or of everyone when `user` is `None`.
    pub fn tokens(&self, user: Option<&str>) -> DbResult<Vec<TokenInfo>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "{INFO_SELECT} WHERE (?1 IS NULL OR u.name = ?1) AND (t.expires_at IS NULL OR t.expires_at >= ?2)
             ORDER BY t.id"
        ))?;
        let rows = stmt.query_map(params![user, now()], info_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// One token's metadata.
    pub fn token(&self, id: i64) -> DbResult<Option<TokenInfo>> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("{INFO_SELECT} WHERE t.id = ?1"),
                [id],
                info_from_row,
            )
            .optional()?)
    }

    /// Revokes a token.
    pub fn delete_token(&self, actor: &Actor, id: i64) -> DbResult<()> {
        self.write(
            actor,
            "token.delete",
            &id.to_string(),
            serde_json::json!({}),
            |tx| {
                let n = tx.execute("DELETE FROM api_tokens WHERE id = ?1", [id])?;
                if n == 0 {
                    return Err(DbError::NotFound(format!("token {id}")));
                }
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trip_expiry_and_revocation() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        let u = db
            .create_user(&a, "ops", "password1", Some(Role::Operator))
            .unwrap();
        let t = db
            .create_token(&a, u.id, "ci", TokenKind::Api, None)
            .unwrap();
        let p = db.authenticate_token(&t.plain).unwrap().unwrap();
        assert_eq!(p.user, "ops");
        assert_eq!(p.role, Role::Operator);
        assert!(db.authenticate_token("qry_nope").unwrap().is_none());
        let expired = db
            .create_token(&a, u.id, "old", TokenKind::Session, Some(-10))
            .unwrap();
        assert!(db.authenticate_token(&expired.plain).unwrap().is_none());
        db.delete_token(&a, t.info.id).unwrap();
        assert!(db.authenticate_token(&t.plain).unwrap().is_none());
    }

    #[test]
    fn role_removal_disables_tokens() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        db.create_user(&a, "root", "password1", Some(Role::Admin))
            .unwrap();
        let u = db
            .create_user(&a, "v", "password1", Some(Role::Viewer))
            .unwrap();
        let t = db
            .create_token(&a, u.id, "x", TokenKind::Api, None)
            .unwrap();
        db.update_user(&a, "v", None, Some(None)).unwrap();
        assert!(db.authenticate_token(&t.plain).unwrap().is_none());
    }
}
