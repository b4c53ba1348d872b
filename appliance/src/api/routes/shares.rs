//! SMB shares. A share is reachable as soon as its POST returns.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{double_option, ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::shares::{NewShare, ShareUpdate};
use crate::db::{rfc3339, Role, Share};
use crate::state::{AppState, ConfigChange};

/// Share creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateShare {
    /// Share name: 1-80 of `A-Z a-z 0-9 . _ -`; reserved names (IPC$, ADMIN$, homes, ...) refused.
    #[schema(
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$",
        min_length = 1,
        max_length = 80
    )]
    pub name: String,
    /// Quota in bytes; absent or null for none.
    #[schema(minimum = 1, maximum = 4611686018427387904u64)]
    pub quota_bytes: Option<u64>,
    /// Refuse writes.
    #[serde(default)]
    pub read_only: bool,
    /// Require SMB3 encryption.
    #[serde(default)]
    pub encrypt: bool,
    /// Allow guest access (off unless asked for).
    #[serde(default)]
    pub guest_ok: bool,
    /// Continuously available: SMB 3 clients may hold persistent handles, which survive
    /// a restart of the appliance's service.
    #[serde(default)]
    pub continuously_available: bool,
    /// Users allowed to connect; absent or empty for every SMB user.
    #[serde(default)]
    pub users: Vec<String>,
    /// Comment shown to SMB clients.
    #[serde(default)]
    #[schema(max_length = 256)]
    pub comment: String,
}

/// Share change request: absent fields stay as they are.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateShare {
    /// New quota; null removes the quota.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<u64>, nullable, minimum = 1, maximum = 4611686018427387904u64)]
    pub quota_bytes: Option<Option<u64>>,
    /// New read-only flag.
    pub read_only: Option<bool>,
    /// New encryption flag.
    pub encrypt: Option<bool>,
    /// New guest flag.
    pub guest_ok: Option<bool>,
    /// New continuous-availability flag.
    pub continuously_available: Option<bool>,
    /// New access list (empty: every SMB user).
    pub users: Option<Vec<String>>,
    /// New comment.
    #[schema(max_length = 256)]
    pub comment: Option<String>,
}

/// A share with its live usage.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShareOut {
    /// Name.
    pub name: String,
    /// Comment.
    pub comment: String,
    /// Quota in bytes, or null.
    pub quota_bytes: Option<u64>,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Read-only.
    pub read_only: bool,
    /// Encryption required.
    pub encrypt: bool,
    /// Guest access allowed.
    pub guest_ok: bool,
    /// Continuously available (persistent handles).
    pub continuously_available: bool,
    /// Allowed users (empty: every SMB user).
    pub users: Vec<String>,
    /// UNC path, as clients type it.
    pub unc: String,
    /// RFC 3339.
    pub created_at: String,
}

fn share_out(state: &AppState, s: Share) -> ShareOut {
    let used_bytes = state.pool.share_quota(&s.name).used();
    ShareOut {
        unc: format!("\\\\HOST\\{}", s.name),
        name: s.name,
        comment: s.comment,
        quota_bytes: s.quota_bytes,
        used_bytes,
        read_only: s.read_only,
        encrypt: s.encrypt,
        guest_ok: s.guest_ok,
        continuously_available: s.continuously_available,
        users: s.users,
        created_at: rfc3339(s.created_at),
    }
}

/// Creates a share (operator).
#[utoipa::path(post, path = "/api/v1/shares", tag = "shares", request_body = CreateShare,
    responses((status = 201, description = "Created", body = ShareOut), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateShare>,
) -> ApiResult<(StatusCode, Json<ShareOut>)> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    let new = NewShare {
        name: req.name,
        comment: req.comment,
        quota_bytes: req.quota_bytes,
        read_only: req.read_only,
        encrypt: req.encrypt,
        guest_ok: req.guest_ok,
        continuously_available: req.continuously_available,
        users: req.users,
    };
    let share = state
        .db
        .call(move |db| {
            let share = db.create_share(&actor, &new, |dataset| pool.create_dataset(dataset))?;
            pool.register_share(&share);
            Ok(share)
        })
        .await?;
    state.notify(ConfigChange::Shares);
    Ok((StatusCode::CREATED, Json(share_out(&state, share))))
}

/// Lists shares with usage (viewer).
#[utoipa::path(get, path = "/api/v1/shares", tag = "shares",
    responses((status = 200, description = "Shares", body = Vec<ShareOut>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<ShareOut>>> {
    auth.require(Role::Viewer)?;
    let shares = state.db.call(|db| db.list_shares()).await?;
    Ok(Json(
        shares.into_iter().map(|s| share_out(&state, s)).collect(),
    ))
}

/// One share (viewer).
#[utoipa::path(get, path = "/api/v1/shares/{name}", tag = "shares",
    params(("name" = String, Path, description = "Share name")),
    responses((status = 200, description = "The share", body = ShareOut), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<ShareOut>> {
    auth.require(Role::Viewer)?;
    let lookup = name.clone();
    let share = state.db.call(move |db| db.find_share(&lookup)).await?;
    share
        .map(|s| Json(share_out(&state, s)))
        .ok_or_else(|| Problem::not_found(format!("share {name} not found")))
}

/// Changes a share's quota, flags or access list (operator).
#[utoipa::path(patch, path = "/api/v1/shares/{name}", tag = "shares", request_body = UpdateShare,
    params(("name" = String, Path, description = "Share name")),
    responses((status = 200, description = "Updated", body = ShareOut), AuthErrors, BodyErrors, NotFound),
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateShare>,
) -> ApiResult<Json<ShareOut>> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    let update = ShareUpdate {
        comment: req.comment,
        quota_bytes: req.quota_bytes,
        read_only: req.read_only,
        encrypt: req.encrypt,
        guest_ok: req.guest_ok,
        continuously_available: req.continuously_available,
        users: req.users,
    };
    let share = state
        .db
        .call(move |db| {
            let share = db.update_share(&actor, &name, &update)?;
            pool.register_share(&share);
            Ok(share)
        })
        .await?;
    state.notify(ConfigChange::Shares);
    Ok(Json(share_out(&state, share)))
}

/// Deletes a share and its files (operator).
#[utoipa::path(delete, path = "/api/v1/shares/{name}", tag = "shares",
    params(("name" = String, Path, description = "Share name")),
    responses((status = 204, description = "Deleted, with its files"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    state
        .db
        .call(move |db| {
            let share = db.delete_share(&actor, &name)?;
            if let Err(e) = pool.remove_share(&share) {
                // The record is gone; leftover files are reported, not fatal.
                tracing::error!(share = %share.name, error = %e, "removing share files failed");
            }
            Ok(())
        })
        .await?;
    state.notify(ConfigChange::Shares);
    Ok(StatusCode::NO_CONTENT)
}
