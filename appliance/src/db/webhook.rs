//! The webhook target for events (one, optional), kept as one JSON value under the
//! `webhook` key of the `settings` table. Its secret signs each delivery
//! (HMAC-SHA256), so it must be stored as given: it is never returned by the API, never
//! written to the audit log and never logged.

use serde::{Deserialize, Serialize};

use super::{Actor, Db, DbError, DbResult};

/// The `settings` key.
const KEY: &str = "webhook";
/// Longest URL accepted.
pub const MAX_URL: usize = 2048;
/// Longest secret accepted.
pub const MAX_SECRET: usize = 256;

/// The stored configuration.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    /// Where events are POSTed (`http://` or `https://`).
    pub url: String,
    /// Whether events are delivered.
    pub enabled: bool,
    /// The HMAC key of `X-Quarry-Signature`; `None` sends no signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redacted_url(&self.url))
            .field("enabled", &self.enabled)
            .field("secret_set", &self.secret.is_some())
            .finish()
    }
}

/// A parsed, acceptable webhook URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Whether TLS is used.
    pub https: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port (80/443 unless given).
    pub port: u16,
    /// `Host` header value (as written in the URL, with the port when one was given).
    pub authority: String,
    /// Path and query, at least `/`.
    pub path: String,
}

/// Checks a webhook URL: `http` or `https`, a host, no user name or password, no
/// fragment, at most [`MAX_URL`] bytes of printable ASCII.
pub fn parse_url(url: &str) -> Result<Target, String> {
    if url.is_empty() || url.len() > MAX_URL {
        return Err(format!("url must be 1-{MAX_URL} bytes"));
    }
    if !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("url must be printable ASCII without spaces".into());
    }
    if url.contains('#') {
        return Err("url must not have a fragment".into());
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("url is not a valid URL: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("url must start with http:// or https://".into()),
    };
    let authority = uri
        .authority()
        .ok_or_else(|| "url must have a host".to_string())?;
    if authority.as_str().contains('@') {
        return Err("url must not carry a user name or password".into());
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return Err("url must have a host".into());
    }
    // What follows the host: nothing, or `:` and a port (checked here: `http::Uri`
    // accepts ports beyond 65535).
    let after_host = authority
        .as_str()
        .get(authority.host().len()..)
        .unwrap_or_default();
    let port = match after_host.strip_prefix(':') {
        None if after_host.is_empty() => {
            if https {
                443
            } else {
                80
            }
        }
        None => return Err("url has a malformed host".into()),
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err("url port must be 1-65535".into()),
        },
    };
    let path = match uri.path_and_query().map(|p| p.as_str()) {
        Some(p) if p.starts_with('/') => p.to_string(),
        Some(p) if p.starts_with('?') => format!("/{p}"),
        _ => "/".to_string(),
    };
    Ok(Target {
        https,
        host,
        port,
        authority: authority.as_str().to_string(),
        path,
    })
}

/// The URL without its path and query (which may carry a token of the receiver, as
/// chat webhooks do): what logs and the audit log show.
pub fn redacted_url(url: &str) -> String {
    match parse_url(url) {
        Ok(t) => format!(
            "{}://{}/…",
            if t.https { "https" } else { "http" },
            t.authority
        ),
        Err(_) => "(invalid)".into(),
    }
}

fn check_secret(secret: &str) -> DbResult<()> {
    if secret.len() > MAX_SECRET {
        return Err(DbError::Invalid(format!(
            "secret must be at most {MAX_SECRET} bytes"
        )));
    }
    Ok(())
}

impl Db {
    /// The webhook configuration, if one is set.
    pub fn webhook(&self) -> DbResult<Option<WebhookConfig>> {
        let Some(value) = self.setting(KEY)? else {
            return Ok(None);
        };
        match serde_json::from_str(&value) {
            Ok(cfg) => Ok(Some(cfg)),
            Err(e) => {
                // Only an admin editing the database by hand can get here.
                tracing::error!(error = %e, "the stored webhook setting is unreadable; ignoring it");
                Ok(None)
            }
        }
    }

