//! Request authentication: `Authorization: Bearer TOKEN`, or the session cookie set by
//! login plus the `X-CSRF-Token` header on every state-changing request. Role checks are
//! explicit in each handler through [`Auth::require`].

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, Method};

use super::problem::Problem;
use crate::db::{Actor, Principal, Role};
use crate::state::AppState;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "quarry_session";
/// Header carrying the CSRF secret for cookie-authenticated writes.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The client's address as text, for audit rows and rate limiting.
pub fn remote_addr(parts: &Parts) -> String {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The client's address as an extractor (never fails).
pub struct RemoteAddr(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RemoteAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(RemoteAddr(remote_addr(parts)))
    }
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Auth {
    /// Who.
    pub principal: Principal,
    /// From where.
    pub remote: String,
}

impl Auth {
    /// Refuses with 403 unless the caller's role is at least `role`.
    pub fn require(&self, role: Role) -> Result<(), Problem> {
        if self.principal.role >= role {
            Ok(())
        } else {
            Err(Problem::forbidden(format!(
                "this needs the {} role; you are {}",
                role.as_str(),
                self.principal.role.as_str()
            )))
        }
    }

    /// The audit identity of this request.
    pub fn actor(&self) -> Actor {
        Actor {
            user: self.principal.user.clone(),
            remote: self.remote.clone(),
        }
    }
}

/// The session cookie's token, if the request carries one.
pub(crate) fn cookie_token(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v.to_string())
}

fn bearer_token(parts: &Parts) -> Result<Option<String>, Problem> {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| Problem::unauthorized("malformed Authorization header"))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim().to_string()))
        }
        _ => Err(Problem::unauthorized(
            "Authorization must be 'Bearer TOKEN'",
        )),
    }
}

/// Compares two secrets without an early exit, so timing does not reveal a prefix.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let remote = remote_addr(parts);
        let (token, via_cookie) = match bearer_token(parts)? {
            Some(t) => (t, false),
            None => match cookie_token(parts) {
                Some(t) => (t, true),
                None => {
                    return Err(Problem::unauthorized(
                        "authentication required: send 'Authorization: Bearer TOKEN'",
                    ))
                }
            },
        };
        let principal = state
            .db
            .call(move |db| db.authenticate_token(&token))
            .await?
            .ok_or_else(|| Problem::unauthorized("invalid or expired token"))?;
        if via_cookie && !is_safe(&parts.method) {
            let sent = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
            let expected = principal.csrf.as_deref();
            let ok = matches!((sent, expected), (Some(s), Some(e)) if constant_time_eq(s.as_bytes(), e.as_bytes()));
            if !ok {
                return Err(Problem::forbidden(
                    "missing or wrong X-CSRF-Token for a cookie-authenticated request",
                ));
            }
        }
        Ok(Auth { principal, remote })
    }
}
