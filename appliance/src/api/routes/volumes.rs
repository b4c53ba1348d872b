//! Block volumes in the pool (exported through NVMe subsystems).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::{rfc3339, Role, Volume};
use crate::state::{AppState, ConfigChange};

/// Volume creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// Name: 1-64 of `A-Z a-z 0-9 . _ -`.
    #[schema(
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        min_length = 1,
        max_length = 64
    )]
    pub name: String,
    /// Size: a multiple of 4096, at least 1 MiB. Required unless `from_snapshot` is
    /// given (a clone takes the snapshot's size).
    #[schema(minimum = 1048576, maximum = 1125899906842624u64, multiple_of = 4096)]
    pub size_bytes: Option<u64>,
    /// Clone this volume snapshot (id from `/api/v1/snapshots`; managed pool only).
    pub from_snapshot: Option<i64>,
}

/// Volume resize request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolume {
    /// New size (volumes only grow).
    #[schema(minimum = 1048576, maximum = 1125899906842624u64, multiple_of = 4096)]
    pub size_bytes: u64,
}

/// A volume.
#[derive(Debug, Serialize, ToSchema)]
pub struct VolumeOut {
    /// Name.
    pub name: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Stable identity.
    pub uuid: String,
    /// RFC 3339.
    pub created_at: String,
}

impl From<Volume> for VolumeOut {
    fn from(v: Volume) -> VolumeOut {
        VolumeOut {
            name: v.name,
            size_bytes: v.size_bytes,
            uuid: v.uuid.to_string(),
            created_at: rfc3339(v.created_at),
        }
    }
}

/// Creates a sparse volume (operator).
#[utoipa::path(post, path = "/api/v1/volumes", tag = "volumes", request_body = CreateVolume,
    responses((status = 201, description = "Created", body = VolumeOut), AuthErrors, BodyErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateVolume>,
) -> ApiResult<(StatusCode, Json<VolumeOut>)> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    if req.from_snapshot.is_some() && !pool.is_btrfs() {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "cloning a snapshot needs the managed pool",
        ));
    }
    let vol = state
        .db
        .call(move |db| match req.from_snapshot {
            Some(id) => {
                let snap = db
                    .snapshot(id)?
                    .filter(|s| s.volume.is_some())
                    .ok_or_else(|| crate::db::DbError::NotFound(format!("volume snapshot {id}")))?;
                let size = pool
                    .snapshot_size(&snap.path)
                    .map_err(|e| crate::db::DbError::io(format!("reading snapshot {id}"), e))?;
                if req.size_bytes.is_some_and(|s| s != size) {
                    return Err(crate::db::DbError::Invalid(format!(
                        "a clone has its snapshot's size ({size} bytes); resize it afterwards"
                    )));
                }
                db.create_volume(&actor, &req.name, size, || {
                    pool.clone_volume(&snap.path, &req.name)
                })
            }
            None => {
                let size = req
                    .size_bytes
                    .ok_or_else(|| crate::db::DbError::Invalid("size_bytes is required".into()))?;
                db.create_volume(&actor, &req.name, size, || {
                    pool.create_volume(&req.name, size)
                })
            }
        })
        .await?;
    state.notify(ConfigChange::Volumes);
    Ok((StatusCode::CREATED, Json(vol.into())))
}

/// Lists volumes (viewer).
#[utoipa::path(get, path = "/api/v1/volumes", tag = "volumes",
    responses((status = 200, description = "Volumes", body = Vec<VolumeOut>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<VolumeOut>>> {
    auth.require(Role::Viewer)?;
    let vols = state.db.call(|db| db.list_volumes()).await?;
    Ok(Json(vols.into_iter().map(VolumeOut::from).collect()))
}

/// One volume (viewer).
#[utoipa::path(get, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, description = "The volume", body = VolumeOut), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<VolumeOut>> {
    auth.require(Role::Viewer)?;
    let lookup = name.clone();
    let vol = state.db.call(move |db| db.find_volume(&lookup)).await?;
    vol.map(|v| Json(v.into()))
        .ok_or_else(|| Problem::not_found(format!("volume {name} not found")))
}

/// Grows a volume (operator).
#[utoipa::path(patch, path = "/api/v1/volumes/{name}", tag = "volumes", request_body = ResizeVolume,
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, description = "Resized", body = VolumeOut), AuthErrors, BodyErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn resize(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<ResizeVolume>,
) -> ApiResult<Json<VolumeOut>> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    let vol = state
        .db
        .call(move |db| {
            db.resize_volume(&actor, &name, req.size_bytes, || {
                pool.resize_volume(&name, req.size_bytes)
            })
        })
        .await?;
    state.notify(ConfigChange::Volumes);
    Ok(Json(vol.into()))
}

/// Deletes a volume and its data (operator); refused while exported.
#[utoipa::path(delete, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 204, description = "Deleted"), AuthErrors, NotFound, Conflict),
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
            let vol = db.delete_volume(&actor, &name)?;
            if let Err(e) = pool.delete_volume(&vol.name) {
                tracing::error!(volume = %vol.name, error = %e, "removing volume file failed");
            }
            Ok(())
        })
        .await?;
    state.notify(ConfigChange::Volumes);
    Ok(StatusCode::NO_CONTENT)
}
