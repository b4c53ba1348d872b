//! NVMe-oF subsystems, allowed hosts and namespaces. A namespace is visible to a
//! connecting host as soon as its POST returns.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::{rfc3339, Namespace, Role, Subsystem};
use crate::state::{AppState, ConfigChange};

/// Subsystem creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSubsystem {
    /// NVMe Qualified Name (`nqn.` prefix, at most 223 bytes).
    #[schema(pattern = r"^nqn\.[!-~]+$", min_length = 5, max_length = 223)]
    pub nqn: String,
    /// Allow every host.
    #[serde(default)]
    pub allow_any_host: bool,
    /// Allowed host NQNs.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// Subsystem change request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSubsystem {
    /// Allow every host.
    pub allow_any_host: Option<bool>,
    /// Replace the allowed host list.
    pub hosts: Option<Vec<String>>,
}

/// Namespace creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddNamespace {
    /// Backing volume.
    pub volume: String,
    /// Namespace id (1-1024); the lowest free one when absent.
    #[schema(minimum = 1, maximum = 1024)]
    pub nsid: Option<u32>,
}

/// A namespace.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamespaceOut {
    /// Namespace id.
    pub nsid: u32,
    /// Backing volume.
    pub volume: String,
    /// Namespace UUID.
    pub uuid: String,
}

/// A subsystem.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubsystemOut {
    /// NQN.
    pub nqn: String,
    /// Serial number.
    pub serial: String,
    /// Every host allowed.
    pub allow_any_host: bool,
    /// Allowed hosts.
    pub hosts: Vec<String>,
    /// Namespaces.
    pub namespaces: Vec<NamespaceOut>,
    /// RFC 3339.
    pub created_at: String,
}

impl From<Namespace> for NamespaceOut {
    fn from(n: Namespace) -> NamespaceOut {
        NamespaceOut {
            nsid: n.nsid,
            volume: n.volume,
            uuid: n.uuid.to_string(),
        }
    }
}

impl From<Subsystem> for SubsystemOut {
    fn from(s: Subsystem) -> SubsystemOut {
        SubsystemOut {
            nqn: s.nqn,
            serial: s.serial,
            allow_any_host: s.allow_any_host,
            hosts: s.hosts,
            namespaces: s.namespaces.into_iter().map(NamespaceOut::from).collect(),
            created_at: rfc3339(s.created_at),
        }
    }
}

/// Creates a subsystem (operator).
#[utoipa::path(post, path = "/api/v1/nvme/subsystems", tag = "nvme", request_body = CreateSubsystem,
    responses((status = 201, description = "Created", body = SubsystemOut), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateSubsystem>,
) -> ApiResult<(StatusCode, Json<SubsystemOut>)> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let s = state
        .db
        .call(move |db| db.create_subsystem(&actor, &req.nqn, req.allow_any_host, &req.hosts))
        .await?;
    state.notify(ConfigChange::Subsystems);
    Ok((StatusCode::CREATED, Json(s.into())))
}

/// Lists subsystems (viewer).
#[utoipa::path(get, path = "/api/v1/nvme/subsystems", tag = "nvme",
    responses((status = 200, description = "Subsystems", body = Vec<SubsystemOut>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<SubsystemOut>>> {
    auth.require(Role::Viewer)?;
    let subs = state.db.call(|db| db.list_subsystems()).await?;
    Ok(Json(subs.into_iter().map(SubsystemOut::from).collect()))
}

/// One subsystem (viewer).
#[utoipa::path(get, path = "/api/v1/nvme/subsystems/{nqn}", tag = "nvme",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    responses((status = 200, description = "The subsystem", body = SubsystemOut), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(nqn): ApiPath<String>,
) -> ApiResult<Json<SubsystemOut>> {
    auth.require(Role::Viewer)?;
    let lookup = nqn.clone();
    let s = state.db.call(move |db| db.subsystem(&lookup)).await?;
    s.map(|s| Json(s.into()))
        .ok_or_else(|| Problem::not_found(format!("subsystem {nqn} not found")))
}

/// Changes a subsystem's host access (operator).
#[utoipa::path(patch, path = "/api/v1/nvme/subsystems/{nqn}", tag = "nvme", request_body = UpdateSubsystem,
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    responses((status = 200, description = "Updated", body = SubsystemOut), AuthErrors, BodyErrors, NotFound),
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(nqn): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateSubsystem>,
) -> ApiResult<Json<SubsystemOut>> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let s = state
        .db
        .call(move |db| db.update_subsystem(&actor, &nqn, req.allow_any_host, req.hosts.as_deref()))
        .await?;
    state.notify(ConfigChange::Subsystems);
    Ok(Json(s.into()))
}

/// Deletes a subsystem (operator); its volumes stay.
#[utoipa::path(delete, path = "/api/v1/nvme/subsystems/{nqn}", tag = "nvme",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    responses((status = 204, description = "Deleted"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(nqn): ApiPath<String>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    state
        .db
        .call(move |db| db.delete_subsystem(&actor, &nqn))
        .await?;
    state.notify(ConfigChange::Subsystems);
    Ok(StatusCode::NO_CONTENT)
}

/// Exports a volume as a namespace (operator).
#[utoipa::path(post, path = "/api/v1/nvme/subsystems/{nqn}/namespaces", tag = "nvme", request_body = AddNamespace,
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    responses((status = 201, description = "Added", body = NamespaceOut), AuthErrors, BodyErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn add_namespace(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(nqn): ApiPath<String>,
    ApiJson(req): ApiJson<AddNamespace>,
) -> ApiResult<(StatusCode, Json<NamespaceOut>)> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let ns = state
        .db
        .call(move |db| db.add_namespace(&actor, &nqn, &req.volume, req.nsid))
        .await?;
    state.notify(ConfigChange::Subsystems);
    Ok((StatusCode::CREATED, Json(ns.into())))
}

/// Removes a namespace (operator); the volume stays.
#[utoipa::path(delete, path = "/api/v1/nvme/subsystems/{nqn}/namespaces/{nsid}", tag = "nvme",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("nsid" = u32, Path, description = "Namespace id")),
    responses((status = 204, description = "Removed"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn remove_namespace(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath((nqn, nsid)): ApiPath<(String, u32)>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    state
        .db
        .call(move |db| db.remove_namespace(&actor, &nqn, nsid))
        .await?;
    state.notify(ConfigChange::Subsystems);
    Ok(StatusCode::NO_CONTENT)
}
