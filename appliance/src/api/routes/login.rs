//! Login and logout. A login mints a session token, returned in the body (for scripts)
//! and as an HttpOnly cookie (for the UI) together with its CSRF secret.

use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::{Auth, RemoteAddr, SESSION_COOKIE};
use crate::api::errors::{AuthErrors, BodyErrors};
use crate::api::extract::ApiJson;
use crate::api::problem::{ApiResult, Problem};
use crate::db::events::Severity;
use crate::db::tokens::{TokenKind, SESSION_TTL_SECS};
use crate::db::{rfc3339, Actor, Role};
use crate::state::AppState;

/// Login request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

/// Login answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct LoginResponse {
    /// Session token: send as `Authorization: Bearer TOKEN`.
    pub token: String,
    /// Send as `X-CSRF-Token` on writes authenticated by the session cookie.
    pub csrf_token: String,
    /// When the session ends (RFC 3339).
    pub expires_at: String,
    /// The user.
    pub user: String,
    /// The user's role.
    pub role: Role,
}

/// The caller's identity.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    /// User name.
    pub user: String,
    /// Role.
    pub role: Role,
}

/// Logs in with a user name and password.
#[utoipa::path(post, path = "/api/v1/auth/login", tag = "auth", request_body = LoginRequest,
    responses((status = 200, description = "Logged in", body = LoginResponse),
              (status = 401, description = "Wrong user name or password", body = Problem, content_type = "application/problem+json"),
              (status = 429, description = "Too many failed logins", body = Problem, content_type = "application/problem+json"),
              BodyErrors))]
pub async fn login(
    State(state): State<AppState>,
    RemoteAddr(remote): RemoteAddr,
    ApiJson(req): ApiJson<LoginRequest>,
) -> ApiResult<Response> {
    let user_key = format!("user:{}", req.username.to_ascii_lowercase());
    let keys = vec![format!("ip:{remote}"), user_key.clone()];
    if let Some(wait) = state.login_limiter.retry_after(&keys, Instant::now()) {
        let mut resp = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many failed logins; retry in {wait} s"),
        )
        .into_response();
        if let Ok(v) = HeaderValue::from_str(&wait.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return Ok(resp);
    }
    let (username, password) = (req.username.clone(), req.password);
    let user = state
        .db
        .call(move |db| db.check_login(&username, &password))
        .await?;
    let Some(user) = user else {
        state.login_limiter.record_failure(&keys, Instant::now());
        tracing::warn!(user = %req.username, remote = %remote, "failed API login");
        let message = format!("failed web/API login as {:?} from {remote}", req.username);
        let subject = req.username.clone();
        let raised = state
            .db
            .call(move |db| db.raise_event(Severity::Warning, "auth.failed", &subject, &message))
            .await;
        if let Err(e) = raised {
            tracing::error!(error = %e, "recording a failed-login event");
        }
        return Err(Problem::unauthorized("wrong user name or password"));
    };
    state.login_limiter.record_success(&user_key);
    let actor = Actor {
        user: user.name.clone(),
        remote,
    };
    let user_id = user.id;
    let created = state
        .db
        .call(move |db| {
            db.create_token(
                &actor,
                user_id,
                "web login",
                TokenKind::Session,
                Some(SESSION_TTL_SECS),
            )
        })
        .await?;
    let role = user.role.unwrap_or(Role::Viewer);
    let body = LoginResponse {
        token: created.plain.clone(),
        csrf_token: created.csrf.clone().unwrap_or_default(),
        expires_at: rfc3339(created.info.expires_at.unwrap_or_default()),
        user: user.name,
        role,
    };
    let cookie = format!(
        "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_TTL_SECS}",
        created.plain
    );
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        headers.insert(header::SET_COOKIE, v);
    }
    Ok((headers, Json(body)).into_response())
}

/// Ends the current login session (revokes the session token that authenticated this
/// request). Long-lived API tokens are revoked with `DELETE /api/v1/tokens/{id}` instead,
/// so a script calling logout cannot destroy its own automation credential by accident.
#[utoipa::path(post, path = "/api/v1/auth/logout", tag = "auth",
    responses((status = 204, description = "Logged out"),
              (status = 409, description = "The request was authenticated by an API token, not a login session", body = Problem, content_type = "application/problem+json"),
              AuthErrors),
    security(("bearer" = [])))]
pub async fn logout(State(state): State<AppState>, auth: Auth) -> ApiResult<Response> {
    if auth.principal.csrf.is_none() {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "this is an API token, not a login session; revoke it with DELETE /api/v1/tokens/{id}",
        ));
    }
    let actor = auth.actor();
    let id = auth.principal.token_id;
    state.db.call(move |db| db.delete_token(&actor, id)).await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
    )) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

/// Who am I.
#[utoipa::path(get, path = "/api/v1/auth/me", tag = "auth",
    responses((status = 200, description = "The caller", body = Me), AuthErrors),
    security(("bearer" = [])))]
pub async fn me(auth: Auth) -> Json<Me> {
    Json(Me {
        user: auth.principal.user,
        role: auth.principal.role,
    })
}
