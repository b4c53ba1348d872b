//! Read-mostly views of the running appliance: live sessions, the pool, the audit log.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, NotFound, QueryErrors};
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::db::{AuditEntry, Role};
use crate::pool::managed::{DeviceStatus, PoolState};
use crate::pool::Backend;
use crate::sessions::SessionInfo;
use crate::state::AppState;

/// Live SMB sessions and NVMe controllers (viewer).
#[utoipa::path(get, path = "/api/v1/sessions", tag = "sessions",
    responses((status = 200, description = "Sessions", body = Vec<SessionInfo>), AuthErrors),
    security(("bearer" = [])))]
pub async fn sessions(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<Json<Vec<SessionInfo>>> {
    auth.require(Role::Viewer)?;
    Ok(Json(state.sessions.list()))
}

/// Disconnects a session (operator).
#[utoipa::path(delete, path = "/api/v1/sessions/{id}", tag = "sessions",
    params(("id" = u64, Path, description = "Session id")),
    responses((status = 204, description = "Disconnect requested"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn disconnect(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    if state.sessions.disconnect(id) {
        tracing::info!(session = id, by = %auth.principal.user, "session disconnected by admin");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Problem::not_found(format!("session {id} not found")))
    }
}

/// The pool.
#[derive(Debug, Serialize, ToSchema)]
pub struct PoolOut {
    /// `directory` (embedded default) or `btrfs` (managed NVMe pool).
    pub kind: String,
    /// Redundancy profile.
    pub profile: String,
    /// `healthy`, `degraded`, `failed` or `creating`.
    pub state: PoolState,
    /// Why the pool is not healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Total bytes.
    pub size_bytes: u64,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes available.
    pub available_bytes: u64,
    /// Where the pool lives.
    pub path: String,
    /// btrfs file system UUID (managed pool only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Devices (none for a directory pool).
    pub devices: Vec<DeviceStatus>,
}

/// Pool state and capacity (viewer).
#[utoipa::path(get, path = "/api/v1/pool", tag = "pool",
    responses((status = 200, description = "The pool", body = PoolOut), AuthErrors,
              (status = 500, description = "The pool cannot be measured", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn pool(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<PoolOut>> {
    auth.require(Role::Viewer)?;
    let pool = state.pool.clone();
    let cap = tokio::task::spawn_blocking(move || pool.capacity())
        .await
        .map_err(|e| Problem::internal(&e))?
        .map_err(|e| Problem::internal(&e))?;
    let (kind, profile, uuid, health) = match state.pool.backend() {
        Backend::Directory => (
            "directory",
            "single".to_string(),
            None,
            crate::pool::managed::Health::default(),
        ),
        Backend::Btrfs { uuid, profile } => ("btrfs", profile, Some(uuid), state.pool.health()),
    };
    let pool_state = if state.pool.is_creating() {
        PoolState::Creating
    } else {
        health.state
    };
    Ok(Json(PoolOut {
        kind: kind.into(),
        profile,
        state: pool_state,
        reason: health.reason,
        size_bytes: cap.size_bytes,
        used_bytes: cap.used_bytes,
        available_bytes: cap.available_bytes,
        path: state.pool.root().display().to_string(),
        uuid,
        devices: health.devices,
    }))
}

/// Audit log paging.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Most rows to return (1-1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Only rows with an id below this (for paging back).
    pub before: Option<i64>,
}

/// The audit log, newest first (admin).
#[utoipa::path(get, path = "/api/v1/audit", tag = "system", params(AuditQuery),
    responses((status = 200, description = "Audit rows", body = Vec<AuditEntry>), AuthErrors, QueryErrors),
    security(("bearer" = [])))]
pub async fn audit(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Json<Vec<AuditEntry>>> {
    auth.require(Role::Admin)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=crate::db::audit::MAX_PAGE).contains(&limit) {
        return Err(Problem::bad_request(format!(
            "limit must be 1-{}",
            crate::db::audit::MAX_PAGE
        )));
    }
    let rows = state.db.call(move |db| db.audit(limit, q.before)).await?;
    Ok(Json(rows))
}