    /// Sets the webhook (audited). `secret`: `None` keeps the stored one, `Some("")`
    /// removes it, anything else replaces it. Returns the new configuration.
    pub fn set_webhook(
        &self,
        actor: &Actor,
        url: &str,
        enabled: bool,
        secret: Option<&str>,
    ) -> DbResult<WebhookConfig> {
        parse_url(url).map_err(DbError::Invalid)?;
        if let Some(s) = secret {
            check_secret(s)?;
        }
        let detail = serde_json::json!({
            "url": redacted_url(url),
            "enabled": enabled,
            "secret": match secret { None => "kept", Some("") => "removed", Some(_) => "set" },
        });
        self.write(actor, "webhook.set", KEY, detail, |tx| {
            let old: Option<String> = {
                use rusqlite::OptionalExtension;
                tx.query_row("SELECT value FROM settings WHERE key = ?1", [KEY], |r| {
                    r.get(0)
                })
                .optional()?
            };
            let old_secret = old
                .and_then(|v| serde_json::from_str::<WebhookConfig>(&v).ok())
                .and_then(|c| c.secret);
            let cfg = WebhookConfig {
                url: url.to_string(),
                enabled,
                secret: match secret {
                    None => old_secret,
                    Some("") => None,
                    Some(s) => Some(s.to_string()),
                },
            };
            let value = serde_json::to_string(&cfg)
                .map_err(|e| DbError::Invalid(format!("webhook setting: {e}")))?;
            tx.execute(
                "INSERT INTO settings(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [KEY, value.as_str()],
            )?;
            Ok(cfg)
        })
    }

    /// Removes the webhook (audited); removing none is not an error.
    pub fn delete_webhook(&self, actor: &Actor) -> DbResult<()> {
        self.write(actor, "webhook.delete", KEY, serde_json::json!({}), |tx| {
            tx.execute("DELETE FROM settings WHERE key = ?1", [KEY])?;
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
    fn urls_are_checked() {
        let t = parse_url("http://127.0.0.1:9000/hook?x=1").unwrap();
        assert_eq!(
            t,
            Target {
                https: false,
                host: "127.0.0.1".into(),
                port: 9000,
                authority: "127.0.0.1:9000".into(),
                path: "/hook?x=1".into(),
            }
        );
        let t = parse_url("https://[::1]").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 443, "/")
        );
        assert_eq!(parse_url("http://example.com").unwrap().port, 80);
        assert_eq!(parse_url("http://example.com?a=b").unwrap().path, "/?a=b");
        for bad in [
            "",
            "ftp://example.com/",
            "example.com/hook",
            "http://",
            "http:///x",
            "http://user:pw@example.com/",
            "http://example.com:0/",
            "http://example.com:99999/",
            "http://exa mple.com/",
            "http://example.com/#frag",
            "http://example.com/\u{e9}",
            "/relative",
        ] {
            assert!(parse_url(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("http://example.com/{}", "a".repeat(MAX_URL));
        assert!(parse_url(&long).is_err());
        assert_eq!(
            redacted_url("https://hooks.example.com/services/T0/B0/tok"),
            "https://hooks.example.com/…"
        );
    }

    #[test]
    fn set_keeps_removes_and_replaces_the_secret_without_auditing_it() {
        let db = Db::open_in_memory().unwrap();
        assert_eq!(db.webhook().unwrap(), None);
        db.set_webhook(&admin(), "http://h/a", true, Some("s3cret"))
            .unwrap();
        let kept = db.set_webhook(&admin(), "http://h/b", false, None).unwrap();
        assert_eq!(kept.secret.as_deref(), Some("s3cret"));
        assert_eq!(db.webhook().unwrap(), Some(kept.clone()));
        assert!(!format!("{kept:?}").contains("s3cret"));
        let removed = db
            .set_webhook(&admin(), "http://h/b", true, Some(""))
            .unwrap();
        assert_eq!(removed.secret, None);
        assert!(matches!(
            db.set_webhook(&admin(), "gopher://h", true, None),
            Err(DbError::Invalid(_))
        ));
        assert!(matches!(
            db.set_webhook(
                &admin(),
                "http://h",
                true,
                Some(&"x".repeat(MAX_SECRET + 1))
            ),
            Err(DbError::Invalid(_))
        ));
        db.delete_webhook(&admin()).unwrap();
        assert_eq!(db.webhook().unwrap(), None);
        let audit = db.audit(10, None).unwrap();
        assert_eq!(audit[0].action, "webhook.delete");
        assert!(audit.iter().all(|a| !format!("{a:?}").contains("s3cret")));
    }
}
